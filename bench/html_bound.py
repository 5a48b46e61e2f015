"""A large HTML file in a `path:` source: how long `kbctl apply` and `kbctl diff` take to refuse it, and their memory.

    python bench/html_bound.py [--mb 29] [--keep]

Generates a repository in a temporary folder (kb/site.yaml reading ../docs/, which holds one small Markdown
file and one generated HTML file of `--mb` MB of paragraphs, under the one-file read limit), then runs the real
CLI from outside in a fresh embedded store: `diff` (of a knowledge base not yet applied), `apply --wait`, then
`diff` again. Each command runs in a child process, timed from process start to exit, its peak RSS read through
wait4. The embedded server is started first by an untimed `kbctl get kb`, so its start-up is in no figure.
Prints wall time, peak RSS, exit code and the line each command printed about the HTML file. An apply that
embeds anything loads the local model: some 350 MB of its peak is the model's (`--mb 0.01` shows the floor).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.store.embedded import stop_server

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: site}
spec:
  sources:
    - name: docs
      path: ../docs/
"""
SMALL = "# Travel\n\nEconomy class for flights under 6 hours; business class above that.\n"
WORDS = (
    "invoice retention schedule archive contract supplier audit ledger payment refund notice clause record "
    "owner period trigger policy review approval customer account region office storage backup"
).split()


def paragraph(i: int) -> str:
    """One paragraph of text that differs from its neighbours (so the extractor cannot fold repeats)."""
    words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(24))
    return f"<p>Rule {i}: {words}.</p>\n"


def build(root: Path, megabytes: float) -> Path:
    """The repository: .git (the repository boundary), kb/site.yaml, docs/small.md and docs/big.html."""
    docs = root / "docs"
    docs.mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "kb").mkdir()
    (root / "kb" / "site.yaml").write_text(MANIFEST)
    (docs / "small.md").write_text(SMALL)
    target = int(megabytes * 1_000_000)
    with (docs / "big.html").open("w") as out:
        out.write("<html><head><title>Rules</title></head><body><main><h1>Rules</h1>\n")
        size, i = 0, 0
        while size < target:
            if i % 50 == 0:
                heading = f"<h2>Section {i // 50}</h2>\n"
                out.write(heading)
                size += len(heading)
            text = paragraph(i)
            out.write(text)
            size += len(text)
            i += 1
        out.write("</main></body></html>\n")
    return root / "kb" / "site.yaml"


def run(env: dict[str, str], cwd: Path, *args: str) -> tuple[float, float, int, str]:
    """The real CLI in a child process: (wall seconds, peak RSS MB, exit code, output)."""
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "kbctl", *args], env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
        )
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        out = log.read().decode("utf-8", errors="replace")
    return elapsed, usage.ru_maxrss / 1024, child.returncode, out


def about_big(out: str) -> str:
    """The line of a command's output about big.html (or its last line)."""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    found = [line for line in lines if "big.html" in line]
    return (found or lines or ["<no output>"])[-1][:200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=29.0, help="size of the generated HTML file, in MB")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbctl-bench-html-"))
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBCTL_")} | {"KBCTL_HOME": str(home)}
    rows = []
    try:
        manifest = str(build(root / "repo", args.mb))
        size = (root / "repo" / "docs" / "big.html").stat().st_size
        run(env, root, "get", "kb")  # starts the embedded server: its start-up is in no figure
        for label, command in (
            ("diff, new", ("diff", "-f", manifest)),
            ("apply --wait", ("apply", "-f", manifest, "--wait")),
            ("diff, applied", ("diff", "-f", manifest)),
        ):
            rows.append((label, *run(env, root, *command)))
    finally:
        stop_server(home / "pg")
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"docs/big.html: {size / 1_000_000:.1f} MB of HTML next to docs/small.md, the real CLI, a fresh store")
    print(f"{'command':<16}{'wall s':>8}{'peak MB':>9}{'exit':>6}  line about big.html")
    for label, wall, rss, code, out in rows:
        print(f"{label:<16}{wall:>8.2f}{rss:>9.0f}{code:>6}  {about_big(out)}")
    if args.keep:
        print(f"kept: {root}")


if __name__ == "__main__":
    main()
