"""`python -m kbctl.manifest [--write-schema PATH]` prints or writes the KnowledgeBase JSON Schema."""

from kbctl.manifest.load import _main

raise SystemExit(_main())
