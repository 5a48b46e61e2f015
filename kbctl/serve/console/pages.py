"""The console's routes: each page (and each fragment a page reloads) reads as the signed-in person, renders a
template, and answers with headers that keep the page to itself (a strict Content-Security-Policy: only this
server's script and stylesheet, no inline script, no framing).

Every page has a shareable URL: the knowledge base, a diff of two versions (`?from=&to=`), a playground run (its
form's fields are the query string), a retrieval of the log. A person without a session is sent to sign in and
back; a fragment answers 401 instead, and the page's script reloads into the sign-in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final, TypeVar, get_args
from urllib.parse import parse_qs, quote, urlencode

import anyio
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from kbctl import FederatedResult, Mode, QueryOptions, QueryResult, TraceStage
from kbctl._version import __version__
from kbctl.errors import KbctlError, NotFoundError, StoreError, UsageError
from kbctl.manifest.selectors import parse_selector
from kbctl.serve.auth import Principal
from kbctl.serve.console.charts import candidates, outcome_class, quality_svg, trace_svg
from kbctl.serve.console.reads import Reads
from kbctl.serve.console.sessions import COOKIE, SESSION_SECONDS, Sessions
from kbctl.serve.service import RetrievalService

__all__ = ["Console"]

T = TypeVar("T")
PAGES: Final = ("/", "/knowledgebases/", "/playground", "/retrievals", "/login", "/logout", "/fragments/")
PUBLIC: Final = ("/login", "/static/")
STATIC: Final = {"console.css": "text/css", "console.js": "text/javascript", "favicon.svg": "image/svg+xml"}
HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
RUNS_PER_PAGE: Final = 50  # retrievals listed a page (older ones: the page's link)
QUESTION_MAX_CHARS: Final = 2_000  # the API's bound on a question (kbctl.serve.requests)


def _age(when: datetime | None) -> str:
    if when is None:
        return ""
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _change_summary(change: Any) -> str:
    """A VersionChange in words: "1 added, 2 changed" (the oldest retained version has nothing to compare with)."""
    if change.previous is None:
        return "first retained version"
    parts = [
        f"{n} {word}"
        for n, word in ((change.added, "added"), (change.changed, "changed"), (change.removed, "removed"))
        if n
    ]
    return ", ".join(parts) or "no source changed"


def _local(path: str) -> str:
    """`path` when it is a path of this server (never another site's: no open redirect), else `/`."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


class Console:
    """The console's routes over `service`, and how its requests are authenticated (`principal`)."""

    def __init__(
        self,
        service: RetrievalService,
        authenticate: Callable[[str | None], Principal | None],
        *,
        timeout: float = 30.0,
    ) -> None:
        self.service = service
        self.sessions = Sessions(authenticate)
        self.timeout = timeout
        self.templates = Environment(
            loader=PackageLoader("kbctl.serve.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(age=_age, num=_num, outcome_class=outcome_class, change_summary=_change_summary)
        self.asset_version = __version__
        self.router = self._routes()

    # ---------------------------------------------------------------- authentication

    @staticmethod
    def handles(path: str) -> bool:
        """Whether `path` is the console's (a page, a fragment, a static file)."""
        return path == "/" or path.startswith(PAGES[1:]) or path.startswith("/static/")

    @staticmethod
    def public(path: str) -> bool:
        return path.startswith(PUBLIC)

    def principal(self, request: Request) -> Principal | None:
        """Who a console request is: its session's bearer, authenticated now."""
        return self.sessions.principal(request.cookies.get(COOKIE))

    def unauthenticated(self, request: Request) -> Response:
        """A page sends the person to sign in (and back); a fragment answers 401."""
        if request.url.path.startswith("/fragments/") or request.method != "GET":
            return Response("sign in first", status_code=401, media_type="text/plain", headers=HEADERS)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303, headers=HEADERS)

    def install(self, app: FastAPI) -> None:
        app.include_router(self.router)

    # ---------------------------------------------------------------- rendering

    def _render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        principal: Principal | None = getattr(request.state, "principal", None)
        html = self.templates.get_template(template).render(
            caller=principal.name if principal is not None else None,
            signed_in=request.cookies.get(COOKIE) is not None,
            version=__version__,
            asset_version=self.asset_version,
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def _failed(self, request: Request, exc: Exception) -> HTMLResponse:
        status, heading = (
            (404, "Not found")
            if isinstance(exc, NotFoundError)
            else (503, "The store is unavailable")
            if isinstance(exc, StoreError)
            else (504, "Too slow")
            if isinstance(exc, TimeoutError)
            else (400, "Cannot do that")
        )
        return self._render(request, "error.html", status, heading=heading, message=str(exc), section="")

    async def _run(self, fn: Callable[[], T]) -> T:
        try:
            with anyio.fail_after(self.timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError:
            raise TimeoutError(f"the page took longer than {self.timeout:g} s") from None

    def _reads(self, request: Request) -> Reads:
        return Reads(self.service, request.state.principal)

    # ---------------------------------------------------------------- routes

    def _routes(self) -> APIRouter:
        router = APIRouter(include_in_schema=False)
        self._session_routes(router)
        self._knowledge_base_routes(router)
        self._playground_routes(router)
        self._retrieval_routes(router)
        return router

    def _session_routes(self, router: APIRouter) -> None:
        """The static files, signing in and signing out."""

        @router.get("/static/{name}")
        async def static(name: str) -> Response:
            if name not in STATIC:
                return Response("not found", status_code=404, media_type="text/plain")
            body = resources.files("kbctl.serve.console").joinpath("static", name).read_bytes()
            return Response(
                body,
                media_type=STATIC[name],
                headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
            )

        @router.get("/login")
        async def login_form(request: Request, next: str = "/") -> Response:
            return self._render(request, "login.html", heading="Sign in", next=_local(next), section="")

        @router.post("/login")
        async def login(request: Request) -> Response:
            form = _form(await request.body())
            target = _local(form.get("next", "/"))
            opened = self.sessions.open(form.get("bearer", ""))
            if opened is None:
                return self._render(
                    request,
                    "login.html",
                    401,
                    heading="Sign in",
                    next=target,
                    section="",
                    error="That bearer is not valid here (a token of this server's configuration, or a JWT of its "
                    "identity provider).",
                )
            session, _ = opened
            response = RedirectResponse(target, status_code=303, headers=HEADERS)
            response.set_cookie(
                COOKIE,
                session,
                max_age=SESSION_SECONDS,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path="/",
            )
            return response

        @router.post("/logout")
        async def logout(request: Request) -> Response:
            self.sessions.close(request.cookies.get(COOKIE))
            response = RedirectResponse("/login", status_code=303, headers=HEADERS)
            response.delete_cookie(COOKIE, path="/")
            return response

    def _knowledge_base_routes(self, router: APIRouter) -> None:
        """The knowledge bases' list (and its rows), one knowledge base's page, and the diff of two versions."""

        async def listed(request: Request, selector: str | None, template: str) -> Response:
            """The knowledge bases in the person's scope matching `selector`, as the page or its rows."""
            selector = (selector or "")[:1000] or None
            parsed, problem = None, None
            try:
                parsed = parse_selector(selector) if selector else None
            except ValueError as exc:
                problem = f"not a label selector: {exc}"
            reads = self._reads(request)
            try:
                kbs = [] if problem else await self._run(lambda: reads.knowledge_bases(parsed))
            except (KbctlError, TimeoutError) as exc:
                return self._failed(request, exc)
            return self._render(
                request,
                template,
                400 if problem else 200,
                heading="Knowledge bases",
                section="kbs",
                kbs=kbs,
                selector=selector,
                problem=problem,
            )

        @router.get("/")
        async def knowledge_bases(request: Request, selector: str | None = None) -> Response:
            return await listed(request, selector, "kbs.html")

        @router.get("/fragments/knowledgebases")
        async def knowledge_base_rows(request: Request, selector: str | None = None) -> Response:
            return await listed(request, selector, "_kb_rows.html")

        @router.get("/knowledgebases/{name}")
        async def knowledge_base(request: Request, name: str) -> Response:
            reads = self._reads(request)
            try:
                page = await self._run(lambda: reads.knowledge_base(name))
            except (KbctlError, TimeoutError) as exc:
                return self._failed(request, exc)
            chart = quality_svg(page.quality, title=f"Retrieval quality of {name} per version") if page.quality else ""
            return self._render(request, "kb.html", heading=name, section="kbs", page=page, quality_chart=chart)

        @router.get("/knowledgebases/{name}/diff")
        async def version_diff(request: Request, name: str) -> Response:
            reads = self._reads(request)
            try:
                low, high = _version(request.query_params.get("from")), _version(request.query_params.get("to"))
                diff = await self._run(lambda: reads.version_diff(name, low, high))
            except (KbctlError, TimeoutError, ValueError) as exc:
                return self._failed(request, exc)
            return self._render(
                request, "diff.html", heading=f"{name}: version {low} → {high}", section="kbs", name=name, diff=diff
            )

    def _playground_routes(self, router: APIRouter) -> None:
        """The playground: a query run as the signed-in person, its trace drawn."""

        @router.get("/playground")
        async def playground(request: Request) -> Response:
            reads = self._reads(request)
            params = request.query_params
            form: dict[str, Any] = {
                "kb": params.get("kb", "")[:253],
                "q": params.get("q", "")[:QUESTION_MAX_CHARS],
                "mode": params.get("mode", ""),
                "topK": params.get("topK", ""),
                "threshold": params.get("threshold", ""),
                "maxTokens": params.get("maxTokens", ""),
                "groups": params.getlist("group")[:100],
            }
            principal: Principal = request.state.principal
            context: dict[str, Any] = {
                "heading": "Playground",
                "section": "playground",
                "form": form,
                "modes": list(get_args(Mode)),
                "groups": sorted(principal.reader.groups)[:100],
                "result": None,
                "problem": None,
            }
            try:
                context["kbs"] = await self._run(lambda: reads.knowledge_bases(None))
                if form["kb"] and form["q"].strip():
                    options = _options(form)
                    started = time.perf_counter()
                    result = await self._run(lambda: reads.query(form["kb"], form["q"], options, form["groups"]))
                    context.update(self._trace(result))
                    context["ms"] = round((time.perf_counter() - started) * 1000, 1)
            except (UsageError, ValueError) as exc:
                context["problem"] = str(exc)
                return self._render(request, "playground.html", 400, **context)
            except (KbctlError, TimeoutError) as exc:
                return self._failed(request, exc)
            return self._render(request, "playground.html", **context)

    def _retrieval_routes(self, router: APIRouter) -> None:
        """The retrieval log: its runs, filtered and paged, and one run with its trace."""

        @router.get("/retrievals")
        async def retrievals(request: Request) -> Response:
            reads = self._reads(request)
            params = request.query_params
            filters = {
                "knowledge_base": params.get("kb") or None,
                "caller": params.get("caller") or None,
                "since": _when(params.get("since")),
                "until": _when(params.get("until")),
                "nothing_relevant": params.get("nothing") == "1",
                "before": int(params["before"]) if params.get("before", "").isdigit() else None,
                "limit": RUNS_PER_PAGE,
            }
            try:
                runs = await self._run(lambda: reads.retrievals(**filters))
            except (KbctlError, TimeoutError, ValueError) as exc:
                return self._failed(request, exc)
            query = {k: v for k, v in params.items() if k != "before"}
            full = len(runs) >= RUNS_PER_PAGE  # maybe more: a link to the next page
            older = f"/retrievals?{urlencode({**query, 'before': runs[-1].id})}" if full else None
            return self._render(
                request,
                "retrievals.html",
                heading="Retrievals",
                section="retrievals",
                runs=runs,
                params=params,
                older=older,
                enabled=self.service.retrieval_log_enabled,
            )

        @router.get("/retrievals/{run}")
        async def retrieval(request: Request, run: int) -> Response:
            reads = self._reads(request)
            try:
                found = await self._run(lambda: reads.retrieval(run))
            except (KbctlError, TimeoutError) as exc:
                return self._failed(request, exc)
            context: dict[str, Any] = {"heading": f"Retrieval {run}", "section": "retrievals", "run": found}
            try:
                if found.result is not None and "knowledgeBase" in found.result:  # one knowledge base's
                    context.update(self._trace(QueryResult.model_validate(found.result)))
                elif found.result is not None and "knowledgeBases" in found.result:  # fused from several
                    context.update(_members(found.result))
            except ValueError:  # a result the log cut beyond its model's shape: shown as stored
                pass
            return self._render(request, "retrieval.html", **context)

    def _trace(self, result: QueryResult) -> dict[str, Any]:
        """What the trace view shows of `result`: its candidates, the chart, and where its line came from."""
        rows = candidates(result.trace)
        line = result.relevance_threshold if result.relevance_threshold is not None else result.similarity_threshold
        if result.relevance_threshold is not None and result.relevance_threshold > result.similarity_threshold:
            source = f"calibrated for version {result.version} from its background similarity (no threshold set)"
        else:
            source = "the threshold set by the query or spec.retrieval.similarityThreshold"
        if result.keyword_threshold is not None:
            asked = result.keyword_share or 0.0
            source += f"; or a keyword share of {result.keyword_threshold:g} (the question's: {asked:.2f})"
        source += f": {'relevant by ' + result.relevant_by if result.relevant_by else 'nothing relevant'}"
        title = f"{len(rows)} candidates of {result.knowledge_base} v{result.version} against the line {line:.3f}"
        share = "/playground?" + urlencode(
            [("kb", result.knowledge_base), ("q", result.question), ("mode", result.mode), ("topK", result.top_k)],
            quote_via=quote,
        )
        return {
            "result": result,
            "rows": rows,
            "line": line,
            "line_source": source,
            "chart": trace_svg(rows, line, title=title),
            "share": share,
        }


def _members(stored: dict[str, Any]) -> dict[str, Any]:
    """What the page of a federated run shows: the fused hits, and each member's candidates drawn."""
    traces = {str(t.get("knowledgeBase")): t.get("stages") or [] for t in stored.get("trace") or []}
    fused = FederatedResult.model_validate({k: v for k, v in stored.items() if k != "trace"})
    members = []
    for outcome in fused.results:
        rows = candidates([TraceStage.model_validate(s) for s in traces.get(outcome.knowledge_base, [])])
        title = f"{len(rows)} candidates of {outcome.knowledge_base} v{outcome.version}"
        members.append({"outcome": outcome, "rows": rows, "chart": trace_svg(rows, None, title=title)})
    return {"fused": fused, "members": members}


def _form(body: bytes) -> dict[str, str]:
    """An urlencoded form body (bounded by the server's body limit), first value of each field."""
    fields: Mapping[str, list[str]] = parse_qs(body.decode("utf-8", "replace"), max_num_fields=20)
    return {k: v[0] for k, v in fields.items() if v}


def _version(value: str | None) -> int:
    if value is None or not value.isdigit() or len(value) > 9:
        raise UsageError("give both versions to compare: ?from=N&to=M")
    return int(value)


def _when(value: str | None) -> datetime | None:
    """A time of the retrievals' filters: ISO 8601 (a browser's datetime-local value is read as UTC)."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value[:40])
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _options(form: Mapping[str, Any]) -> QueryOptions:
    def number(key: str, kind: type) -> Any:
        text = str(form.get(key) or "").strip()
        if not text:
            return None
        try:
            return kind(text)
        except ValueError:
            raise UsageError(f"{key} must be a number, got {text[:20]!r}") from None

    return QueryOptions.build(
        top_k=number("topK", int),
        threshold=number("threshold", float),
        max_tokens=number("maxTokens", int),
        mode=str(form.get("mode") or "") or None,
        explain=True,
    )
