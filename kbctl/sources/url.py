"""Fetch URL sources concurrently and safely (SSRF guard, size and time limits, retries) and extract their text.

`fetch_urls` never raises for one URL's failure: that URL maps to a SourceError with a one-line reason.
Concurrency is bounded overall and per host, `total_timeout` covers every redirect, retry and backoff of a URL,
only gzip/deflate content is accepted (inflated within `max_bytes`), environment proxies are ignored (the SSRF
guard, kbctl.sources._guard, must see the real destination), and text extraction (trafilatura) runs in one worker
thread under the bounds every route shares (`kbctl.sources.bounds`); what a body becomes (inflation, charset,
extraction by media type, a page's links) is kbctl.sources.content's. What is retried, the waits, status text and
the User-Agent are kbctl._http's: the fetcher runs on `FetchPolicy.http`, the HttpPolicy every HTTP client takes.

What callers can rely on, in full: docs/architecture.md#url-sources-and-refresh.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib.util
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState

from kbctl._http import FETCH_WORDING, URL_POLICY, HttpPolicy, Retryable, status_line, transport_failure, user_agent
from kbctl.errors import SourceError, UsageError
from kbctl.sources import Document
from kbctl.sources._guard import Guard, guarded_transport
from kbctl.sources.bounds import EXTRACT_TIMEOUT, MAX_EXTRACT_BYTES, MAX_FETCH_BYTES, within_time
from kbctl.sources.content import (
    DOCUMENT_TYPES,
    HTML_TYPES,
    TEXT_TYPES,
    Inflater,
    TooLarge,
    decode_body,
    page_links,
    parse_content_type,
    to_document,
    unsupported_type,
)
from kbctl.userconfig import ConfigFile, env_allows_private, env_networks, network_entry

__all__ = ["FetchPolicy", "FetchRequest", "FetchResult", "Validators", "fetch_urls"]

ACCEPT = "text/html, text/markdown, text/plain;q=0.9, */*;q=0.1"
_ACCEPT_ENCODING = "gzip, deflate"
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_HTTP2 = importlib.util.find_spec("h2") is not None
_KiB = 1024
_MiB = 1024 * 1024
_DRAIN_LIMIT = 64 * _KiB


@dataclass(frozen=True)
class FetchPolicy:
    """Limits and network rules for fetching URL sources."""

    # The defaults are the bounds every route shares (kbctl.sources.bounds).
    max_bytes: int = MAX_FETCH_BYTES  # cap on the decompressed body, enforced while streaming
    max_html_bytes: int = MAX_EXTRACT_BYTES["html"]  # an HTML body larger than this is not handed to the extractor
    extract_timeout: float = EXTRACT_TIMEOUT  # seconds one page's text extraction may take
    # The HTTP policy's values (`http`), public here as plain fields; the defaults are kbctl._http.URL_POLICY's.
    connect_timeout: float = URL_POLICY.connect_timeout
    read_timeout: float = URL_POLICY.read_timeout  # also the write timeout
    total_timeout: float = URL_POLICY.pool_timeout  # per URL, across retries and redirects; also the pool timeout
    max_redirects: int = 5
    retries: int = URL_POLICY.retries  # extra attempts on 429 / 5xx / timeouts / connection errors
    backoff_base: float = URL_POLICY.backoff_base  # exponential backoff with jitter
    max_retry_after: float = URL_POLICY.max_retry_after  # Retry-After is honoured up to this many seconds
    concurrency: int = 8  # overall
    per_host: int = 2  # per host name
    # Every non-public address except link-local and cloud metadata ones; KBCTL_ALLOW_PRIVATE_NETWORKS=1 sets it.
    allow_private: bool = False
    allowed_addresses: frozenset[tuple[str, int]] = frozenset()  # exact (ip, port) pairs allowed even if private
    user_agent: str = field(default_factory=user_agent)
    resolver: Callable[[str, int], list[str]] | None = None  # host, port -> IPs; default getaddrinfo
    # IP addresses, CIDR networks and host names allowed even if private (KBCTL_ALLOW_NETWORKS, allowNetworks);
    # a network or a host name never opens a link-local or cloud metadata address, an exact address does.
    allowed_networks: tuple[str, ...] = ()
    cache_dir: Path | None = None  # where git sources' repositories are fetched to (None: git sources fail)

    def __post_init__(self) -> None:
        if isinstance(self.allowed_networks, str):
            raise UsageError("FetchPolicy.allowed_networks must be a sequence of entries, not one string")
        try:
            networks = tuple(dict.fromkeys(str(network_entry(e)) for e in self.allowed_networks))
        except ValueError as exc:
            raise UsageError(f"FetchPolicy.allowed_networks: {exc}") from None
        object.__setattr__(self, "allowed_networks", networks)
        for name in ("max_bytes", "max_html_bytes", "concurrency", "per_host"):
            if getattr(self, name) < 1:
                raise UsageError(f"FetchPolicy.{name} must be at least 1")
        for name in ("max_redirects", "retries", "backoff_base", "max_retry_after"):
            if getattr(self, name) < 0:
                raise UsageError(f"FetchPolicy.{name} must not be negative")
        for name in ("connect_timeout", "read_timeout", "total_timeout", "extract_timeout"):
            if getattr(self, name) <= 0:
                raise UsageError(f"FetchPolicy.{name} must be positive")

    @property
    def http(self) -> HttpPolicy:
        """The HTTP policy of these values: the fetcher's timeouts, retries, backoff and retried statuses."""
        return URL_POLICY.with_(
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            write_timeout=self.read_timeout,
            pool_timeout=self.total_timeout,
            retries=self.retries,
            backoff_base=self.backoff_base,
            max_retry_after=self.max_retry_after,
        )

    def guard(self) -> Guard:
        """The network guard of these rules (URL sources, and the hosts of git sources)."""
        return Guard(
            allow_private=self.allow_private,
            allowed_addresses=self.allowed_addresses,
            resolver=self.resolver,
            allowed_networks=self.allowed_networks,
        )

    @classmethod
    def from_env(cls, **overrides: Any) -> FetchPolicy:
        """The default policy with the environment's allowances: allow_private from KBCTL_ALLOW_PRIVATE_NETWORKS
        ("1"/"true"), allowed_networks from KBCTL_ALLOW_NETWORKS. Overrides win. KbctlError when
        KBCTL_ALLOW_NETWORKS holds something that is not an IP address, a network or a host name."""
        values: dict[str, Any] = {
            "allow_private": env_allows_private(os.environ),
            "allowed_networks": env_networks(os.environ),
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_config(cls, config: ConfigFile, **overrides: Any) -> FetchPolicy:
        """`from_env` plus the allowances of kbctl's configuration (`Settings.config`): allowPrivateNetworks, and
        allowNetworks added to KBCTL_ALLOW_NETWORKS's entries. Overrides win."""
        env = cls.from_env()
        values: dict[str, Any] = {
            "allow_private": env.allow_private or config.allow_private_networks,
            "allowed_networks": (*config.allow_networks, *env.allowed_networks),
        }
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class Validators:
    """HTTP cache validators from the last successful fetch."""

    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class FetchRequest:
    """One URL to fetch; `key` is the caller's id (e.g. the source name), returned as is. `links` also returns the
    links of an HTML page; `raw` returns the body as text (any text or XML type: robots.txt, a sitemap) instead
    of a document."""

    key: str
    url: str
    validators: Validators | None = None
    links: bool = False
    raw: bool = False


@dataclass(frozen=True)
class FetchResult:
    """A successful fetch: the extracted document, or `not_modified` (304) when the caller's copy is current."""

    key: str
    url: str
    final_url: str  # after redirects
    not_modified: bool  # True on 304: document is None, the caller reuses what it has
    document: Document | None
    validators: Validators  # from this response; on 304, the request's where the response has none
    content_type: str | None
    status: int
    links: tuple[str, ...] = ()  # with `links`: the absolute http(s) URLs an HTML page links to, no fragments
    body: str | None = None  # with `raw`: the body as text


def fetch_urls(
    requests: Sequence[FetchRequest],
    policy: FetchPolicy | None = None,
    *,
    on_done: Callable[[int, int], None] | None = None,
) -> dict[str, FetchResult | SourceError]:
    """Fetch every request concurrently; each key maps to its result or to a SourceError (never raised).

    `on_done(done, total)` is called each time a request finishes (progress for a caller to show)."""
    keys = [r.key for r in requests]
    if len(set(keys)) != len(keys):
        raise UsageError("fetch_urls: request keys must be unique")
    if not requests:
        return {}
    policy = policy if policy is not None else FetchPolicy.from_env()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_fetch_all(requests, policy, on_done))
    # Called from inside an event loop (e.g. an async agent): run on a loop of our own in a worker thread.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbctl-fetch") as pool:
        return pool.submit(asyncio.run, _fetch_all(requests, policy, on_done)).result()


# ---------------------------------------------------------------------------------------------------------
# Messages and small parsers
# ---------------------------------------------------------------------------------------------------------


class _Failure(Exception):
    """Why one attempt failed for good (a failure worth another attempt is a `kbctl._http.Retryable`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _size(n: int) -> str:
    for unit, name in ((_MiB, "MiB"), (_KiB, "KiB")):
        if n >= unit:
            return f"{n // unit} {name}" if n % unit == 0 else f"{n / unit:.1f} {name}"
    return f"{n} bytes"


# ---------------------------------------------------------------------------------------------------------
# The fetcher
# ---------------------------------------------------------------------------------------------------------


@dataclass
class _Hop:
    """What one HTTP exchange produced."""

    status: int
    url: str
    location: str | None = None
    body: bytes | None = None
    media: str | None = None
    charset: str | None = None
    content_type: str | None = None
    validators: Validators = field(default_factory=Validators)


@dataclass
class _Job:
    """One URL's state across its attempts."""

    request: FetchRequest
    deadline: float | None = None  # loop time; set when the first request gets its slots
    attempts: int = 0


class _Fetcher:
    def __init__(self, policy: FetchPolicy, client: httpx.AsyncClient, guard: Guard) -> None:
        self._policy = policy
        self._http = policy.http
        self._client = client
        self._guard = guard
        self._overall = asyncio.Semaphore(policy.concurrency)
        self._hosts: dict[str, asyncio.Semaphore] = {}
        self._extractor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kbctl-extract")
        self._wait = self._http.wait()

    def close(self) -> None:
        self._extractor.shutdown(wait=True)

    async def fetch(self, request: FetchRequest) -> FetchResult | SourceError:
        try:
            return await self._fetch(request)
        except SourceError as exc:
            return exc
        except Exception as exc:  # a bug must not take the other URLs down with it
            error = SourceError(f"unexpected error: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return error

    async def _fetch(self, request: FetchRequest) -> FetchResult | SourceError:
        job = _Job(request)
        retrying = AsyncRetrying(**self._http.retrying(self._wait, stop=lambda state: self._stop(state, job)))
        try:
            async for attempt in retrying:
                with attempt:
                    job.attempts = attempt.retry_state.attempt_number
                    hop = await self._follow(job)
        except Retryable as failure:
            reason = failure.reason + (f" (after {job.attempts} attempts)" if job.attempts > 1 else "")
            cause = failure.__cause__
        except _Failure as failure:
            reason, cause = failure.reason, failure.__cause__
        else:
            return await self._result(request, hop)
        error = SourceError(reason)
        error.__cause__ = cause
        return error

    def _stop(self, state: RetryCallState, job: _Job) -> bool:
        if state.attempt_number > self._http.retries:
            return True
        loop = asyncio.get_running_loop()
        return job.deadline is not None and loop.time() + state.upcoming_sleep >= job.deadline

    async def _follow(self, job: _Job) -> _Hop:
        """One attempt: the request and its redirects, each hop checked by the guard before it is sent."""
        url = job.request.url
        for hop_number in range(self._policy.max_redirects + 1):
            context = "" if hop_number == 0 else f"redirected to {url}: "
            try:
                parsed = httpx.URL(url)
            except httpx.InvalidURL as exc:
                raise _Failure(f"{context}invalid URL '{url}': {exc}") from exc
            refusal = self._guard.check_url(parsed)
            if refusal is not None:
                raise _Failure(context + refusal)
            hop = await self._exchange(job, parsed, context)
            if hop.status not in _REDIRECT_STATUSES:
                return hop
            if not hop.location:
                raise _Failure(f"{status_line(hop.status)} without a Location header")
            try:
                url = str(parsed.join(hop.location))
            except httpx.InvalidURL as exc:
                raise _Failure(f"invalid redirect location '{hop.location}': {exc}") from exc
        raise _Failure(f"too many redirects (more than {self._policy.max_redirects})")

    def _headers(self, validators: Validators | None) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Accept-Encoding": _ACCEPT_ENCODING}
        if validators is not None and validators.etag:
            headers["If-None-Match"] = validators.etag
        if validators is not None and validators.last_modified:
            headers["If-Modified-Since"] = validators.last_modified
        return headers

    async def _exchange(self, job: _Job, url: httpx.URL, context: str) -> _Hop:
        """One GET under the host and overall slots and the URL's deadline; errors become _Failure or Retryable."""
        policy = self._policy
        host = url.host.lower()
        host_slot = self._hosts.setdefault(host, asyncio.Semaphore(policy.per_host))
        shown_host = f"[{url.host}]" if ":" in url.host else url.host
        where = f"{shown_host}:{url.port}" if url.port else shown_host
        try:
            async with asyncio.timeout_at(job.deadline) as scope:
                async with host_slot, self._overall:
                    if job.deadline is None:
                        job.deadline = asyncio.get_running_loop().time() + policy.total_timeout
                        scope.reschedule(job.deadline)
                    headers = self._headers(job.request.validators)
                    async with self._client.stream("GET", url, headers=headers) as response:
                        return await self._read(response, str(url), raw=job.request.raw)
        except TimeoutError as exc:
            raise _Failure(f"timed out after {policy.total_timeout:g} s") from exc
        except SourceError as exc:  # the guard refused, or the host name did not resolve
            raise _Failure(context + str(exc)) from exc
        except httpx.HTTPError as exc:
            raise transport_failure(exc, where, self._client.timeout, _Failure, wording=FETCH_WORDING) from exc

    async def _read(self, response: httpx.Response, url: str, *, raw: bool = False) -> _Hop:
        """Status handling and the bounded, streamed body read."""
        status = response.status_code
        headers = response.headers
        if status in _REDIRECT_STATUSES or status == 304 or status >= 400:
            await _drain(response)
        if status in _REDIRECT_STATUSES:
            return _Hop(status, url, location=headers.get("location"))
        validators = Validators(etag=headers.get("etag"), last_modified=headers.get("last-modified"))
        if status == 304:
            if not _sent_validators(response):
                raise _Failure("HTTP 304 Not Modified to a request that had no cache validators")
            return _Hop(status, url, validators=validators)
        retry = self._http.retryable(response)
        if retry is not None:
            raise retry
        if not 200 <= status < 300:
            raise _Failure(status_line(status, response.reason_phrase))
        content_type = headers.get("content-type")
        media, charset = parse_content_type(content_type)
        if raw and media is not None and not (media.startswith("text/") or media.endswith(("/xml", "+xml"))):
            raise _Failure(f"unsupported content type '{media}' (a text or XML file was expected)")
        if not raw and media is not None and media not in HTML_TYPES | TEXT_TYPES and media not in DOCUMENT_TYPES:
            raise _Failure(unsupported_type(media))
        encoding = headers.get("content-encoding", "identity").strip().lower() or "identity"
        encoding = {"x-gzip": "gzip"}.get(encoding, encoding)
        if encoding not in ("identity", "gzip", "deflate"):
            raise _Failure(f"unsupported content encoding '{encoding}'")
        too_large = f"response larger than {_size(self._policy.max_bytes)}"
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self._policy.max_bytes:
            raise _Failure(too_large)
        inflater = Inflater(encoding, self._policy.max_bytes)
        body = bytearray()
        try:
            async for chunk in response.aiter_raw():
                body += inflater.feed(chunk)
            body += inflater.finish()
        except TooLarge as exc:
            raise _Failure(too_large) from exc
        except zlib.error as exc:
            raise _Failure(f"cannot decompress the {encoding} body: {exc}") from exc
        return _Hop(
            status,
            url,
            body=bytes(body),
            media=media,
            charset=charset,
            content_type=content_type,
            validators=validators,
        )

    async def _result(self, request: FetchRequest, hop: _Hop) -> FetchResult:
        if hop.status == 304:
            sent = request.validators or Validators()
            validators = Validators(
                etag=hop.validators.etag or sent.etag, last_modified=hop.validators.last_modified or sent.last_modified
            )
            return FetchResult(request.key, request.url, hop.url, True, None, validators, None, 304)
        assert hop.body is not None
        if request.raw:
            body = decode_body(hop.body, hop.charset, html=False)
            return FetchResult(
                request.key, request.url, hop.url, False, None, hop.validators, hop.content_type, hop.status, body=body
            )
        extract = functools.partial(to_document, hop.body, hop.media, hop.charset, hop.url, self._policy.max_html_bytes)
        bounded = functools.partial(within_time, extract, what="the page", timeout=self._policy.extract_timeout)
        document = await asyncio.get_running_loop().run_in_executor(self._extractor, bounded)
        links = page_links(hop.body, hop.charset, hop.url) if request.links and hop.media in HTML_TYPES | {None} else ()
        return FetchResult(
            request.key, request.url, hop.url, False, document, hop.validators, hop.content_type, hop.status, links
        )


async def _drain(response: httpx.Response) -> None:
    """Read a small unused body (redirect, 304, error page) so its keep-alive connection can be reused."""
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > _DRAIN_LIMIT:  # not worth reading: the connection is closed instead
            return


def _sent_validators(response: httpx.Response) -> bool:
    sent = response.request.headers
    return "if-none-match" in sent or "if-modified-since" in sent


async def _fetch_all(
    requests: Sequence[FetchRequest], policy: FetchPolicy, on_done: Callable[[int, int], None] | None = None
) -> dict[str, FetchResult | SourceError]:
    guard = policy.guard()
    limits = httpx.Limits(max_connections=policy.concurrency, max_keepalive_connections=policy.concurrency)
    timeout = policy.http.timeout
    transport = guarded_transport(guard, limits=limits, http2=_HTTP2)
    async with httpx.AsyncClient(
        transport=transport,
        headers={"User-Agent": policy.user_agent},
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    ) as client:
        fetcher = _Fetcher(policy, client, guard)
        finished = 0

        async def fetch(request: FetchRequest) -> FetchResult | SourceError:
            nonlocal finished
            outcome = await fetcher.fetch(request)
            finished += 1
            if on_done is not None:
                on_done(finished, len(requests))
            return outcome

        try:
            outcomes = await asyncio.gather(*(fetch(r) for r in requests))
        finally:
            fetcher.close()
    return {r.key: outcome for r, outcome in zip(requests, outcomes, strict=True)}
