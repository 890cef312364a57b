"""Reconnect and retry when the database connection is lost under a statement.

A PostgreSQL server that restarts, fails over, or ends a backend (``pg_terminate_backend``)
cuts the connection a statement runs on. The ledger's writes are idempotent: a ``begin``
applied again by the same owner finds the edition still ``sending`` and theirs, a ``sent`` mark
written twice is the same row and the same papers, a release or a ``failed`` mark sets the same
values. So such a statement is simply run again once a connection works again (SQLAlchemy opens
a fresh one on the next use of an invalidated :class:`~sqlalchemy.Connection`).

When the database stays unreachable for ``window`` seconds, :func:`retry_on_disconnect` gives
up with the one-line :class:`~newsletter.errors.DatabaseUnavailable` the caller builds (exit
status 4), never a driver traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

from newsletter.errors import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_WINDOW = 30.0
"""Seconds a lost database may take to come back before the statement gives up."""

# SQLSTATE classes and codes that mean "the connection is gone, the statement did not run or
# its transaction was rolled back": connection exceptions (08), and the server shutting down or
# ending this backend (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now).
_GONE_CODES = frozenset({"57P01", "57P02", "57P03"})


def is_disconnect(error: BaseException) -> bool:
    """True when ``error`` says the database connection was lost (not that the SQL was bad)."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    orig = getattr(error, "orig", None) or error
    code = str(getattr(orig, "sqlstate", "") or "")
    return code.startswith("08") or code in _GONE_CODES


def database_away(error: BaseException) -> bool:
    """True when ``error`` means the database cannot be used right now (lost, down, refusing,
    read-only): an operator's matter, said in one line, not a bug worth a traceback."""
    return isinstance(error, (StoreError, OperationalError)) or is_disconnect(error)


def retry_on_disconnect(
    run: Callable[[], T],
    *,
    gave_up: Callable[[BaseException], StoreError],
    lost: Callable[[BaseException], bool] = is_disconnect,
    window: float = DEFAULT_WINDOW,
    what: str = "a ledger write",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``run()``, run again after a lost connection until it works or ``window`` seconds pass.

    Only a lost connection (``lost(error)``) is retried; any other error is raised at once.
    While reconnecting, a refused connection (the server still down) counts as lost too. When
    the window runs out, ``gave_up(error)`` is raised (chained to the last error).
    """
    deadline: float | None = None
    delay = 0.05
    while True:
        try:
            return run()
        except Exception as e:
            if not (lost(e) or (deadline is not None and isinstance(e, OperationalError))):
                raise
            if deadline is None:
                deadline = clock() + window
                log.warning(
                    "lost the database connection during %s (%s); reconnecting for up to %.0f s",
                    what,
                    " ".join(str(getattr(e, "orig", e)).split())[:200],
                    window,
                )
            left = deadline - clock()
            if left <= 0:
                raise gave_up(e) from e
            sleep(min(delay, left))
            delay = min(delay * 2, 2.0)
