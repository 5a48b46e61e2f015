"""Who is looking at the console: a browser cannot send a bearer header on a link, so a person signs in once with
the same bearer (a configured token, or a JWT of serve.oidc) and the browser keeps a random session id.

The session id is the only thing the cookie holds; the bearer stays in this process's memory and is authenticated
again on every request, so a token removed from the configuration, or a JWT past its expiry, stops working at
once, and the console never reads more than the bearer would over the API. The cookie is HttpOnly and
SameSite=Strict (no other site can make the browser send it: no cross-site request forgery), Secure behind HTTPS.
Sessions are bounded: SESSION_SECONDS each, at most MAX_SESSIONS in memory (the oldest dropped), and none survives
a restart (sign in again).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from kbctl.serve.auth import Principal

__all__ = ["COOKIE", "MAX_SESSIONS", "SESSION_SECONDS", "Sessions"]

COOKIE: Final = "kbctl_console"
SESSION_SECONDS: Final = 12 * 3600  # a session ends after this, however active (sign in again)
MAX_SESSIONS: Final = 10_000  # sessions held at once; a new one beyond it ends the oldest
BEARER_MAX_CHARS: Final = 16_384  # a bearer pasted into the sign-in form (a JWT with many groups is a few KiB)


class Sessions:
    """Session ids → the bearer they were opened with; `authenticate` maps one to its Principal now."""

    def __init__(self, authenticate: Callable[[str | None], Principal | None]) -> None:
        self._authenticate = authenticate
        self._sessions: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, bearer: str) -> tuple[str, Principal] | None:
        """A new session for `bearer` (the token or JWT alone, without "Bearer "), and who it is; None when the
        bearer authenticates no one."""
        bearer = bearer.strip()
        if not bearer or len(bearer) > BEARER_MAX_CHARS:
            return None
        authorization = f"Bearer {bearer}"
        principal = self._authenticate(authorization)
        if principal is None:
            return None
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[session] = (authorization, time.monotonic() + SESSION_SECONDS)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return session, principal

    def principal(self, session: str | None) -> Principal | None:
        """Who the session is now (its bearer authenticated again); None for no, an unknown or an ended session."""
        if not session or len(session) > 100:
            return None
        with self._lock:
            held = self._sessions.get(session)
            if held is not None and held[1] < time.monotonic():
                del self._sessions[session]
                held = None
        return self._authenticate(held[0]) if held is not None else None

    def close(self, session: str | None) -> None:
        """End a session (sign out)."""
        if session:
            with self._lock:
                self._sessions.pop(session, None)
