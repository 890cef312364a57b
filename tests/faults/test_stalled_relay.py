"""A relay that stalls after the final dot: the run stops, and its unknown editions are settled.

The review's case: every message cost 2 x ``smtp.timeout`` (the stall, then the immediate
re-send stalling too), the run never ended, and the ``unknown`` editions it left were counted as
"already sent" by the next run: those readers got nothing. Here the real CLI runs against a
relay that takes each message and then does not answer (``smtp.timeout`` is short).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.errors import ExitStatus
from newsletter.models import EditionStatus
from tests.faults.sendrun import Setup, ledger, populate, start_send
from tests.smtpfaults import Fault, FaultServer, fault_server

SUBSCRIBERS = 10


class Stall:
    """A plan: while ``on``, the relay stores each message and then says nothing."""

    def __init__(self) -> None:
        self.on = True

    def __call__(self, stage: str, rcpt: str | None) -> Fault | None:
        if self.on and stage == "DATA":
            return Fault(keep=True, stall=30)
        return None


def _run(setup: Setup, log: Path, *args: str) -> tuple[int, str]:
    start = log.stat().st_size if log.exists() else 0
    status = start_send(setup, log, *args).wait(timeout=120)
    return status, log.read_bytes()[start:].decode()


def _cli(setup: Setup, *args: str) -> str:
    """The command in this process (quicker than a subprocess; the stalled run is one)."""
    result = CliRunner().invoke(
        cli, ["--config", str(setup.path), *args], catch_exceptions=False, env={"NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def _unknown_editions(setup: Setup) -> list[dict[str, object]]:
    shown: list[dict[str, object]] = json.loads(_cli(setup, "status", "--json"))["unknown_editions"]
    return shown


def _stalled_run(
    tmp_path: Path, db_url: str, relay: FaultServer, on_unknown: str
) -> tuple[Setup, Path, set[str]]:
    setup = populate(
        tmp_path,
        db_url,
        relay,
        SUBSCRIBERS,
        smtp={"pool_size": 1, "timeout": 0.5, "max_timeouts": 3},
        delivery={"on_unknown": on_unknown, "retry_delay": 0.05},
    )
    log = tmp_path / "send.log"
    status, output = _run(setup, log)
    assert status == ExitStatus.RELAY_UNUSABLE, output
    assert "Traceback" not in output
    assert "did not answer within smtp.timeout (0.5 s) 3 times in a row" in output
    assert "ALERT" in output and "the relay cannot be used" in output
    store = setup.store()
    try:
        rows = ledger(store)
        unknown = {r.email for r in rows if r.status is EditionStatus.UNKNOWN}
        # one connection: three messages stalled in a row, then the run stopped
        assert len(unknown) == 3, [(r.email, r.status) for r in rows]
        assert {r.status for r in rows} <= {EditionStatus.UNKNOWN, EditionStatus.DEFERRED}
        [run] = store.last_runs(1)
        assert run.status == "failed" and "3 times in a row" in (run.error or "")
    finally:
        store.close()
    assert set(relay.count_by_rcpt()) == unknown  # the relay has them, but said nothing
    assert {e["email"] for e in _unknown_editions(setup)} == unknown
    return setup, log, unknown


def test_a_stalled_relay_stops_the_run_and_the_next_run_resends_its_unknown_editions_once(
    tmp_path: Path, db_url: str
) -> None:
    stall = Stall()
    with fault_server(stall) as relay:
        setup, log, unknown = _stalled_run(tmp_path, db_url, relay, "resend")
        stall.on = False
        status, output = _run(setup, log)
        assert status == ExitStatus.OK, output
        ids = relay.ids_by_rcpt()
        assert set(ids) == set(setup.emails), "every reader got the digest"
        twice = {rcpt for rcpt, mids in ids.items() if len(mids) == 2}
        assert twice == unknown, "each unknown edition re-sent once"
        assert all(len(set(mids)) == 1 for mids in ids.values()), "with the same Message-ID"
        assert all(len(mids) <= 2 for mids in ids.values())
        store = setup.store()
        try:
            assert {r.status for r in ledger(store)} == {EditionStatus.SENT}
            assert store.last_runs(1)[0].counts["resent"] == 3
        finally:
            store.close()
        assert _unknown_editions(setup) == []


@pytest.mark.parametrize("action", ["resend", "drop"])
def test_held_unknown_editions_wait_until_settled_by_hand(
    tmp_path: Path, db_url: str, action: str
) -> None:
    stall = Stall()
    with fault_server(stall) as relay:
        setup, _log, unknown = _stalled_run(tmp_path, db_url, relay, "hold")
        stall.on = False
        _cli(setup, "send", "--now")
        assert all(n == 1 for n in relay.count_by_rcpt().values()), "hold: no re-send"
        shown = _unknown_editions(setup)
        assert {e["email"] for e in shown} == unknown, "still shown until settled"
        human = _cli(setup, "status")
        assert "delivery is unknown (3)" in human and "--settle-unknown" in human
        assert all(email in human for email in unknown)

        assert "3 unknown editions" in _cli(setup, "send", "--settle-unknown", action)
        assert _unknown_editions(setup) == (
            [] if action == "drop" else [{**e, "status": "resend"} for e in shown]
        )
        _cli(setup, "send", "--now")
        ids = relay.ids_by_rcpt()
        store = setup.store()
        try:
            rows = {r.email: r for r in ledger(store)}
        finally:
            store.close()
        for email in unknown:
            if action == "resend":
                assert len(ids[email]) == 2 and len(set(ids[email])) == 1
                assert rows[email].status is EditionStatus.SENT
            else:
                assert len(ids[email]) == 1
                assert rows[email].status is EditionStatus.DROPPED
                assert "given up by hand" in (rows[email].last_error or "")
        assert _unknown_editions(setup) == []
