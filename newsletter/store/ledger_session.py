"""The SQL store's ledger session: one ledger writer's group commits, on connections of its own.

:meth:`Store.ledger_session <newsletter.store.ledger.LedgerStore.ledger_session>` hands one
:class:`SqlLedgerSession` to the sender's ledger writer
(:class:`newsletter.deliver.ledger.LedgerWriter`), which sees only the
:class:`~newsletter.store.protocol.LedgerSession` protocol: no connection leaves the store.

Each batch goes the cheapest way it can. On PostgreSQL the usual group commit (``begin``s of
one owner and ``sent`` marks) is one statement on an autocommit connection planned for key
lookups; anything else, and every batch on SQLite (whose fast path runs on the sqlite3
connection inside the transaction), is one transaction on the writer's own connection. Both
connections are opened on first use and kept, and dropped after a failure, so the next batch
reconnects. Database errors leave as :class:`~newsletter.errors.StoreError`, as from every
public method of the Store (:mod:`.guard`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from sqlalchemy import Connection

from newsletter.errors import StoreError
from newsletter.models import LedgerOp

Results = list[str | bool | None]


class _GroupCommits(Protocol):
    """What the session uses of the SQL store (:class:`~.ledger.LedgerStore`)."""

    _db_errors: tuple[type[BaseException], ...]

    def error(self, error: BaseException) -> StoreError: ...

    def _writer_connection(self) -> Connection: ...

    def _ledger_connection(self) -> Connection | None: ...

    def _apply_held(self, ops: Sequence[LedgerOp], now: datetime, conn: Connection) -> Results: ...

    def _apply_at_once(
        self, ops: Sequence[LedgerOp], now: datetime, conn: Connection
    ) -> Results | None: ...


class SqlLedgerSession:
    """A :class:`~newsletter.store.protocol.LedgerSession` on the SQL store; one thread uses it."""

    __slots__ = ("_conn", "_fast", "_opened", "_store")

    def __init__(self, store: _GroupCommits) -> None:
        self._store = store
        self._conn: Connection | None = None
        """The writer's own connection, for batches applied in a transaction."""
        self._fast: Connection | None = None
        """PostgreSQL: the autocommit connection for one-statement group commits."""
        self._opened = False
        """Whether :attr:`_fast` was asked for (it stays ``None`` on SQLite)."""

    def apply(self, ops: Sequence[LedgerOp], now: datetime) -> Results:
        """``ops`` as one group commit (all or nothing); one result per op, as
        :meth:`~newsletter.store.ledger.LedgerStore.apply_ledger` gives them."""
        store = self._store
        try:
            if not self._opened:
                self._fast = store._ledger_connection()
                self._opened = True
            fast = self._fast
            results = store._apply_at_once(ops, now, fast) if fast is not None else None
            if results is None:
                if self._conn is None:
                    self._conn = store._writer_connection()
                results = store._apply_held(ops, now, self._conn)
            return results
        except BaseException as e:
            self.close()  # maybe broken: the next batch reopens
            if isinstance(e, store._db_errors):
                raise store.error(e) from e
            raise

    def close(self) -> None:
        """Close the session's connections (the next :meth:`apply` opens new ones)."""
        conns, self._conn, self._fast, self._opened = (self._conn, self._fast), None, None, False
        for conn in conns:
            if conn is not None:
                conn.close()
