"""A send at the relay's pace (issue 41), seen from a real aiosmtpd relay on loopback.

The issue's case: a relay that answers each final dot after 100 ms (as one across the internet
does) got one message at a time waiting for that answer, whatever ``smtp.pool_size``: 9.5
messages a second. With the shipped defaults a send now keeps a message in flight on every
connection (the relay sees several waiting for its answer at once), opens connections while that
pays up to the relay's limit (a relay that greets the one too many with ``421 Too many
connections`` gets no more, and no message fails for it), and slows the whole pool down when
the relay throttles (every message still delivered in the run). Nothing here times the send:
the relay counts what it saw.
"""

from __future__ import annotations

import logging
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from newsletter.config import SmtpSettings, load_config
from newsletter.deliver.smtp import Crowded, SmtpMailer
from newsletter.edition import SendReport
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, base_config, write_config
from tests.deliver.test_mime import build
from tests.deliver.test_wire import dotted_digest
from tests.sends import run_send
from tests.smtpfaults import Fault, FaultHandler, FaultServer, fault_server

pytestmark = pytest.mark.slow  # real sends of hundreds of readers through a relay that waits


def _send(
    tmp_path: Path,
    relay: FaultServer,
    url: str,
    readers: int,
    *,
    smtp: dict[str, Any] | None = None,
    delivery: dict[str, Any] | None = None,
) -> SendReport:
    data = base_config(
        url,
        relay,  # type: ignore[arg-type]
        schedule={"no_listing": "send"},
        digest={"empty": "send"},
        web={"secret_key": "relay-pace-secret-0123456789abcdef"},
    )
    data["smtp"].update({"timeout": 60, **(smtp or {})})
    if delivery:
        data["delivery"] = {**data.get("delivery", {}), **delivery}
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    try:
        store.upgrade()
        for i in range(readers):
            store.add_subscriber(f"r{i:04d}@example.org", topics=["gpu-kernels"], now=NOW)
        run_fetch(config, store, NOW - timedelta(hours=1))
        return run_send(config, store, NOW)
    finally:
        store.close()


def _once_each(relay: FaultServer, readers: int) -> None:
    counts = relay.count_by_rcpt()
    assert len(counts) == readers, f"{readers - len(counts)} readers got nothing"
    assert set(counts.values()) == {1}, [r for r, n in counts.items() if n > 1]


def test_a_relay_100_ms_away_gets_a_message_on_every_connection_at_once(
    tmp_path: Path, db_url: str
) -> None:
    """The issue's case, shipped defaults: the relay answers each final dot after 100 ms. The
    final-dot gate let one message at a time wait for that answer; now every connection has
    one waiting."""
    handler = FaultHandler(pipelining=True, delay=0.1)
    with fault_server(handler=handler) as relay:
        report = _send(tmp_path, relay, db_url, 40)
    assert report.sent == 40 and report.failed == 0, report
    _once_each(relay, 40)
    assert handler.peak_awaiting >= 4, (
        f"at most {handler.peak_awaiting} message(s) waited for the relay's answer at once"
    )


def test_connections_grow_to_the_relays_limit_and_none_fails_for_it(
    tmp_path: Path, db_url: str
) -> None:
    """A relay 100 ms away that takes 6 connections: the send starts with 4, adds more while
    the rate rises, meets ``421 Too many connections`` and keeps to 6; every message delivered
    once, none recorded failed or retried."""
    handler = FaultHandler(pipelining=True, delay=0.1, max_connections=6)
    with fault_server(handler=handler) as relay:
        report = _send(tmp_path, relay, db_url, 240)
    assert report.sent == 240 and report.failed == 0 and report.retried == 0, report
    _once_each(relay, 240)
    assert handler.peak == 6, f"the send had at most {handler.peak} connections open"
    assert handler.refused >= 1, "the send never tried a connection beyond the relay's limit"
    assert handler.refused <= 6, f"{handler.refused} connections refused: it kept knocking"


def test_a_throttling_relay_slows_the_whole_send_and_nothing_fails(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A relay that takes 20 messages a second and answers the rest ``454``: the pool's one
    rate is cut to the relay's pace (not each connection retrying at full speed), and every
    message of the run is delivered in that same run, none failed."""
    caplog.set_level(logging.WARNING, logger="newsletter.deliver.pool")
    handler = FaultHandler(pipelining=True, quota=20)
    with fault_server(handler=handler) as relay:
        report = _send(tmp_path, relay, db_url, 240, smtp={"pool_size": 4})
    assert report.sent == 240 and report.failed == 0 and report.retried == 0, report
    _once_each(relay, 240)
    assert report.throttled == handler.throttled >= 1, (report.throttled, handler.throttled)
    assert handler.throttled <= 60, f"{handler.throttled} throttling replies for 240 messages"
    [said] = [r.getMessage() for r in caplog.records if "asked to slow down" in r.getMessage()]
    rate = float(said.split("ended at ")[1].split(" messages")[0])
    assert 0 < rate <= 30, said  # the shared rate, near the relay's 20 a second
    assert "smtp.rate_per_second:" in said


def test_a_relay_that_refuses_every_connection_stops_the_run_with_one_line(
    tmp_path: Path, db_url: str
) -> None:
    """Another program holds the relay's only connection: the send's lone connection is
    refused as too many, waits and tries again, and after ``delivery.attempts`` refusals the
    run stops naming the relay; the next run, once the relay has room, sends everything."""
    handler = FaultHandler(pipelining=True, max_connections=1)
    with fault_server(handler=handler) as relay:
        holder = socket.create_connection((relay.host, relay.port))
        try:
            holder.recv(512)  # its greeting: the relay counts it
            report = _send(
                tmp_path,
                relay,
                db_url,
                3,
                delivery={"attempts": 2, "retry_delay": 0.05},
            )
        finally:
            holder.close()
        assert report.sent == 0 and report.relay_error is not None, report
        assert "refused every connection as too many" in report.relay_error
        assert "421" in report.relay_error
        assert relay.received == []
        config = load_config(tmp_path / "newsletter.yaml")
        store = Store(config.database_url)
        try:
            again = run_send(config, store, NOW)
        finally:
            store.close()
    assert again.sent == 3, again
    _once_each(relay, 3)


def test_the_mailer_names_a_connection_refused_as_too_many() -> None:
    """At the greeting (a 4xx instead of 220) and in the session (``421 … too many
    connections`` to MAIL): :class:`Crowded`, not a failed message or an unusable relay."""
    handler = FaultHandler(pipelining=True, max_connections=1)
    with fault_server(handler=handler) as relay:
        settings = SmtpSettings(host=relay.host, port=relay.port, timeout=10)
        with SmtpMailer(settings) as first:
            first.send(build(dotted_digest()))
            with SmtpMailer(settings) as second, pytest.raises(Crowded) as refused:
                second.send(build(dotted_digest()))
    assert refused.value.reply.startswith("421") and "Too many connections" in refused.value.reply

    def plan(stage: str, rcpt: str | None) -> Fault | None:
        if stage == "MAIL":
            return Fault(reply="421 4.7.0 too many concurrent SMTP connections", close=True)
        return None

    with fault_server(plan, pipelining=True) as relay:
        settings = SmtpSettings(host=relay.host, port=relay.port, timeout=10)
        with SmtpMailer(settings) as mailer, pytest.raises(Crowded):
            mailer.send(build(dotted_digest()))


def test_the_pace_warning_speaks_only_of_a_relay_slow_to_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A relay that answers at once gets no advice; one that takes 50 ms with a ceiling of two
    connections gets its measured answer time and a larger ``smtp.pool_size`` to try."""
    url = f"sqlite:///{tmp_path / 'fast.db'}"
    caplog.set_level(logging.INFO, logger="newsletter.deliver.pool")
    fast = tmp_path / "fast"
    fast.mkdir()
    with fault_server(pipelining=True) as relay:
        report = _send(fast, relay, url, 220)
    assert report.sent == 220
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    caplog.clear()
    slow = tmp_path / "slow"
    slow.mkdir()
    handler = FaultHandler(pipelining=True, delay=0.05)
    with fault_server(handler=handler) as relay:
        report = _send(slow, relay, f"sqlite:///{tmp_path / 'slow.db'}", 220, smtp={"pool_size": 2})
    assert report.sent == 220
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "ms to answer each message" in warning and "smtp.pool_size (say 4)" in warning
    answer_ms = float(warning.split(" took ")[1].split(" ms")[0])
    assert 40 <= answer_ms <= 500, warning  # the relay's 50 ms, measured
