"""What `kbctl ask` adds to retrieval, and what the no-context rule saves, measured side by side in one run.

The example knowledge bases are applied in a fresh embedded store; every question of examples/eval is then
asked in turn, in-process with the model loaded, as:
- `context`  : retrieval and the grounded block (what an agent that calls its own model pays first);
- `ask`      : the same plus the chat call to a loopback OpenAI-compatible stand-in answering at once, so
               the difference is kbctl's own cost (prompt, HTTP round trip, citation check), not a model's;
- `ask new conn`: the same on a new connection each time (what a client built per call would pay);
- `ask stream`: the same, streamed (server-sent events);
- `ask +Xms` : the stand-in waiting X ms per answer, as a fast hosted model might.
Questions for which nothing passes the threshold are answered without any request: the run counts them.

    python bench/ask.py [--rounds 3] [--model-ms 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.eval.evalset import load_evalset
from kbctl.store.embedded import stop_server
from kbctl.userconfig import ConfigFile
from tests.support.chatserver import serve_chat

ROOT = Path(__file__).resolve().parent.parent


def _ms(fn: Callable[[str, str], object], kb: str, question: str) -> float:
    start = time.perf_counter()
    fn(kb, question)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="times each question is asked per way")
    parser.add_argument("--model-ms", type=int, default=300, help="the stand-in's wait per answer in the last row")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-ask-"))
    questions = [
        (evalset.knowledge_base or "", q.question)
        for path in sorted((ROOT / "examples" / "eval").glob("*.yaml"))
        for evalset in [load_evalset(str(path))]
        for q in evalset.queries
    ]
    try:
        with serve_chat() as chat:
            config = ConfigFile.model_validate({"chat": {"providers": {"stand-in": {"baseURL": chat.url}}}})
            settings = replace(Settings.from_env(home=home), config=config, config_file=home / "config.yaml")
            with KnowledgeBaseStore(settings=settings) as store:
                store.apply_paths([str(ROOT / "examples" / "kb")])
                model = "stand-in/chat-test-v1"
                store.context(*questions[0])  # load the model
                chat_model = store.chat_model(model)

                def fresh(kb: str, q: str) -> object:
                    chat_model.close()  # type: ignore[attr-defined]  # HttpChatModel: drop the kept connection
                    return store.ask(kb, q, model=model)

                ways: dict[str, Callable[[str, str], object]] = {
                    "context": lambda kb, q: store.context(kb, q),
                    "ask": lambda kb, q: store.ask(kb, q, model=model),
                    "ask new conn": fresh,
                    "ask stream": lambda kb, q: store.ask(kb, q, model=model, on_text=lambda piece: None),
                }
                rows: dict[str, list[float]] = {way: [] for way in ways}
                for _ in range(args.rounds):  # interleaved: every way asks each question in turn
                    for kb, q in questions:
                        for way, fn in ways.items():
                            rows[way].append(_ms(fn, kb, q))
                before = chat.request_count
                results = [store.ask(kb, q, model=model) for kb, q in questions]
                requests = chat.request_count - before
                chat.latency = args.model_ms / 1000
                rows[f"ask +{args.model_ms}ms"] = [_ms(ways["ask"], kb, q) for kb, q in questions]
    finally:
        stop_server(home / "pg")
    no_context = sum(1 for r in results if r.reason == "noContext")
    print(f"{len(questions)} questions of examples/eval on the example knowledge bases, in-process, model loaded")
    print(f"{'way':<16}{'p50 ms':>9}{'p90 ms':>9}{'vs context':>12}")
    base = statistics.median(rows["context"])
    for way, times in rows.items():
        p50 = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{way:<16}{p50:>9.1f}{p90:>9.1f}{p50 / base:>11.2f}x")
    print(
        f"answered without any model request (nothing passed the threshold): {no_context} of {len(questions)}; "
        f"chat requests for {len(questions)} asks: {requests}"
    )


if __name__ == "__main__":
    main()
