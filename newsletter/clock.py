"""The one replaceable clock: code takes ``now`` as an argument; only edges call :func:`utcnow`."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)
