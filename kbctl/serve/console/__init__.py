"""Lens: the web console of `kbctl serve`, at `/`, beside the API and behind the same authentication.

What a person debugging an agent opens first: the knowledge bases (live), one knowledge base (conditions,
sources, events, versions and what each changed, the Sync and commit it came from, quality per version), a diff of
two versions, a playground that draws a query's trace against the relevance line, and the retrieval log (what each
agent was given, and why). Pages are rendered on the server (Jinja2, autoescaped) with a stylesheet and a few lines
of JavaScript shipped in the package: no CDN, no build step, readable without JavaScript.

    sessions  sign-in with the API's bearer; the browser keeps only a session id
    reads     every read as the signed-in person: their scope and reader, as the API's routes
    charts    a query's candidates against the line, and quality per version, as server-made SVG
    pages     the routes and their templates (templates/, static/)
"""

from __future__ import annotations

from kbctl.serve.console.pages import Console

__all__ = ["Console"]
