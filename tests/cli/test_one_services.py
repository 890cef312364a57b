"""One :class:`~newsletter.services.Services` per command, and its clock the only clock.

Each command builds one ``Services`` (store, relay, tokens, clock) and passes it down: the fetch
step, the send, the subscriber commands and ``status`` use it instead of building their own.
The proof runs the real commands in this process (real SQLite or PostgreSQL, a real SMTP
server on loopback) with a fixed clock handed to the command's context: every ``Services``
built is counted, and every timestamp the commands wrote to the database, and the mail's
``Date``, must be that clock's ``now``. A command reading the wall clock (today's date is
not the fixed one) or building a second ``Services`` fails the test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Date, select

from newsletter.cli import Context, cli
from newsletter.clock import utcnow
from newsletter.services import Services
from newsletter.store import Store
from newsletter.store.tables import UTCDateTime, metadata
from tests.conftest import SmtpServer, base_config, write_config

FIXED = datetime(2026, 11, 17, 6, 30, tzinfo=UTC)
"""The day after the fixture feeds' announcement; never today on a machine running this."""

LATER = timedelta(minutes=10)
"""How far past ``FIXED`` a stamp made of it plus elapsed (monotonic) time may be."""

FROM_THE_FEEDS = {("papers", "published"), ("papers", "updated")}
"""Timestamps a feed gives (when a paper was published or revised), not the clock."""


@pytest.fixture
def services_built(monkeypatch: pytest.MonkeyPatch) -> list[Services]:
    """Every :class:`Services` built from now on, in order."""
    built: list[Services] = []
    init = Services.__init__

    def counted(self: Services, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(Services, "__init__", counted)
    return built


def test_every_command_builds_one_services_and_reads_only_its_clock(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, services_built: list[Services]
) -> None:
    assert utcnow().date() != FIXED.date()  # else a wall-clock read would go unseen
    reads: list[str] = []
    command = ""

    def clock() -> datetime:
        reads.append(command)
        return FIXED

    config = write_config(
        tmp_path,
        base_config(
            db_url,
            smtp_server,
            subscribers=[{"email": "kernels@example.org", "topics": ["gpu-kernels"]}],
            schedule={"timezone": "UTC"},
        ),
    )

    def run(*args: str) -> Result:
        nonlocal command
        command = " ".join(args)
        services_built.clear()
        result = CliRunner().invoke(
            cli,
            ["--config", str(config), *args],
            obj=Context(None, clock=clock),
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        assert len(services_built) == 1, f"{command}: {len(services_built)} Services built"
        assert services_built[0].clock is clock, command
        assert command in reads, f"{command} never read its clock"
        return result

    run("db", "upgrade")
    assert "28 new papers" in " ".join(run("fetch").output.split())
    run("subscribers", "add", "render@example.org", "--topic", "rendering")
    run("send", "--now")
    assert "Editions dated 2026-11-17 (UTC): 2 sent" in run("status").output

    assert sorted(r for m in smtp_server.received for r in m.rcpt_tos) == [
        "kernels@example.org",
        "render@example.org",
    ]
    for received in smtp_server.received:
        assert parsedate_to_datetime(received.message["Date"]) == FIXED

    store = Store(db_url)
    try:
        stamps: dict[str, set[object]] = {}
        with store.engine.connect() as conn:
            for table in metadata.sorted_tables:
                for column in table.columns:
                    if (table.name, column.name) in FROM_THE_FEEDS:
                        continue
                    if isinstance(column.type, UTCDateTime | Date):
                        values = set(conn.execute(select(column).where(column.is_not(None))))
                        if values:
                            stamps[f"{table.name}.{column.name}"] = {v for (v,) in values}
    finally:
        store.close()
    # what the commands wrote: subscribers, papers and their sources, runs, editions
    for written in (
        "subscribers.created",
        "papers.first_seen",
        "paper_sources.first_seen",
        "runs.started",
        "runs.finished",
        "editions.claimed",
        "editions.finished",
        "editions.edition_date",
    ):
        assert written in stamps, written
    assert stamps.pop("editions.edition_date") == {FIXED.date()}
    for name, values in stamps.items():
        # the clock's now, or (the send's claims and marks) that now moved on by the elapsed
        # time of the Services' monotonic clock: never a reading of today's wall clock
        assert all(FIXED <= v <= FIXED + LATER for v in values), f"{name}: {values}"
    assert stamps["runs.started"] == {FIXED} and stamps["subscribers.created"] == {FIXED}
