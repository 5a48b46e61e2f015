"""Print one of the two commands README.md gives a newcomer, so CI runs exactly what the README says.

    python3 .ci/readme_command.py install   # the first ```sh block: install, then apply the examples
    python3 .ci/readme_command.py test      # the second ```sh block: install with the test extra, run the suite

Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

WHICH = {"install": 0, "test": 1}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in WHICH:
        print(f"usage: {argv[0]} install|test", file=sys.stderr)
        return 2
    readme = Path(__file__).resolve().parent.parent / "README.md"
    blocks = [m.group(1).strip() for m in re.finditer(r"^```sh\n(.*?)^```", readme.read_text(), re.S | re.M)]
    if len(blocks) < 2 or any("\n" in b for b in blocks[:2]):
        print("README.md: expected two one-line ```sh blocks (install, test)", file=sys.stderr)
        return 1
    print(blocks[WHICH[argv[1]]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
