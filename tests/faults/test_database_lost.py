"""A send that loses its PostgreSQL connection reconnects and carries on; one whose database
stays away stops with one line and exit status 4 (issue 19, item 4).

Both run the real ``newsletter send --now`` in a subprocess against real PostgreSQL and a relay
in this process, which cuts the database when it has taken a given number of messages.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from newsletter.errors import ExitStatus
from tests.conftest import PG_URL
from tests.faults.harness import (
    RECORDED,
    FaultyRelay,
    TcpProxy,
    audit,
    cli,
    human_lines,
    install,
    run_cli,
    terminate_backends,
    with_application_name,
)
from tests.smtpfaults import fault_server

SUBSCRIBERS = 90


@pytest.mark.postgres
def test_backends_terminated_mid_send_the_run_reconnects_and_loses_nothing(
    tmp_path: Path, pg_schema_url: str
) -> None:
    name = f"nl-{uuid.uuid4().hex[:10]}"
    ended: list[int] = []

    def cut(stored: int) -> None:
        if stored in (20, 55):  # every connection of the run, twice
            ended.append(terminate_backends(name))

    plan = FaultyRelay(seed=4, share=0.0, on_message=cut)
    with fault_server(plan) as relay:
        url = with_application_name(pg_schema_url, name)
        path, store = install(tmp_path, url, relay, SUBSCRIBERS)
        store.close()
        log = tmp_path / "send.log"
        proc = cli(path, "send", "--now", log=log)
        assert proc.wait(timeout=120) == 0, log.read_text()
        assert len(ended) == 2 and all(ended), ended  # the send really lost its connections
        assert "Traceback" not in log.read_text()
        result = audit(path, relay)
    assert result.lost == [] and result.other_ids == []
    assert result.delivered == SUBSCRIBERS
    assert result.duplicates == 0
    assert result.statuses == {"sent": SUBSCRIBERS}
    assert result.runs == {"ok": 1}


@pytest.mark.postgres
def test_database_gone_for_good_stops_with_one_line_and_status_4(
    tmp_path: Path, pg_schema_url: str
) -> None:
    host, port = "127.0.0.1", int(PG_URL.rsplit(":", 1)[1].split("/")[0])
    proxy = TcpProxy((host, port))
    gone = threading.Event()

    def cut(stored: int) -> None:
        if stored == 30:
            proxy.down()
            gone.set()

    plan = FaultyRelay(seed=5, share=0.0, on_message=cut)
    try:
        with fault_server(plan) as relay:
            path, store = install(
                tmp_path,
                proxy.url(pg_schema_url),
                relay,
                SUBSCRIBERS,
                database={"reconnect_seconds": 2},
            )
            store.close()
            result = run_cli(path, "send", "--now")
            assert gone.is_set()
            assert "Traceback" not in result.stdout + result.stderr, result.stderr
            lines = [line for line in human_lines(result.stderr) if line.startswith("error")]
            assert len(lines) == 1, result.stderr
            # whichever thread met the lost database first says so, naming it
            assert f"database postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/" in lines[0]
            assert result.returncode == ExitStatus.DATABASE_UNAVAILABLE, result.stderr

            proxy.up()  # the database is back: the run shows as ended, the next one finishes
            again = run_cli(path, "send", "--now")
            assert again.returncode == 0, again.stderr
            after = audit(path, relay)
    finally:
        proxy.down()
    assert after.lost == [] and after.other_ids == []
    assert after.delivered == SUBSCRIBERS
    # Only the messages in flight when the database went away can arrive twice.
    assert after.duplicates <= 3
    assert set(after.runs) <= RECORDED and after.runs["ok"] == 1
    assert sum(after.runs.values()) == 2


def test_a_lost_connection_is_retried_until_the_window_runs_out() -> None:
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from newsletter.errors import DatabaseUnavailable
    from newsletter.store.retry import retry_on_disconnect

    clock = [0.0]
    tries: list[float] = []

    def lost() -> None:
        tries.append(clock[0])
        if len(tries) == 1:
            raise OperationalError(
                "UPDATE editions", {}, Exception("gone"), connection_invalidated=True
            )
        raise OperationalError("connect", {}, Exception("connection refused"))

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    with pytest.raises(DatabaseUnavailable, match="gave up"):
        retry_on_disconnect(
            lost,
            gave_up=lambda e: DatabaseUnavailable(f"gave up: {e.orig}"),  # type: ignore[attr-defined]
            window=5,
            sleep=sleep,
            clock=lambda: clock[0],
        )
    assert len(tries) > 3 and clock[0] == pytest.approx(5)  # backed off, then gave up

    # the statement works again on the second try: its result comes back
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError(
                "UPDATE editions", {}, Exception("gone"), connection_invalidated=True
            )
        return "ok"

    assert retry_on_disconnect(flaky, gave_up=DatabaseUnavailable, sleep=sleep) == "ok"

    # anything but a lost connection is raised at once
    def bad_sql() -> None:
        raise ProgrammingError("SELECT nope", {}, Exception("syntax error"))

    with pytest.raises(ProgrammingError):
        retry_on_disconnect(bad_sql, gave_up=DatabaseUnavailable, sleep=sleep)
