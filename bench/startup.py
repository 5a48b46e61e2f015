"""How long a kbctl command takes from process start to exit, the way a user's shell or a CI step runs it.

    python bench/startup.py [--runs 7]

In a fresh `KBCTL_HOME` (its embedded server started and the examples applied before timing, so `get` lists
three knowledge bases and `query` finds them), runs each command `--runs` times, interleaved, through the
installed `kbctl` script, and prints the median and the fastest wall time next to floors measured in the same
run: the Python interpreter alone, `import psycopg` (what any command that reads the store pays), and that plus
what typer loads to parse any command's arguments (its pydantic-based coercion): the floor of `get`. The
commands read Python's bytecode cache, as every run after a user's first does, even where the environment sets
PYTHONDONTWRITEBYTECODE (then each run would compile kbctl's modules again).

A query also runs beside `python -c 'import fastembed'`: what every query paid before kbctl ran its local
models' ONNX files itself (kbctl.embedding.onnx_text).

Goals: `kbctl --help` <= 0.3 s, `kbctl get kb` <= 0.5 s, `kbctl version` <= 0.2 s, `kbctl query` <= 0.8 s (process
start and the model's load included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbctl.store.embedded import stop_server  # noqa: E402

GOALS = {
    "kbctl --help": 0.3,
    "kbctl get kb": 0.5,
    "kbctl version": 0.2,
    "kbctl query --mode keyword": 0.8,
    "kbctl query (model load)": 0.8,
}


def kbctl_script() -> str:
    script = Path(sys.executable).with_name("kbctl")
    if not script.exists():
        raise SystemExit(f"no kbctl script beside {sys.executable}: install the project in this environment")
    return str(script)


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    kbctl = kbctl_script()
    home = Path(tempfile.mkdtemp(prefix="kbctl-startup-"))
    env = {**os.environ, "KBCTL_HOME": str(home)}
    env.pop("KBCTL_DATABASE_URL", None)
    # Python caches each module's bytecode on its first import unless told not to; a user's second run reads it.
    # With caching disabled (PYTHONDONTWRITEBYTECODE) every run compiles kbctl's own modules again (~0.1 s of a
    # command that reads the store), which is not what users see: the children run with Python's default.
    uncached = env.pop("PYTHONDONTWRITEBYTECODE", None) is not None
    commands: dict[str, list[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import psycopg'": [sys.executable, "-c", "import psycopg"],
        "floor of get: typer parsing + psycopg": [sys.executable, "-c", "import typer._adapters, psycopg"],
        "python -c 'import fastembed'": [sys.executable, "-c", "import fastembed"],
        "kbctl version": [kbctl, "version"],
        "kbctl --version": [kbctl, "--version"],
        "kbctl --help": [kbctl, "--help"],
        "kbctl get kb --help": [kbctl, "get", "--help"],
        "kbctl validate -f examples/kb/": [kbctl, "validate", "-f", "examples/kb/"],
        "kbctl get kb": [kbctl, "get", "kb"],
        "kbctl get kb -o json": [kbctl, "get", "kb", "-o", "json"],
        "kbctl describe kb": [kbctl, "describe", "kb", "client-service-policy"],
        "kbctl query --mode keyword": [
            kbctl,
            "query",
            "client-service-policy",
            "how long do we keep invoices",
            "--mode",
            "keyword",
        ],
        "kbctl query (model load)": [kbctl, "query", "client-service-policy", "how long do we keep invoices"],
    }
    try:
        print("preparing: applying examples/kb/ in a fresh store ...", file=sys.stderr)
        timed([kbctl, "apply", "-f", "examples/kb/", "--wait"], env)
        samples: dict[str, list[float]] = {label: [] for label in commands}
        for argv in commands.values():  # one warm-up of each (page cache), not counted
            timed(argv, env)
        for _ in range(args.runs):
            for label, argv in commands.items():
                samples[label].append(timed(argv, env))
    finally:
        stop_server(home / "pg")
    floor = statistics.median(samples["python -c pass"])
    print(f"{args.runs} runs each, interleaved, embedded server running, {os.cpu_count()} cores")
    if uncached:
        print("(PYTHONDONTWRITEBYTECODE was set here: unset for the commands timed, so they read cached bytecode)")
    print(f"{'command':40} {'median s':>9} {'min s':>7} {'vs python':>10} {'goal s':>7}")
    for label, values in samples.items():
        median = statistics.median(values)
        goal = GOALS.get(label)
        verdict = "" if goal is None else f"{goal:7.2f} {'met' if median <= goal else 'MISSED'}"
        print(f"{label:40} {median:9.3f} {min(values):7.3f} {median / floor:9.1f}x {verdict}")


if __name__ == "__main__":
    main()
