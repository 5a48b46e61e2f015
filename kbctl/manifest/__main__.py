"""`python -m kbctl.manifest [--kind KnowledgeBase|Sync] [--write-schema PATH]` prints or writes a JSON Schema."""

from kbctl.manifest.load import _main

raise SystemExit(_main())
