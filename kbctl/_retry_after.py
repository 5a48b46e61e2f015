"""Reading a server's Retry-After header, shared by the URL fetcher and the HTTP embedder."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime

__all__ = ["retry_after_seconds"]


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After value (delta-seconds or HTTP date), or None when absent or unreadable."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
