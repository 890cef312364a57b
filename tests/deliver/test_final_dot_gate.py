"""The pool's final-dot gate, seen from the relay: one message at a time is past its final dot
without its outcome committed, so a kill can leave at most one duplicate.

A real aiosmtpd relay on loopback watches a real send (four connections, SQLite and PostgreSQL).
At each final dot it receives, it asks the database which of the messages it has taken are
not ``sent`` yet: never more than the one just received. To give the other connections every
chance to write their final dots meanwhile, the relay keeps the first message after the
opening one without an answer until the three other connections have had their ``354`` (they
got through MAIL, RCPT and DATA in parallel), and a moment more. A relay that stalls on that
message instead stops the run, and the connections waiting at the gate send nothing more.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP

from newsletter.config import load_config
from newsletter.edition import SendReport
from newsletter.ingest import run_fetch
from newsletter.models import EditionRecord, EditionStatus
from newsletter.store import Store
from tests.conftest import NOW, base_config, write_config
from tests.sends import run_send
from tests.smtpfaults import Fault, FaultHandler, FaultServer, fault_server

POOL = 4
READERS = 10
GRACE = 0.5
"""Seconds the held message waits, once the other connections are at their data, for a final
dot that must not come (without the gate, theirs come within milliseconds)."""


def _rows(store: Store) -> list[EditionRecord]:
    days = (NOW.date() - timedelta(days=1), NOW.date(), NOW.date() + timedelta(days=1))
    return [r for d in days for r in store.editions_on(d)]


class Watch(FaultHandler):
    """A relay that counts, at each final dot, its messages whose ledger row is not ``sent``;
    ``stall`` makes it say nothing after the second message instead of answering it."""

    def __init__(self, url: str, *, pipelining: bool, stall: bool = False) -> None:
        super().__init__(pipelining=pipelining)
        self.store = Store(url)
        self.stall = stall
        self.taken: list[str] = []
        self.unsent: list[int] = []
        """At each final dot: how many messages the relay has whose row is not ``sent``."""
        self.at_data = 0
        """Connections told ``354`` whose final dot has not come yet."""
        self.beside_held: int | None = None
        """``at_data`` when the held message was answered: the others worked meanwhile."""

    def fault(self, stage: str, rcpt: str | None) -> Fault | None:
        if stage == "DATA-CMD":
            self.at_data += 1
        if stage == "DATA" and self.stall and len(self.taken) == 2:
            return Fault(keep=True, stall=5)
        return None

    async def handle_DATA(self, server: SMTP, session: Any, envelope: Any) -> str:
        self.at_data -= 1
        self.taken.append(envelope.rcpt_tos[0])
        sent = {r.email for r in _rows(self.store) if r.status is EditionStatus.SENT}
        self.unsent.append(len(set(self.taken) - sent))
        if len(self.taken) == 2 and not self.stall:  # the opening message went alone
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while self.at_data < POOL - 1 and len(self.taken) == 2 and loop.time() < deadline:
                await asyncio.sleep(0.01)
            grace = loop.time() + GRACE
            while len(self.taken) == 2 and loop.time() < grace:
                await asyncio.sleep(0.01)
            self.beside_held = self.at_data
        return await super().handle_DATA(server, session, envelope)


@pytest.fixture(params=[False, True], ids=["lockstep", "pipelining"])
def pipelining(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _send(
    tmp_path: Path, watch: Watch, url: str, delivery: dict[str, Any] | None = None, **smtp: Any
) -> tuple[SendReport, FaultServer, list[EditionRecord]]:
    """Ten readers sent to by four connections through ``watch``: the report, the relay and
    the ledger rows at the end."""
    with fault_server(handler=watch) as relay:
        data = base_config(
            url,
            relay,  # type: ignore[arg-type]
            schedule={"no_listing": "send"},
            digest={"empty": "send"},
            web={"secret_key": "final-dot-gate-secret-0123456789ab"},
        )
        data["smtp"].update({"pool_size": POOL, "timeout": 120, **smtp})
        if delivery:
            data["delivery"] = {**data.get("delivery", {}), **delivery}
        config = load_config(write_config(tmp_path, data))
        store = Store(config.database_url)
        try:
            store.upgrade()
            for i in range(READERS):
                store.add_subscriber(f"r{i}@example.org", topics=["gpu-kernels"], now=NOW)
            run_fetch(config, store, NOW - timedelta(hours=1))
            report = run_send(config, store, NOW)
            return report, relay, _rows(store)
        finally:
            store.close()
            watch.store.close()


def test_one_message_at_a_time_between_its_final_dot_and_its_committed_mark(
    tmp_path: Path, db_url: str, pipelining: bool
) -> None:
    watch = Watch(db_url, pipelining=pipelining)
    report, relay, rows = _send(tmp_path, watch, db_url)
    assert report.sent == READERS
    assert sorted(relay.count_by_rcpt().values()) == [1] * READERS
    assert {r.status for r in rows} == {EditionStatus.SENT}
    assert watch.unsent == [1] * READERS, "a final dot came before an earlier 250 was recorded"
    assert watch.beside_held == POOL - 1, "the other connections did not reach their data"


def test_a_relay_stalled_past_the_final_dot_stops_the_run_with_no_other_final_dot(
    tmp_path: Path, db_url: str, pipelining: bool
) -> None:
    """The stall holds the gate for ``smtp.timeout``; the timeout stops the run (one is enough
    here), and the connections waiting at the gate give their messages back unsent."""
    watch = Watch(db_url, pipelining=pipelining, stall=True)
    report, relay, rows = _send(tmp_path, watch, db_url, timeout=0.5, max_timeouts=1)
    assert report.relay_error is not None and "did not answer" in report.relay_error
    assert len(relay.received) == 2, "another final dot came while the stalled one held the gate"
    status = {r.email: r.status for r in rows}
    first, stalled = watch.taken
    assert status.pop(first) is EditionStatus.SENT
    assert status.pop(stalled) is EditionStatus.UNKNOWN
    assert set(status.values()) <= {EditionStatus.DEFERRED}, status  # given back, or deleted
    assert watch.unsent == [1, 1]


def test_per_connection_lets_the_connections_overlap_past_the_final_dot(
    tmp_path: Path, db_url: str
) -> None:
    """``delivery.crash_duplicates: per_connection`` (for a distant relay) takes no gate: while
    the held message waits for its answer, the other connections write their final dots."""
    watch = Watch(db_url, pipelining=True)
    report, relay, rows = _send(
        tmp_path, watch, db_url, delivery={"crash_duplicates": "per_connection"}
    )
    assert report.sent == READERS
    assert {r.status for r in rows} == {EditionStatus.SENT}
    assert max(watch.unsent) > 1, "the connections still waited for each other"
    assert sorted(relay.count_by_rcpt().values()) == [1] * READERS


class Slow(Watch):
    """A relay that takes 80 ms to answer each final dot (as a distant one would)."""

    async def handle_DATA(self, server: SMTP, session: Any, envelope: Any) -> str:
        await asyncio.sleep(0.08)
        return await FaultHandler.handle_DATA(self, server, session, envelope)


@pytest.mark.parametrize("mode", ["one", "per_connection"])
def test_a_run_held_back_by_the_gate_says_what_to_change(
    tmp_path: Path, db_url: str, mode: str, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    """The gate costs speed with a relay slow to answer the final dot: a run whose connections
    mostly waited for one another there says so, and names the setting; without the gate it
    has nothing to say."""
    from newsletter.deliver import pool

    monkeypatch.setattr(pool, "GATE_HINT_MESSAGES", 5)
    caplog.set_level("WARNING", logger="newsletter.deliver.pool")
    report, _, rows = _send(
        tmp_path, Slow(db_url, pipelining=True), db_url, delivery={"crash_duplicates": mode}
    )
    assert report.sent == READERS and {r.status for r in rows} == {EditionStatus.SENT}
    hints = [r.getMessage() for r in caplog.records if "final dot" in r.getMessage()]
    if mode == "one":
        assert len(hints) == 1 and "crash_duplicates: per_connection" in hints[0], hints
    else:
        assert hints == []
