"""The ledger's side of sending: who owns a claim, and the thread that records each outcome.

:func:`run_owner` names a run in the ledger (``host:pid:process.run``) and :func:`owner_gone`
tells whether such a run's process is gone, so its claims may be taken over at once.
:class:`LedgerWriter` applies the senders' ledger writes on one thread, as many per
transaction as are waiting (group commit), with the ordering guarantees :mod:`.pool` relies on,
through the store's :class:`~newsletter.store.protocol.LedgerSession` (on the SQL store, the
fastest statements each database has, on connections of the session's own).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from newsletter.models import LedgerOp
from newsletter.store.protocol import LedgerSession, SendStore

log = logging.getLogger(__name__)

HOST = socket.gethostname()


PROCESS = uuid.uuid4().hex[:8]
"""This process's incarnation: a restarted container often gets the same pid and host name."""


def run_owner() -> str:
    """A run's name in the ledger: ``host:pid:process.run``."""
    return f"{HOST}:{os.getpid()}:{PROCESS}.{uuid.uuid4().hex[:8]}"


def owner_gone(owner: str) -> bool:
    """True when ``owner`` (see :func:`run_owner`) names a process on this host that no longer
    exists: its claims can be resumed at once. Owners on other hosts are never "gone" (their
    claims wait for ``delivery.claim_lease``)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != HOST:
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        # Our own pid: one of our runs, or an earlier process that had the same pid.
        return parts[2].split(".")[0] != PROCESS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


class Signal:
    """A one-shot flag that other threads wait for: :class:`threading.Event`'s ``set``,
    ``is_set`` and ``wait`` on one lock, held until it is set.

    A send makes two per message (one per ledger write); an Event is a condition variable, a
    lock and a list of waiters, each wait making a lock of its own, and it cost a tenth of the
    ledger writer's CPU. One thread sets a signal (the writer): :meth:`set` is not meant to
    race with itself.
    """

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        """Set the flag and wake whoever waits; setting it again does nothing."""
        if not self._set:
            self._set = True
            self._lock.release()

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Return once the flag is set (True), or after ``timeout`` seconds (whether it is)."""
        if self._set:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else timeout):
            self._lock.release()  # for the next waiter
            return True
        return self._set


class PendingWrite:
    """A ledger write queued for the writer thread; :attr:`done` is set once committed."""

    __slots__ = ("done", "error", "op", "posted", "result")

    def __init__(self, op: LedgerOp, *, posted: bool = False) -> None:
        self.op = op
        self.posted = posted
        self.done = Signal()
        self.result: str | bool | None = None
        self.error: BaseException | None = None


class LedgerWriter:
    """One thread that applies the senders' ledger writes, as many per transaction as are waiting.

    A sender blocks in :meth:`call` until its write is committed, so "marked ``sending`` before
    the relay sees the message" and "recorded ``sent`` before the next message on that
    connection" both hold; batching only merges the commits of senders that are waiting at the
    same moment (group commit). On SQLite this also keeps the database to two writers (this
    thread and the claiming one) instead of one per connection.

    ``callers`` is how many senders call (the pool's connections); with ``linger`` > 0 a batch
    holding a waiting call waits up to ``linger`` seconds for the other senders' calls to join it
    (as Kafka's ``linger.ms`` or PostgreSQL's ``commit_delay``): with 4 connections a commit then
    carries the begins of about 4 digests instead of about 1. The pool sets ``callers`` to the
    connections open as they change.
    """

    def __init__(
        self,
        store: SendStore,
        clock: Callable[[], datetime],
        *,
        max_batch: int = 64,
        callers: int = 1,
        linger: float = 0.0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_batch = max_batch
        self.callers = callers
        self.linger = linger
        self._queue: queue.SimpleQueue[PendingWrite | None] = queue.SimpleQueue()
        self.failed: BaseException | None = None
        """The error of a posted write nobody waited for; raised by the next call."""
        self._session: LedgerSession = store.ledger_session()
        """Used on the writer thread only (the SQL store's opens its connections there)."""
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def call(self, op: LedgerOp) -> str | bool | None:
        """Apply ``op`` and return its result once committed (with everything queued before)."""
        pending = PendingWrite(op)
        self._queue.put(pending)
        pending.done.wait()
        self._raise_failed()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def post(self, op: LedgerOp) -> PendingWrite:
        """Queue ``op`` without waiting. Writes are applied in order, so the sender's next
        :meth:`call` (its next ``begin``) returns only after this one is committed too; before
        anything else on that connection (QUIT), the sender waits for it (:meth:`wait`)."""
        self._raise_failed()
        pending = PendingWrite(op, posted=True)
        self._queue.put(pending)
        return pending

    def wait(self, pending: PendingWrite) -> None:
        """Return once a posted write is committed (or failed: :meth:`close` raises that)."""
        pending.done.wait()

    def close(self) -> None:
        """Commit what is queued and stop the writer; raises the error of a write that failed."""
        self._queue.put(None)
        self._thread.join()
        self._raise_failed()

    def _raise_failed(self) -> None:
        if self.failed is not None:
            raise self.failed

    def _run(self) -> None:
        try:
            self._loop(self._session)
        finally:
            self._session.close()

    def _linger(self, batch: list[PendingWrite]) -> bool:
        """Wait up to :attr:`linger` seconds for the other senders' calls to join ``batch``
        (while fewer than :attr:`callers` are waiting in it); True when the writer was told to
        stop meanwhile."""
        waiting = sum(not p.posted for p in batch)
        if waiting == 0:
            return False
        deadline = time.monotonic() + self.linger
        while waiting < self.callers and len(batch) < self.max_batch:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                nxt = self._queue.get(timeout=left)
            except queue.Empty:
                return False
            if nxt is None:
                return True
            batch.append(nxt)
            waiting += not nxt.posted
        return False

    def _loop(self, session: LedgerSession) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.append(nxt)
            if not stopping and self.linger > 0:
                stopping = self._linger(batch)
            try:
                results = session.apply([p.op for p in batch], self.clock())
            except BaseException as e:  # every waiting sender sees the error
                for p in batch:
                    p.error = e
                if any(p.posted for p in batch):
                    self.failed = self.failed or e
            else:
                for p, r in zip(batch, results, strict=True):
                    p.result = r
            finally:
                for p in batch:
                    p.done.set()
