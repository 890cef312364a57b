"""The ledger writer's group commit: the senders' begins share one commit, on both backends.

Each connection's begin must be committed before its message goes out, so without waiting the
writer commits them about one at a time. ``delivery.group_commit_wait`` lets a batch that holds
a waiting begin wait for the other connections' begins. A spy counts the batches the real store applies (the writes
themselves run on the real database).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any

from newsletter.deliver.ledger import LedgerWriter
from newsletter.models import EditionStatus, LedgerOp
from newsletter.store import Store
from newsletter.store.protocol import LedgerSession

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)
DAY = date(2026, 11, 17)
OWNER = "host:1:run"


class CountingStore:
    """The real store, with the batches the writer hands its ledger session counted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.batches: list[list[str]] = []

    def ledger_session(self) -> LedgerSession:
        return CountingSession(self.store.ledger_session(), self.batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class CountingSession:
    def __init__(self, session: LedgerSession, batches: list[list[str]]) -> None:
        self.session = session
        self.batches = batches

    def apply(self, ops: Sequence[LedgerOp], now: datetime) -> list[Any]:
        self.batches.append([op.kind for op in ops])
        return self.session.apply(ops, now)

    def close(self) -> None:
        self.session.close()


def _claims(store: Store, n: int) -> list[LedgerOp]:
    ops = []
    for i in range(n):
        sub, _ = store.add_subscriber(f"r{i}@example.org", topics=["t"], now=NOW)
        claim = store.claim_edition(sub.id, DAY, f"<{i}@x>", NOW, owner=OWNER)
        assert claim is not None
        ops.append(LedgerOp("begin", claim.id, sub.id, OWNER))
    return ops


def _begin_from_threads(writer: LedgerWriter, ops: list[LedgerOp], gap: float) -> list[Any]:
    results: list[Any] = [None] * len(ops)

    def sender(i: int) -> None:
        results[i] = writer.call(ops[i])

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(len(ops))]
    for th in threads:
        th.start()
        time.sleep(gap)  # the senders arrive one after another, as they finish their messages
    for th in threads:
        th.join()
    return results


def test_begins_of_four_connections_share_one_commit(store: Store) -> None:
    spy = CountingStore(store)
    ops = _claims(store, 4)
    writer = LedgerWriter(spy, lambda: NOW, callers=4, linger=30.0)  # type: ignore[arg-type]
    try:
        results = _begin_from_threads(writer, ops, gap=0.05)
    finally:
        writer.close()
    assert results == ["ok"] * 4
    assert spy.batches == [["begin"] * 4]  # waited for all four, not the 30 s
    for op in ops:
        record = store.edition_for(op.subscriber_id, DAY)
        assert record is not None and record.status is EditionStatus.SENDING


def test_without_waiting_each_begin_is_its_own_commit(store: Store) -> None:
    spy = CountingStore(store)
    ops = _claims(store, 4)
    writer = LedgerWriter(spy, lambda: NOW, callers=4, linger=0.0)  # type: ignore[arg-type]
    try:
        results = _begin_from_threads(writer, ops, gap=0.2)
    finally:
        writer.close()
    assert results == ["ok"] * 4
    assert spy.batches == [["begin"]] * 4


def test_a_posted_mark_alone_does_not_wait(store: Store) -> None:
    """Only a batch with a sender waiting on it lingers: a lone ``sent`` mark is committed at
    once, long before the wait would end."""
    spy = CountingStore(store)
    (op,) = _claims(store, 1)
    assert store.begin_send(op.edition_id, op.subscriber_id, OWNER, NOW) == "ok"
    writer = LedgerWriter(spy, lambda: NOW, callers=4, linger=30.0)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        pending = writer.post(
            LedgerOp("mark", op.edition_id, op.subscriber_id, OWNER, EditionStatus.SENT)
        )
        writer.wait(pending)
        assert time.monotonic() - started < 15  # not the 30 s wait
    finally:
        writer.close()
    assert spy.batches == [["mark"]]
    record = store.edition_for(op.subscriber_id, DAY)
    assert record is not None and record.status is EditionStatus.SENT


def test_stopping_the_writer_does_not_wait_out_the_linger(store: Store) -> None:
    spy = CountingStore(store)
    (op,) = _claims(store, 1)
    writer = LedgerWriter(spy, lambda: NOW, callers=4, linger=30.0)  # type: ignore[arg-type]
    results: list[Any] = []
    th = threading.Thread(target=lambda: results.append(writer.call(op)))
    th.start()
    time.sleep(0.1)  # the begin is waiting for three more that never come
    started = time.monotonic()
    writer.close()  # the sender's begin is committed, then the writer stops
    th.join()
    assert results == ["ok"]
    assert time.monotonic() - started < 15
    assert spy.batches == [["begin"]]


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    results: list[Any] = []
    th = threading.Thread(target=lambda: results.append(call()), daemon=True)
    th.start()
    return th, results


def test_signal_wakes_every_waiter_once_set_and_times_out_before() -> None:
    """The writer's one-shot flag (in place of threading.Event): a wait before ``set`` times out
    with False, every waiting thread wakes when it is set, later waits return at once, and a
    second ``set`` does nothing."""
    from newsletter.deliver.ledger import Signal

    signal = Signal()
    assert not signal.is_set()
    assert signal.wait(0.05) is False
    woke: list[bool] = []
    waiters = [threading.Thread(target=lambda: woke.append(signal.wait(30))) for _ in range(3)]
    for th in waiters:
        th.start()
    time.sleep(0.1)
    assert woke == []  # all three are still waiting
    signal.set()
    signal.set()
    for th in waiters:
        th.join(30)
    assert woke == [True, True, True]
    assert signal.is_set() and signal.wait() and signal.wait(0)
