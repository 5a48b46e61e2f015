"""`python -m kbctl` runs the command line."""

from kbctl.cli import main

main()
