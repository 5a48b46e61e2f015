"""A chat model behind any OpenAI-compatible `/v1/chat/completions` endpoint, streamed or not.

POST `{base}/chat/completions` `{"model", "messages", "stream", ...}`. Not streamed, the answer is
`{"choices": [{"message": {"content"}, "finish_reason"}], "usage", "model"}`; streamed, it is server-sent
events `data: {"choices": [{"delta": {"content"}}]}` ending with `data: [DONE]` (usage in a last chunk when
`stream_options.include_usage` is honoured). A server that ignores `stream` and answers JSON is read as JSON.

kbctl's one HTTP policy applies (`kbctl._http`): 429, 5xx, timeouts and connection errors are retried with
jittered backoff or the server's Retry-After, the key is read from its variable at each call and never
appears in a message. A streamed answer is retried only until its first piece has been passed on: after that,
a broken stream is an error (the caller has already shown part of the answer). Every response is bounded:
MAX_RESPONSE_BYTES read, MAX_LINE_BYTES per event line, MAX_SECONDS per attempt.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import Retrying

from kbctl._http import (
    CHAT_POLICY,
    BearerAuth,
    HttpPolicy,
    Retryable,
    bearer_auth,
    check_response,
    plural,
    tls_context,
    transport_failure,
    user_agent,
)
from kbctl.chat import ChatOptions, Completion, Message
from kbctl.errors import ChatError, UsageError
from kbctl.userconfig import redact

__all__ = ["MAX_LINE_BYTES", "MAX_RESPONSE_BYTES", "MAX_SECONDS", "HttpChatConfig", "HttpChatModel"]

MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # an answer (and its JSON or event framing) larger than this is refused
MAX_LINE_BYTES = 256 * 1024  # one server-sent event line
MAX_SECONDS = 600.0  # one attempt, from the request to the last piece of the answer
_ERROR_BODY_BYTES = 64 * 1024  # what is read of an error response to quote its message
_RESERVED_FIELDS = frozenset({"model", "messages", "stream", "stream_options"})


@dataclass(frozen=True)
class HttpChatConfig:
    """Where and how to chat over HTTP; it holds the NAME of the API key's variable, never the key."""

    base_url: str  # requests go to f"{base_url.rstrip('/')}/chat/completions"
    model: str  # sent as "model", e.g. "gpt-4o-mini"
    model_id: str  # e.g. "openai/gpt-4o-mini", for messages and results
    api_key_env: str | None = None
    # Timeouts (a stream: between two pieces), retries and backoff (a provider's timeout and retries set them).
    http: HttpPolicy = CHAT_POLICY
    request_fields: Mapping[str, Any] = field(default_factory=dict)  # merged into every body (never over ours)
    defaults: ChatOptions = field(default_factory=ChatOptions)  # the profile's temperature / max_tokens

    @property
    def url(self) -> str:
        """The chat completions endpoint."""
        return f"{self.base_url.rstrip('/')}/chat/completions"


class _Broken(Exception):
    """The stream failed after text was passed on: not retried."""


@dataclass
class _Reading:
    """What one attempt has read so far."""

    pieces: list[str] = field(default_factory=list)
    model: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    passed_on: bool = False  # a piece reached the caller's on_text

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class HttpChatModel:
    """Completes conversations through an OpenAI-compatible endpoint; satisfies `kbctl.chat.ChatModel`."""

    def __init__(self, config: HttpChatConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.model_id = config.model_id
        self.url = config.url
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._wait = config.http.wait()
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        """One client for the model's lifetime (thread-safe): its connections are kept alive between answers."""
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    headers={"User-Agent": user_agent()},
                    timeout=self.config.http.timeout,
                    follow_redirects=False,
                    verify=tls_context(),
                )
            return self._client

    def close(self) -> None:
        """Close the kept-alive connections (a later call opens new ones)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __repr__(self) -> str:
        return f"HttpChatModel(model_id={self.model_id!r}, url={redact(self.url)!r})"

    def _body(self, messages: Sequence[Message], options: ChatOptions, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {k: v for k, v in self.config.request_fields.items() if k not in _RESERVED_FIELDS}
        body["model"] = self.config.model
        body["messages"] = [{"role": m.role, "content": m.content} for m in messages]
        temperature = options.temperature if options.temperature is not None else self.config.defaults.temperature
        max_tokens = options.max_tokens if options.max_tokens is not None else self.config.defaults.max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def complete(
        self,
        messages: Sequence[Message],
        options: ChatOptions | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """The model's answer; streamed to `on_text` piece by piece when it is given."""
        if not messages:
            raise UsageError("a chat needs at least one message")
        auth = bearer_auth(self.config.api_key_env, self._environ, self.model_id, ChatError)
        body = self._body(messages, options or ChatOptions(), on_text is not None)
        headers = {"Accept": "text/event-stream" if on_text else "application/json"}
        retrying = Retrying(**self.config.http.retrying(self._wait))
        attempts = 0
        client = self._http()
        try:
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    reading = self._attempt(client, body, headers, auth, on_text)
        except Retryable as failure:
            raise ChatError(
                f"chat request to {redact(self.url)} failed: {failure.reason} (after {plural(attempts, 'attempt')})"
            ) from failure.__cause__
        except _Broken as broken:
            raise ChatError(f"chat request to {redact(self.url)} failed mid-answer: {broken}") from None
        return Completion(
            text=reading.text,
            model=reading.model or self.config.model,
            finish_reason=reading.finish_reason,
            prompt_tokens=reading.prompt_tokens,
            completion_tokens=reading.completion_tokens,
            attempts=attempts,
            streamed=on_text is not None,
        )

    # ---- one attempt ----

    def _attempt(
        self,
        client: httpx.Client,
        body: dict[str, Any],
        headers: dict[str, str],
        auth: BearerAuth | None,
        on_text: Callable[[str], None] | None,
    ) -> _Reading:
        reading = _Reading()
        deadline = time.monotonic() + MAX_SECONDS
        try:
            with client.stream("POST", self.url, json=body, headers=headers, auth=auth) as response:
                if not 200 <= response.status_code < 300:
                    content = _bounded(response.iter_bytes(), _ERROR_BODY_BYTES, deadline, cut=True)
                    kept = {
                        k: v for k, v in response.headers.items() if k not in ("content-encoding", "content-length")
                    }
                    read = httpx.Response(response.status_code, headers=kept, content=content, request=response.request)
                    check_response(
                        read,
                        self.url,
                        auth,
                        ChatError,
                        what="chat",
                        model=self.config.model,
                        retry_statuses=self.config.http.retry_statuses,
                    )
                media = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if media == "text/event-stream":
                    self._read_events(response, reading, deadline, on_text, auth)
                else:
                    self._read_json(_bounded(response.iter_bytes(), MAX_RESPONSE_BYTES, deadline), reading)
                    if on_text is not None and reading.text:
                        on_text(reading.text)
                        reading.passed_on = True
        except httpx.HTTPError as exc:
            failure = transport_failure(exc, self.url, client.timeout, ChatError, what="chat", auth=auth)
            if reading.passed_on:
                raise _Broken(str(failure)) from exc
            raise failure from exc
        except ChatError as error:
            if reading.passed_on:
                raise _Broken(str(error)) from None
            raise
        if not reading.text.strip():
            raise ChatError(f"the chat model {self.model_id} at {redact(self.url)} answered with no text")
        return reading

    def _read_json(self, content: bytes, reading: _Reading) -> None:
        try:
            payload = json.loads(content)
        except (ValueError, RecursionError):
            raise ChatError(f"invalid JSON from {redact(self.url)}") from None
        choice = _first_choice(payload)
        message = choice.get("message") if choice is not None else None
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str):
            raise ChatError(f"unexpected response from {redact(self.url)}: no choices[0].message.content")
        reading.pieces.append(text)
        self._read_meta(payload, choice, reading)

    def _read_events(
        self,
        response: httpx.Response,
        reading: _Reading,
        deadline: float,
        on_text: Callable[[str], None] | None,
        auth: BearerAuth | None,
    ) -> None:
        chunks = response.iter_bytes()
        for data in _events(chunks, deadline):
            if data.strip() == "[DONE]":
                _bounded(chunks, _ERROR_BODY_BYTES, deadline, cut=True)  # the end of the body: the connection stays
                return
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):
                raise ChatError(f"invalid JSON in the event stream from {redact(self.url)}") from None
            if isinstance(payload, dict) and payload.get("error"):
                error = payload["error"]
                message = error.get("message") if isinstance(error, dict) else error
                text = " ".join(str(message).split())[:200]
                text = auth.redact(text) if auth is not None else text  # a server may echo the key it was sent
                raise ChatError(f"the chat stream from {redact(self.url)} reported an error: {text}")
            choice = _first_choice(payload)
            delta = choice.get("delta") if choice is not None else None
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(piece, str) and piece:
                reading.pieces.append(piece)
                if on_text is not None:
                    on_text(piece)
                    reading.passed_on = True
            self._read_meta(payload, choice, reading)
        if not reading.text:
            raise ChatError(f"the event stream from {redact(self.url)} ended without an answer")

    @staticmethod
    def _read_meta(payload: Any, choice: dict[str, Any] | None, reading: _Reading) -> None:
        if not isinstance(payload, dict):
            return
        if isinstance(payload.get("model"), str):
            reading.model = payload["model"][:200]
        if choice is not None and isinstance(choice.get("finish_reason"), str):
            reading.finish_reason = choice["finish_reason"][:40]
        usage = payload.get("usage")
        if isinstance(usage, dict):
            reading.prompt_tokens = _count(usage.get("prompt_tokens"))
            reading.completion_tokens = _count(usage.get("completion_tokens"))


def _first_choice(payload: Any) -> dict[str, Any] | None:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _bounded(chunks: Iterator[bytes], limit: int, deadline: float, *, cut: bool = False) -> bytes:
    """The body, at most `limit` bytes (more is an error, or with `cut` the first `limit` bytes), read by
    `deadline`."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise ChatError(f"the chat response is larger than {limit // 1024} KiB")
        if time.monotonic() > deadline:
            raise ChatError(f"the chat response took longer than {MAX_SECONDS:g} s")
    return bytes(body)


def _events(chunks: Iterator[bytes], deadline: float) -> Iterator[str]:
    """The data of each server-sent event (data lines joined by newlines), bounded in line size, total size
    and time; comments and other fields are skipped."""
    buffer = b""
    total = 0
    data: list[str] = []
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            raise ChatError(f"the chat response is larger than {MAX_RESPONSE_BYTES // 1024} KiB")
        if time.monotonic() > deadline:
            raise ChatError(f"the chat response took longer than {MAX_SECONDS:g} s")
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        if len(buffer) > MAX_LINE_BYTES:
            raise ChatError(f"an event line of the chat stream is longer than {MAX_LINE_BYTES // 1024} KiB")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
    tail = buffer.rstrip(b"\r").decode("utf-8", errors="replace")
    if tail.startswith("data:"):
        data.append(tail[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)
