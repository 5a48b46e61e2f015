"""An interrupted `apply --wait` finished by a `kbctl controller` process: the embedded server stopped or killed.

    python bench/interrupted_apply.py [--rounds 2] [--how both|stop|kill] [--files 40] [--sections 8]

Real processes, as tests/reliability/test_controller_recovers.py runs them, each round in a fresh KBCTL_HOME on the
embedded server: a knowledge base with a `path:` source of one small Markdown file is applied (`kbctl apply -f kb.yaml
--wait`, version 1); `--files` new files of `--sections` sections (one chunk a section) are written; a `kbctl
controller --poll-interval 1s` starts, then `kbctl apply -f kb.yaml --wait` again. Once 40 new vectors are cached
(the apply is embedding), the database is stopped (`--how stop`: `pg_ctl stop`, as `kbctl server stop`) or its
postmaster killed (`--how kill`: SIGKILL); with `both` (the default) the rounds alternate. The script only reads the
store (never starting the server); nothing but the controller starts it again.

Per round: the new vectors cached when the database went down; how long `pg_ctl stop` took; seconds from the
server's death (the stop returned, or the SIGKILL was sent) to a new postmaster accepting connections, and from then
to version 2 published and reconciled (current_version = 2, generation = observed_generation) and its chunk count;
whether the controller recorded ApplyResumed; the interrupted apply's exit code and when it exited. At the end, per
mode, min / median / max of both figures against issue 57's goals: the server back within 10 s of dying, the change
finished within 30 s of the database's return. `--logs DIR` keeps each round's controller and apply output.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.errors import StoreError
from kbctl.store.embedded import stop_server
from tests.support.recovery import read_running, write_policies
from tests.support.serveproc import kbctl_env

RESTART_GOAL = 10.0  # s from the server's death to it accepting connections again
FINISH_GOAL = 30.0  # s from the database's return to the change published and reconciled
STOP_AFTER = 40  # new vectors cached before the database is stopped: the apply is embedding

MANIFEST = (
    "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: policies}\n"
    "spec:\n  sources:\n    - {name: docs, path: docs/}\n"
)


@dataclass
class Round:
    how: str
    cached_at_stop: int = 0
    restarted: float | None = None  # s, death -> accepting connections
    finished: float | None = None  # s, accepting connections -> version 2 reconciled
    resumed_event: bool = False
    apply_exit: int | None = None
    apply_ended: float | None = None  # s from the death to the interrupted apply's exit
    chunks: int | None = None  # chunks of version 2
    stop_seconds: float = 0.0  # how long `pg_ctl stop` took (the death counts from its return)
    note: str = ""
    failed: bool = False


def postmaster_pid(home: Path) -> int | None:
    try:
        return int((home / "pg" / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def until(check: Callable[[], bool], timeout: float, every: float) -> float | None:
    """The monotonic time at which `check()` first held, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(every)
    return None


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, leaving out the controller's one line per source made ready."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "    (no log)"
    kept = [line for line in text if not (" source " in line and " ready: " in line)]
    return "\n".join("    " + line for line in kept[-lines:])


def run(how: str, files: int, sections: int, timeout: float, logs: Path | None, number: int) -> Round:
    result = Round(how)
    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-home-"))
    work = Path(tempfile.mkdtemp(prefix="kbctl-bench-work-"))
    env = kbctl_env(home, None)
    kbctl = [sys.executable, "-m", "kbctl"]
    ctl_log, apply_log = work / "controller.log", work / "apply.log"
    controller: subprocess.Popen[bytes] | None = None
    applying: subprocess.Popen[bytes] | None = None
    try:
        folder = work / "docs"
        write_policies(folder, 1, 1)
        manifest = work / "kb.yaml"
        manifest.write_text(MANIFEST)
        apply = [*kbctl, "apply", "-f", str(manifest), "--wait"]
        first = subprocess.run(apply, env=env, capture_output=True, text=True, timeout=600)
        if first.returncode != 0:
            raise RuntimeError(f"the first apply failed: {first.stdout}{first.stderr}")
        cached = read_running(home, "SELECT count(*) FROM kb_embeddings")
        assert cached is not None
        write_policies(folder, files, sections)

        with ctl_log.open("wb") as log:
            controller = subprocess.Popen(
                [*kbctl, "controller", "--poll-interval", "1s"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        if until(lambda: "running" in ctl_log.read_text(errors="replace"), 120, 0.2) is None:
            raise RuntimeError(f"the controller did not start:\n{tail(ctl_log)}")
        with apply_log.open("wb") as log:
            applying = subprocess.Popen(apply, env=env, stdout=log, stderr=subprocess.STDOUT)
        ended: list[float] = []

        def watch(proc: subprocess.Popen[bytes]) -> None:
            proc.wait()
            ended.append(time.monotonic())

        watcher = threading.Thread(target=watch, args=(applying,), daemon=True)
        watcher.start()

        def embedding() -> bool:
            if applying.poll() is not None:
                raise RuntimeError(f"the apply ended before {STOP_AFTER} new vectors:\n{tail(apply_log)}")
            row = read_running(home, "SELECT count(*) FROM kb_embeddings")
            result.cached_at_stop = int(row[0]) - int(cached[0]) if row else 0  # type: ignore[call-overload]
            return result.cached_at_stop >= STOP_AFTER

        if until(embedding, timeout, 0.1) is None:
            raise RuntimeError(f"fewer than {STOP_AFTER} new vectors after {timeout:g} s:\n{tail(apply_log)}")
        before = postmaster_pid(home)
        if how == "stop":
            started = time.monotonic()
            stop_server(home / "pg")
            result.stop_seconds = time.monotonic() - started
        else:
            assert before is not None
            os.kill(before, signal.SIGKILL)
        down = time.monotonic()

        back = until(
            lambda: postmaster_pid(home) not in (None, before) and read_running(home, "SELECT 1") == (1,), timeout, 0.05
        )
        if back is None:
            result.note, result.failed = f"server not back within {timeout:g} s", True
            return result
        result.restarted = back - down
        done = until(
            lambda: (
                read_running(
                    home,
                    "SELECT current_version, generation = observed_generation FROM kb_knowledge_bases"
                    " WHERE name = 'policies'",
                )
                == (2, True)
            ),
            timeout,
            0.1,
        )
        if done is not None:
            result.finished = done - back
        else:
            result.note, result.failed = f"version 2 not reconciled within {timeout:g} s", True
        chunks = read_running(
            home,
            "SELECT v.chunk_count FROM kb_versions v JOIN kb_knowledge_bases k ON k.id = v.kb_id"
            " WHERE k.name = 'policies' AND v.number = 2",
        )
        result.chunks = int(chunks[0]) if chunks else None  # type: ignore[call-overload]
        result.resumed_event = (
            read_running(home, "SELECT 1 FROM kb_events WHERE object_name = 'policies' AND reason = 'ApplyResumed'")
            is not None
        )
        try:
            result.apply_exit = applying.wait(timeout=120)
            watcher.join(timeout=5)
            result.apply_ended = ended[0] - down if ended else None
        except subprocess.TimeoutExpired:
            result.note, result.failed = result.note + "; the interrupted apply did not exit", True
        return result
    except RuntimeError as exc:
        result.note, result.failed = str(exc), True
        return result
    finally:
        if result.failed:
            result.note += f"\n  controller log, last lines:\n{tail(ctl_log)}"
        for proc in (applying, controller):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if (home / "pg").exists():
            try:
                stop_server(home / "pg")
            except StoreError as exc:
                print(f"  could not stop the server: {exc}", file=sys.stderr)
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for log_path in (ctl_log, apply_log):
                if log_path.exists():
                    shutil.copy(log_path, logs / f"round-{number}-{how}-{log_path.name}")
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def spread(values: list[float | None]) -> str:
    known = sorted(v for v in values if v is not None)
    if not known:
        return "-"
    text = f"{known[0]:.1f} / {statistics.median(known):.1f} / {known[-1]:.1f}"
    return text + (f" ({len(values) - len(known)} did not)" if len(known) < len(values) else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--how", choices=("both", "stop", "kill"), default="both")
    parser.add_argument("--files", type=int, default=40, help="new Markdown files of the second apply")
    parser.add_argument("--sections", type=int, default=8, help="sections (chunks) per new file")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each phase may take before giving up")
    parser.add_argument("--logs", type=Path, help="keep each round's controller and apply logs in this folder")
    args = parser.parse_args()
    modes = ("stop", "kill") if args.how == "both" else (args.how,)
    print(
        f"{args.files} new files x {args.sections} sections = {args.files * args.sections} new chunks;"
        f" the database stopped once {STOP_AFTER} new vectors are cached; {os.cpu_count()} cores"
    )
    print(
        f"{'round':>5}  {'how':<5}{'cached':>7}{'stop s':>7}{'death -> up s':>15}{'up -> v2 s':>12}"
        f"{'v2 chunks':>11}  {'ApplyResumed':<13}{'apply exit (s after death)':<26}"
    )
    rounds: list[Round] = []
    for i in range(args.rounds):
        r = run(modes[i % len(modes)], args.files, args.sections, args.timeout, args.logs, i + 1)
        rounds.append(r)
        resumed = "yes" if r.resumed_event else "no"
        exit_code = "-" if r.apply_exit is None else f"{r.apply_exit} ({figure(r.apply_ended)})"
        stopped = figure(r.stop_seconds) if r.how == "stop" else "-"
        chunks = "-" if r.chunks is None else str(r.chunks)
        print(
            f"{i + 1:>5}  {r.how:<5}{r.cached_at_stop:>7}{stopped:>7}{figure(r.restarted):>15}{figure(r.finished):>12}"
            f"{chunks:>11}  {resumed:<13}{exit_code:<26}",
            flush=True,
        )
        if r.note:
            print(f"  note: {r.note}", flush=True)

    print(
        f"\n{'how':<6}{'rounds':>7}  {'death -> up s (min / median / max)':<36}{'up -> v2 s (min / median / max)':<34}"
    )
    for how in modes:
        mine = [r for r in rounds if r.how == how]
        if mine:
            print(
                f"{how:<6}{len(mine):>7}  {spread([r.restarted for r in mine]):<36}"
                f"{spread([r.finished for r in mine]):<34}"
            )
    for label, goal, values in (
        ("server accepting connections within", RESTART_GOAL, [r.restarted for r in rounds]),
        ("change published and reconciled within", FINISH_GOAL, [r.finished for r in rounds]),
    ):
        met = bool(values) and all(v is not None and v <= goal for v in values)
        worst = max((v for v in values if v is not None), default=None)
        print(f"goal: {label} {goal:g} s: {'met' if met else 'not met'} (worst {figure(worst)} s of {len(values)})")
    recorded = sum(r.resumed_event for r in rounds)
    print(f"ApplyResumed recorded in {recorded} of {len(rounds)} rounds")


if __name__ == "__main__":
    main()
