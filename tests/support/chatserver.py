"""A real OpenAI-compatible `/v1/chat/completions` server on 127.0.0.1 that answers from the passages it receives.

Offered `tools` (an agent), it first calls the first function tool with the user's question, then answers from
the passages the tool results hold, as it answers a prompt that carries them."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import unescape

from tests.support.loopback import Answer, LoopbackRequest, LoopbackServer, Payload

if TYPE_CHECKING:
    from tests.support.loopback import _Action

__all__ = [
    "MODEL_NAME",
    "NOT_COVERED",
    "ChatRequest",
    "ChatServer",
    "ReplyFn",
    "answer_of",
    "content_words",
    "judgement_of",
    "parse_passages",
    "question_of",
    "serve_chat",
    "split_sentences",
    "user_content_of",
]

MODEL_NAME = "chat-test-v1"
NOT_COVERED = "The knowledge base does not cover this."
COMPLETIONS_PATH = "/v1/chat/completions"
PIECE = 8  # characters of TEXT per streamed content delta
VERDICTS = ("supported", "unsupported", "contradicted")
SUPPORT_SHARE = 0.6  # share of a claim's content words the cited passages must contain for "supported"

ChatRequest = LoopbackRequest  # one request the server received
ReplyFn = Callable[[dict[str, Any]], str]  # the request body -> the assistant's text

STOP_WORDS = frozenset(
    "what which when where does have with from that this there their about into your much many long should would"
    " could than then them they were been being".split()
)

_PASSAGE = re.compile(r"<passage ([^>]*)>\n(.*?)\n</passage>", re.DOTALL)
_ATTRIBUTE = re.compile(r"""([\w:-]+)=("[^"]*"|'[^']*')""")
_ANSWER = re.compile(r"<answer(?:\s[^>]*)?>\n?(.*?)\n?</answer>", re.DOTALL)
_REFERENCE_DATA = re.compile(r"<reference_data\b.*?</reference_data>", re.DOTALL)
_CITATION = re.compile(r"\[(\d+)\]")
_CITATIONS = re.compile(r"\s*\[\d+\]")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s*\[\d+\])*(?=\s|$)")  # a sentence ends after its trailing citations
_FIRST_SENTENCE = re.compile(r".*?[.!?](?=\s|$)")
_ATTRIBUTE_ENTITIES = {"&quot;": '"', "&apos;": "'", "&#10;": "\n", "&#13;": "\r", "&#9;": "\t"}


# ---- reading what kbctl sends ----


def _well_formed(message: Any) -> bool:
    """A message with a string role and string content; an assistant's that calls tools may have none."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return False
    if message["role"] == "assistant" and message.get("tool_calls") and message.get("content") is None:
        return True
    return isinstance(message.get("content"), str)


def _tool_call(body: dict[str, Any]) -> dict[str, Any] | None:
    """What a tool-calling model does first: with `tools` offered and no tool result since the last user message,
    call the first function tool with the user's question as its first string parameter. None otherwise."""
    tools = body.get("tools")
    messages = body["messages"]
    if not isinstance(tools, list) or not tools or messages[-1].get("role") != "user":
        return None
    function = tools[0].get("function", {}) if isinstance(tools[0], dict) else {}
    properties = function.get("parameters", {}).get("properties", {})
    strings = [
        name for name, schema in properties.items() if isinstance(schema, dict) and schema.get("type") == "string"
    ]
    if not isinstance(function.get("name"), str) or not strings:
        return None
    arguments = json.dumps({strings[0]: messages[-1]["content"]})
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def _with_tool_results(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as a one-turn question: the tool results (the passages a tool returned) then `Question: ...` with
    the last user message, when the conversation holds tool results; `body` itself otherwise."""
    messages = body["messages"]
    results = [m["content"] for m in messages if m["role"] == "tool" and isinstance(m.get("content"), str)]
    if not results:
        return body
    question = [m["content"] for m in messages if m["role"] == "user"][-1]
    return {**body, "messages": [{"role": "user", "content": "\n".join([*results, f"Question: {question}"])}]}


def user_content_of(body: Any) -> str:
    """The contents of every message with role "user" in a request body, joined by newlines ("" when none)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return ""
    parts = [
        m["content"]
        for m in messages
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str)
    ]
    return "\n".join(parts)


def parse_passages(text: str) -> list[tuple[int, str]]:
    """The (id, unescaped text) of every `<passage id="N" ...>` element in `text`, in the order they appear.
    Elements without an integer id are skipped."""
    passages: list[tuple[int, str]] = []
    for match in _PASSAGE.finditer(text):
        attributes = {name: unescape(value[1:-1], _ATTRIBUTE_ENTITIES) for name, value in _ATTRIBUTE.findall(match[1])}
        with suppress(KeyError, ValueError):
            passages.append((int(attributes["id"]), unescape(match[2])))
    return passages


def question_of(text: str) -> str:
    """The question in `text`: what follows the last line starting with "Question:" (stripped), or, without such a
    line, the text with its `<reference_data>` blocks removed."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Question:"):
            return "\n".join([lines[i].removeprefix("Question:"), *lines[i + 1 :]]).strip()
    return _REFERENCE_DATA.sub("", text).strip()


def content_words(text: str) -> list[str]:
    """The distinct lower-cased words of 4+ letters or digits in `text`, minus `STOP_WORDS`, in order."""
    words = [w for w in re.findall(r"[a-z0-9]{4,}", text.lower()) if w not in STOP_WORDS]
    return list(dict.fromkeys(words))


def _word_set(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped, empty ones dropped: each ends after `.`, `!` or `?` followed by whitespace
    or the end, with the citations `[N]` right after it ("Kept 7 years. [1] Then..." -> "Kept 7 years. [1]", ...)."""
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start : match.end()])
        start = match.end()
    sentences.append(text[start:])
    return [s.strip() for s in sentences if s.strip()]


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    match = _FIRST_SENTENCE.match(flat)
    return (match[0] if match else flat)[:300].strip()


def answer_of(content: str) -> str:
    """TEXT in answer mode (before `uncited` / `cite_extra`): the first sentence of each of the first two passages
    (in id order) that contain a content word of the question, each followed by " [ID]"; else `NOT_COVERED`."""
    wanted = set(content_words(question_of(content)))
    relevant = [(pid, text) for pid, text in sorted(parse_passages(content)) if wanted & _word_set(text)]
    if not relevant:
        return NOT_COVERED
    return " ".join(f"{_first_sentence(text)} [{pid}]" for pid, text in relevant[:2])


def _is_not_covered(answer: str) -> bool:
    return " ".join(answer.split()).lower() == NOT_COVERED.lower()


def judgement_of(content: str, verdict: str | None = None) -> dict[str, Any] | None:
    """The judge's answer to a judge call's user content: {"claims": [{"claim", "verdict", "passages"}]}, or None
    when `content` holds no `<answer>` element (then it is not a judge call).

    Each sentence of the answer is a claim; `passages` are its citations; it is "supported" when it cites a passage
    that was given and those passages contain at least 60% of its content words, else "unsupported" (`verdict`
    forces one verdict on every claim). An answer saying `NOT_COVERED` has no claims."""
    found = _ANSWER.search(content)
    if found is None:
        return None
    answer = unescape(found[1])
    if _is_not_covered(answer):
        return {"claims": []}
    given = dict(parse_passages(content))
    claims: list[dict[str, Any]] = []
    for sentence in split_sentences(answer):
        cited = list(dict.fromkeys(int(n) for n in _CITATION.findall(sentence)))
        claim = " ".join(_CITATIONS.sub("", sentence).split())
        if not claim:
            continue
        if verdict is None:
            known = [given[n] for n in cited if n in given]
            words = content_words(claim)
            present = _word_set(" ".join(known))
            share = sum(w in present for w in words) / len(words) if words else 1.0
            verdict_here = "supported" if known and share >= SUPPORT_SHARE else "unsupported"
        else:
            verdict_here = verdict
        claims.append({"claim": claim, "verdict": verdict_here, "passages": cited})
    return {"claims": claims}


# ---- the server ----


def _error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    error = {"message": message, "type": kind, "param": None, "code": code}
    return json.dumps({"error": error}).encode()


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> Answer:
    return status, {}, _error_body(message, kind, code)


def _is_event_stream(headers: dict[str, str]) -> bool:
    return any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in headers.items())


def _events(chunks: list[dict[str, Any] | str]) -> bytes:
    """The SSE body: `data: <json>` for each chunk (a str is sent as it is), each followed by a blank line."""
    lines = [c if isinstance(c, str) else json.dumps(c) for c in chunks]
    return b"".join(f"data: {line}\n\n".encode() for line in lines)


def _mangle_events(data: bytes, fn: Callable[[Any], Any]) -> bytes:
    """`fn` applied to every JSON chunk of an SSE body (in place when it returns None); other lines unchanged."""
    out = []
    for event in data.split(b"\n\n"):
        if event.startswith(b"data: ") and event != b"data: [DONE]":
            try:
                chunk = json.loads(event[6:])
            except ValueError:
                out.append(event)
                continue
            changed = fn(chunk)
            event = b"data: " + json.dumps(chunk if changed is None else changed).encode()
        out.append(event)
    return b"\n\n".join(out)


@dataclass(frozen=True)
class _Initial:
    """The knob values given to the constructor, which `reset()` restores."""

    model_name: str
    require_key: str | None
    strict_model: bool
    cite_extra: int | None
    uncited: bool
    reply: ReplyFn | None
    judge_verdict: str | None
    judge_reply: ReplyFn | None
    stream_gap: float


class ChatServer(LoopbackServer):
    """The server, its knobs and what it saw; use `serve_chat()` to start and stop it.

        with serve_chat() as server:                   # POST {server.url}/chat/completions
            server.fail_next(429, headers={"Retry-After": "0"})
            httpx.post(f"{server.url}/chat/completions", json={"model": server.model_name, "messages": [...]})
            assert "Question:" in server.last_user_content

    It answers POST /v1/chat/completions in OpenAI's format: {"id": "chatcmpl-...", "object": "chat.completion",
    "created", "model" (the one asked), "choices": [{"index": 0, "message": {"role": "assistant", "content"},
    "finish_reason": "stop"}], "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}} (whitespace-split
    word counts; the prompt is every message's content). With "stream": true it answers `text/event-stream`, sent
    chunk by chunk (Transfer-Encoding: chunked, one flush per event): a chunk with delta {"role": "assistant"}, the
    text in deltas {"content"} of 8 characters, a chunk with delta {} and finish_reason "stop", then, only when
    "stream_options": {"include_usage": true}, a chunk with "choices": [] and the usage (every other chunk then has
    "usage": null, as OpenAI sends it), then `data: [DONE]`. GET /v1/models lists the model.

    The text is deterministic, made from the `<passage id="N">` elements of the user content (see `answer_of`): the
    first sentence of each of the first two passages that share a content word with the question, cited " [N]",
    or `NOT_COVERED`. When the user content holds an `<answer>` element the request is a judge call and the text is
    the JSON of `judgement_of` (one claim per sentence of the answer, "supported" or "unsupported").

    Errors use OpenAI's body {"error": {"message", "type", "param", "code"}}: 400 for a body that is not a JSON
    object, a missing model, `messages` that is not a non-empty list of objects with string role and content, a
    "stream" that is not a boolean or "stream_options" without "stream": true; 401 when `require_key` is set and
    `Authorization: Bearer <key>` does not match (the message echoes the key sent, as some providers do); 404 for
    another model when `strict_model`, and for unknown paths.

    Knobs a test may change at any time: `latency` (seconds, or a function of the request), `require_key`,
    `model_name`, `strict_model`, `cite_extra` (append " [N]" to the text: a citation of a passage not given),
    `uncited` (strip every citation), `reply(body) -> str` (the exact answer text instead), `judge_verdict` (forced
    on every claim), `judge_reply(body) -> str` (the exact judge text instead), `stream_gap` (seconds between
    streamed events), and the one-shot queue `fail_next`, `bad_json_next`, `mangle_next`, `disconnect_next`
    (consumed in order, one entry per request; `mangle_next(fn)` gets the payload dict, or for a streamed answer
    each JSON chunk in turn). `bad_stream_next()` makes the next streamed answers carry a `data: {not json` event in
    the middle. Knobs given to the constructor are the ones `reset()` restores; it also forgets the requests.
    `python -m tests.support.chatserver [--latency S] [--require-key K]` serves until interrupted and prints its URL.
    """

    bad_json_body = b'{"id": "chatcmpl-0", "object": "chat.completion", "choices": [{"index": 0, "message": {"role'

    def __init__(
        self,
        *,
        model_name: str = MODEL_NAME,
        require_key: str | None = None,
        strict_model: bool = False,
        cite_extra: int | None = None,
        uncited: bool = False,
        reply: ReplyFn | None = None,
        judge_verdict: str | None = None,
        judge_reply: ReplyFn | None = None,
        stream_gap: float = 0.0,
        host: str = "127.0.0.1",
    ) -> None:
        if judge_verdict is not None and judge_verdict not in VERDICTS:
            raise ValueError(f"judge_verdict must be one of {VERDICTS}, not {judge_verdict!r}")
        self._initial = _Initial(
            model_name, require_key, strict_model, cite_extra, uncited, reply, judge_verdict, judge_reply, stream_gap
        )
        super().__init__(name="chatserver", host=host)
        self.url = f"{self.origin}/v1"

    def _defaults(self) -> None:
        super()._defaults()
        initial = self._initial
        self.model_name: str = initial.model_name  # the only model accepted when strict_model
        self.require_key: str | None = initial.require_key  # the expected bearer token; 401 for anything else
        self.strict_model: bool = initial.strict_model
        self.cite_extra: int | None = initial.cite_extra
        self.uncited: bool = initial.uncited
        self.reply: ReplyFn | None = initial.reply
        self.judge_verdict: str | None = initial.judge_verdict
        self.judge_reply: ReplyFn | None = initial.judge_reply
        self.stream_gap: float = initial.stream_gap
        self._bad_streams = 0

    # ---- knobs ----

    def bad_stream_next(self, times: int = 1) -> None:
        """Put a `data: {not json` event in the middle of the next `times` streamed answers."""
        with self._lock:
            self._bad_streams += times

    # ---- what the server saw ----

    @property
    def completions(self) -> list[ChatRequest]:
        """The POST /v1/chat/completions requests, oldest first (including the ones failed on purpose)."""
        return self._requests_to("POST", COMPLETIONS_PATH)

    @property
    def last_user_content(self) -> str:
        """The user content (see `user_content_of`) of the last completion request; LookupError before any."""
        completions = self.completions
        if not completions:
            raise LookupError("the chat server has received no completion request")
        return user_content_of(completions[-1].body)

    def expected_text(self, body: dict[str, Any]) -> str:
        """The assistant text the server sends for a request `body` with the knobs as they are now."""
        with self._lock:
            knobs = (self.cite_extra, self.uncited, self.reply, self.judge_verdict, self.judge_reply)
        return self._text(body, *knobs)

    # ---- serving ----

    def _fail_body(self, status: int) -> bytes:
        phrase = HTTPStatus(status).phrase
        if status == 429:
            return _error_body(phrase, "requests", "rate_limit_exceeded")
        if status == 401:
            return _error_body(phrase, "invalid_request_error", "invalid_api_key")
        if status < 500:
            return _error_body(phrase)
        return _error_body(phrase, "server_error")

    @staticmethod
    def _text(
        body: dict[str, Any],
        cite_extra: int | None,
        uncited: bool,
        reply: ReplyFn | None,
        judge_verdict: str | None,
        judge_reply: ReplyFn | None,
    ) -> str:
        content = user_content_of(body)
        if _ANSWER.search(content) is not None:
            if judge_reply is not None:
                return judge_reply(body)
            return json.dumps(judgement_of(content, judge_verdict))
        if reply is not None:
            return reply(body)
        text = answer_of(content)
        if uncited:
            text = " ".join(_CITATIONS.sub("", text).split())
        if cite_extra is not None:
            text = f"{text} [{cite_extra}]"
        return text

    def _answer(self, request: ChatRequest, parsed: bool) -> Answer | Payload:
        if request.method == "GET" and request.path == "/v1/models":
            listed = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "kbctl-tests"}
            return 200, {}, json.dumps({"object": "list", "data": [listed]}).encode()
        if request.method != "POST" or request.path != COMPLETIONS_PATH:
            return _error(404, f"Unknown request URL: {request.method} {request.path}")
        with self._lock:
            require_key, model_name, strict_model = self.require_key, self.model_name, self.strict_model
            knobs = (self.cite_extra, self.uncited, self.reply, self.judge_verdict, self.judge_reply)
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if require_key is not None and token != require_key:
            # Like some providers, echo what was sent: a client must never copy this text into its own errors.
            return _error(401, f"Incorrect API key provided: {token}", code="invalid_api_key")
        body = request.body
        if not parsed or not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return _error(400, "you must provide a model parameter")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(_well_formed(m) for m in messages):
            return _error(400, "'messages' must be a non-empty list of objects with a string role and content")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            return _error(400, "'stream' must be a boolean")
        options = body.get("stream_options")
        if options is not None and (not stream or not isinstance(options, dict)):
            return _error(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
        if strict_model and model != model_name:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return _error(404, message, code="model_not_found")
        call = _tool_call(body)
        text = "" if call else self._text(_with_tool_results(body), *knobs)
        prompt_tokens = sum(len((m["content"] or "").split()) for m in messages)
        completion_tokens = len(text.split())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        head: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": model}
        if call and not stream:
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        if call:
            return _error(400, "this stand-in calls tools only without streaming")
        if not stream:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        include_usage = bool(options and options.get("include_usage") is True)
        return (
            200,
            {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
            self._stream(head, text, usage if include_usage else None),
        )

    def _stream(self, head: dict[str, Any], text: str, usage: dict[str, int] | None) -> bytes:
        """The SSE body of a streamed answer (`usage`: send it in a last chunk, when asked for)."""

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            fields: dict[str, Any] = {**head, "object": "chat.completion.chunk", "choices": choices}
            if usage is not None:
                fields["usage"] = None  # OpenAI sends "usage": null in every chunk but the last
            return {**fields, **extra}

        def delta(d: dict[str, str], finish_reason: str | None = None) -> dict[str, Any]:
            return chunk([{"index": 0, "delta": d, "finish_reason": finish_reason}])

        chunks: list[dict[str, Any] | str] = [delta({"role": "assistant"})]
        chunks += [delta({"content": text[i : i + PIECE]}) for i in range(0, len(text), PIECE)]
        with self._lock:
            bad = self._bad_streams > 0
            if bad:
                self._bad_streams -= 1
        if bad:
            chunks.insert(max(1, len(chunks) // 2), "{not json")
        chunks.append(delta({}, "stop"))
        if usage is not None:
            chunks.append(chunk([], usage=usage))
        chunks.append("[DONE]")
        return _events(chunks)

    def _respond(self, request: ChatRequest, parsed: bool, action: _Action | None) -> Answer:
        """As the base class does, but a queued `mangle_next` changes every JSON chunk of a streamed answer."""
        if action is None or action.kind != "mangle" or action.mangle is None:
            return super()._respond(request, parsed, action)
        result = self._answer(request, parsed)
        if isinstance(result, tuple):
            status, headers, data = result
            if status == 200 and _is_event_stream(headers):
                return status, headers, _mangle_events(data, action.mangle)
            return result
        changed = action.mangle(result)
        return 200, {}, json.dumps(result if changed is None else changed).encode()

    def _write(self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        """Send one response; an event stream goes chunked, one chunk and flush per event (`stream_gap` between)."""
        if not _is_event_stream(headers):
            super()._write(h, status, headers, body)
            return
        with self._lock:
            gap = self.stream_gap
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        events = [event + b"\n\n" for event in body.split(b"\n\n") if event]
        for i, event in enumerate(events):
            if i and gap > 0 and self._stopping.wait(gap):
                h.close_connection = True  # closing: leave the stream unfinished
                return
            h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


# The server is its own context manager: `with serve_chat(...) as server:` starts it and stops it on the way out.
serve_chat = ChatServer


def main() -> None:
    """Serve until interrupted (`python -m tests.support.chatserver [--latency 0.05] [--require-key K]`)."""
    import argparse

    parser = argparse.ArgumentParser(description="A loopback OpenAI-compatible /v1/chat/completions server for tests.")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("--require-key", default=None, help="the bearer token to expect (401 otherwise)")
    parser.add_argument("--strict-model", action="store_true", help="404 for any model but --model-name")
    args = parser.parse_args()

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)  # leave the `with` below, so the server closes

    signal.signal(signal.SIGTERM, stop)
    with serve_chat(model_name=args.model_name, require_key=args.require_key, strict_model=args.strict_model) as server:
        server.latency = args.latency
        print(server.url, flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
