"""The first apply's peak memory with the new documents ingested in slices and all at once, alternating in one run.

    python bench/first_apply_memory.py [--chunks 100000] [--slices 16000000,0] [--rounds 1]

Writes scale.py's corpus in its files layout (Markdown files behind path sources of 10,000 files each, ~11 chunks a
file) and applies it with the real CLI into a fresh store for each arm and round, through the same loopback stand-in
embedder, timed from outside with its peak RSS (wait4). An arm is the number of characters one slice of new documents
holds (kbctl.engine.ingest.SLICE_CHARS, set in the child process before the CLI runs); 0 means one slice for
everything: how kbctl ingested before slices. The vector index is built in the embedded server, outside the
client's memory; the wall time includes it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embed_http import KEY, KEY_VAR, server_process, standin_config  # the stand-in server, shared
from scale import SECTIONS_PER_SOURCE, source_text, write_files

from kbctl.store.embedded import stop_server

# The CLI in a child process, with the slice size of the arm (argv[1]; 0: one slice for everything).
CHILD = (
    "import sys; import kbctl.engine.ingest as ingest; size = int(sys.argv.pop(1)); "
    "ingest.SLICE_CHARS = size or 10**15; from kbctl.cli import main; sys.argv[0] = 'kbctl'; main()"
)


def apply(env: dict[str, str], slice_chars: int, manifest: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of `kbctl apply -f MANIFEST --wait` with this slice size."""
    with tempfile.NamedTemporaryFile(prefix="kbctl-memory-", suffix=".out") as log:
        start = time.perf_counter()
        args = [sys.executable, "-c", CHILD, str(slice_chars), "apply", "-f", str(manifest), "--wait"]
        output = [(os.POSIX_SPAWN_OPEN, 1, log.name, os.O_WRONLY | os.O_TRUNC, 0o600), (os.POSIX_SPAWN_DUP2, 1, 2)]
        pid = os.posix_spawn(sys.executable, args, env, file_actions=output)
        _, status, usage = os.wait4(pid, 0)
        elapsed = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"apply failed: {Path(log.name).read_text()[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--slices", default="16000000,0", help="slice sizes in characters, 0: one slice")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    arms = [int(s) for s in args.slices.split(",")]
    sources = max(1, round(args.chunks / (SECTIONS_PER_SOURCE + 1)))
    work = Path(tempfile.mkdtemp(prefix="kbctl-memory-work-"))
    rng = random.Random(42)
    texts = [source_text(rng, i) for i in range(sources)]
    manifest = write_files(work, texts, "standin")
    size = sum(len(t.encode()) for t in texts) / 1e6
    del texts
    print(
        f"corpus: {sources} files, {size:.1f} MB, ~{sources * (SECTIONS_PER_SOURCE + 1)} chunks; {os.cpu_count()} cores"
    )
    print(f"{'slice (chars)':>16}{'round':>7}{'wall s':>9}{'peak MB':>9}")
    figures: dict[int, list[tuple[float, float]]] = {arm: [] for arm in arms}
    try:
        with server_process("none", 0.0) as url:
            config = standin_config(work / "config.yaml", url)
            for round_ in range(1, args.rounds + 1):
                for arm in arms:
                    home = work / f"home-{arm}-{round_}"
                    env = {**os.environ, "KBCTL_HOME": str(home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY}
                    env.pop("KBCTL_DATABASE_URL", None)
                    try:
                        elapsed, rss = apply(env, arm, manifest)
                    finally:
                        stop_server(home / "pg")
                        shutil.rmtree(home, ignore_errors=True)
                    figures[arm].append((elapsed, rss))
                    print(f"{arm or 'one slice':>16}{round_:>7}{elapsed:>9.1f}{rss:>9.0f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(rss for _, rss in figures[arms[-1]])
    for arm in arms:
        peak = statistics.median(rss for _, rss in figures[arm])
        wall = statistics.median(w for w, _ in figures[arm])
        print(f"median {arm or 'one slice':>9}: {wall:.1f} s, peak {peak:.0f} MB ({peak / base:.2f}x of the last arm)")


if __name__ == "__main__":
    main()
