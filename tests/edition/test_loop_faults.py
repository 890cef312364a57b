"""The ledger under relay faults, each injected by a real aiosmtpd server on loopback.

Every test runs the real pipeline (``run_send``: claim, rank, render, build, the sender pool
and its connections) against SQLite and PostgreSQL, and checks both what the relay received
and what the ledger says.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import Config, load_config
from newsletter.edition import SendReport, edition_date_for
from newsletter.models import EditionStatus, SubscriberStatus
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, base_config, write_config
from tests.sends import run_send, send_step
from tests.smtpfaults import Fault, FaultServer, Plan, fault_server

# Slow: a fault suite, the whole send pipeline against an injecting relay, twice per database.
pytestmark = pytest.mark.slow

ADA, BOB, CY, DEE = (f"{n}@example.org" for n in ("ada", "bob", "cy", "dee"))
PEOPLE = (ADA, BOB, CY, DEE)


@pytest.fixture(params=[False, True], ids=["lockstep", "pipelining"])
def world(
    tmp_path: Path, db_url: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., tuple[Config, Store, FaultServer]]]:
    """``world(plan, **config overrides)``: a fault server, a config, a migrated store with
    four subscribers and fetched papers. Every test runs against a relay that answers each
    command in turn and against one that offers PIPELINING (MAIL, RCPT, DATA in one write)."""
    stack: list[Any] = []

    def make(
        plan: Plan | None = None, *, refuse_login: bool = False, **overrides: Any
    ) -> tuple[Config, Store, FaultServer]:
        cm = fault_server(plan, refuse_login=refuse_login, pipelining=request.param)
        server = cm.__enter__()
        stack.append(cm)
        smtp = {"pool_size": 2, "timeout": 5, **overrides.pop("smtp", {})}
        delivery = {
            "retry_delay": 0.01,
            "retry_max_delay": 0.05,
            "attempts": 3,
            **overrides.pop("delivery", {}),
        }
        data = base_config(
            db_url,
            server,  # type: ignore[arg-type]
            schedule={"no_listing": "send"},
            digest={"empty": "send"},
            web={"secret_key": "delivery-faults-secret-0123456789ab"},
            delivery=delivery,
            **overrides,
        )
        data["smtp"].update(smtp)
        config = load_config(write_config(tmp_path, data))
        store = Store(config.database_url)
        store.upgrade()
        stack.append(store)
        for who in PEOPLE:
            store.add_subscriber(who, topics=["gpu-kernels"], now=NOW)
        run_fetch(config, store, NOW - timedelta(hours=1))
        return config, store, server

    yield make
    for item in reversed(stack):
        if isinstance(item, Store):
            item.close()
        else:
            item.__exit__(None, None, None)


def status_of(store: Store, email: str, days: int = 0) -> tuple[EditionStatus, int, str | None]:
    sub = store.get_subscriber(email)
    assert sub is not None
    rec = store.edition_for(sub.id, edition_date_for(sub, NOW + timedelta(days=days), "UTC"))
    assert rec is not None, f"no ledger row for {email}"
    return rec.status, rec.attempts, rec.last_error


def all_sent_once(server: FaultServer, report: SendReport, who: tuple[str, ...]) -> None:
    counts = server.count_by_rcpt()
    assert {w: counts[w] for w in who} == dict.fromkeys(who, 1)
    assert report.sent == len(who)


def times(stage: str, rcpt: str | None, n: int, fault: Fault) -> Plan:
    """Answer ``fault`` the first ``n`` times ``stage`` is reached for ``rcpt``."""
    left = [n]

    def plan(s: str, r: str | None) -> Fault | None:
        if s == stage and (rcpt is None or r == rcpt) and left[0] > 0:
            left[0] -= 1
            return fault
        return None

    return plan


@pytest.mark.parametrize(
    ("stage", "reply"),
    [
        ("RCPT", "451 4.3.0 mailbox busy, try later"),
        ("DATA", "452 4.3.1 insufficient system storage"),
        ("DATA", "552 5.2.2 mailbox full"),  # 552 counts as temporary (RFC 5321 4.5.3.1.10)
    ],
)
def test_temporary_answers_are_retried_on_a_fresh_connection_then_sent(
    world: Callable[..., tuple[Config, Store, FaultServer]], stage: str, reply: str
) -> None:
    config, store, server = world(times(stage, BOB, 2, Fault(reply)))
    report = run_send(config, store, NOW)
    all_sent_once(server, report, PEOPLE)
    assert report.retried == 2 and report.failed == 0
    status, attempts, _ = status_of(store, BOB)
    assert status is EditionStatus.SENT and attempts == 3
    assert status_of(store, ADA)[:2] == (EditionStatus.SENT, 1)
    # two connections for the pool, plus one fresh connection per retry
    assert server.handler.connections >= 3


def test_4xx_on_mail_is_retried(world: Callable[..., tuple[Config, Store, FaultServer]]) -> None:
    config, store, server = world(times("MAIL", None, 1, Fault("450 4.7.1 try again")))
    report = run_send(config, store, NOW)
    all_sent_once(server, report, PEOPLE)
    assert report.retried == 1


def test_persistent_4xx_ends_failed_with_the_relays_answer_and_others_are_unaffected(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    def plan(stage: str, rcpt: str | None) -> Fault | None:
        return (
            Fault("451 4.7.0 temporary local problem") if (stage, rcpt) == ("DATA", BOB) else None
        )

    config, store, server = world(plan)
    report = run_send(config, store, NOW)
    assert report.failed == 1 and report.sent == 3 and report.retried == 2
    status, attempts, error = status_of(store, BOB)
    assert status is EditionStatus.FAILED and attempts == 3
    assert error is not None and "451 4.7.0 temporary local problem" in error and "DATA" in error
    assert server.count_by_rcpt() == dict.fromkeys((ADA, CY, DEE), 1)
    sub = store.get_subscriber(BOB)
    assert sub is not None and sub.status is SubscriberStatus.ACTIVE  # 4xx never suppresses
    assert any("451 4.7.0" in e for e in report.errors)


def test_421_with_the_connection_closed_mid_batch(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(
        times("RCPT", CY, 1, Fault("421 4.3.2 shutting down", close=True)), smtp={"pool_size": 1}
    )
    report = run_send(config, store, NOW)
    all_sent_once(server, report, PEOPLE)
    assert report.retried == 1 and server.handler.connections == 2
    assert status_of(store, CY)[:2] == (EditionStatus.SENT, 2)


def test_connection_dropped_before_the_end_of_data_is_retried(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(times("DATA-CMD", DEE, 1, Fault(close=True)))
    report = run_send(config, store, NOW)
    all_sent_once(server, report, PEOPLE)
    assert report.retried == 1 and report.unknown == 0 and report.resent == 0
    assert status_of(store, DEE)[:2] == (EditionStatus.SENT, 2)


def test_a_connection_the_relay_closed_while_idle_is_reopened(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    # After each message the relay says goodbye and hangs up: the next send finds the line
    # closed before MAIL. That is not the message's fault: no retry is counted.
    def plan(stage: str, rcpt: str | None) -> Fault | None:
        return Fault("250 2.0.0 OK queued", close=True, keep=True) if stage == "DATA" else None

    config, store, server = world(plan, smtp={"pool_size": 1})
    report = run_send(config, store, NOW)
    # A hang-up right after "250" can look like RFC 1047's window to the client only if the
    # reply is lost; here it arrives, so each message is sent exactly once.
    all_sent_once(server, report, PEOPLE)
    assert report.retried == 0 and report.failed == 0 and server.handler.connections == 4


def test_drop_after_the_final_dot_is_unknown_and_resent_once_with_the_same_message_id(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(times("DATA", ADA, 1, Fault(close=True, keep=True)))
    report = run_send(config, store, NOW)
    ids = server.ids_by_rcpt()
    assert len(ids[ADA]) == 2 and len(set(ids[ADA])) == 1  # the pair folds in mail clients
    assert all(len(ids[w]) == 1 for w in (BOB, CY, DEE))
    assert report.resent == 1 and report.unknown == 0 and report.sent == 4
    assert status_of(store, ADA)[0] is EditionStatus.SENT


def test_drop_after_the_final_dot_with_hold_policy_stays_unknown(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(
        times("DATA", ADA, 1, Fault(close=True, keep=True)), delivery={"on_unknown": "hold"}
    )
    report = run_send(config, store, NOW)
    assert server.count_by_rcpt()[ADA] == 1
    assert report.unknown == 1 and report.resent == 0 and report.sent == 3
    status, _, error = status_of(store, ADA)
    assert status is EditionStatus.UNKNOWN and error is not None and "final '.'" in error
    # a later run does not send it again: the operator decides
    assert run_send(config, store, NOW + timedelta(minutes=5)).sent == 0
    assert server.count_by_rcpt()[ADA] == 1


def test_throttling_slows_down_instead_of_failing(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    n = [0]

    def plan(stage: str, rcpt: str | None) -> Fault | None:
        if stage == "MAIL":
            n[0] += 1
            if n[0] in (2, 3):
                return Fault("454 4.7.0 too many messages, slow down")
        return None

    config, store, server = world(plan, delivery={"attempts": 1})
    report = run_send(config, store, NOW)
    all_sent_once(server, report, PEOPLE)  # with attempts=1 a counted failure would be final
    assert report.throttled == 2 and report.failed == 0


def test_5xx_on_rcpt_fails_for_good_and_suppresses_after_n(
    world: Callable[..., tuple[Config, Store, FaultServer]], tmp_path: Path
) -> None:
    def plan(stage: str, rcpt: str | None) -> Fault | None:
        return Fault("550 5.1.1 user unknown") if (stage, rcpt) == ("RCPT", CY) else None

    config, store, server = world(plan, delivery={"suppress_after": 2})
    first = run_send(config, store, NOW)
    assert first.failed == 1 and first.retried == 0 and first.suppressed == 0
    status, attempts, error = status_of(store, CY)
    assert status is EditionStatus.FAILED and attempts == 1 and "550 5.1.1" in (error or "")
    second = run_send(config, store, NOW + timedelta(days=1))
    assert second.failed == 1 and second.suppressed == 1
    sub = store.get_subscriber(CY)
    assert sub is not None and sub.status is SubscriberStatus.SUPPRESSED
    third = run_send(config, store, NOW + timedelta(days=2))
    assert third.failed == 0 and third.sent == 3
    assert CY not in server.count_by_rcpt()
    path = str(tmp_path / "newsletter.yaml")
    args = ["--config", path, "subscribers", "list", "--status", "suppressed"]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["email"] == CY and row["status"] == "suppressed"
    assert row["permanent_failures"] == 2 and "550 5.1.1 user unknown" in row["last_error"]
    table = CliRunner().invoke(cli, args)
    assert CY in table.output and ADA not in table.output and "550 5.1.1" in table.output


def test_unsubscribe_after_render_before_send_is_not_mailed(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(smtp={"pool_size": 1})
    server.handler.hold = threading.Event()  # ada's message waits at the relay

    def progress(report: SendReport) -> None:
        if report.considered == 2 and not server.handler.hold.is_set():  # type: ignore[union-attr]
            # bob's digest is rendered and queued behind ada's: now bob leaves
            store.set_status(BOB, SubscriberStatus.UNSUBSCRIBED, NOW)
            server.handler.hold.set()  # type: ignore[union-attr]

    report = run_send(config, store, NOW, progress=progress)
    assert BOB not in server.count_by_rcpt()
    assert report.unsubscribed == 1 and report.sent == 3
    status, attempts, error = status_of(store, BOB)
    assert status is EditionStatus.SKIPPED and attempts == 0
    assert error == "unsubscribed before sending"


def _relay_failure_case(
    kind: str, world: Callable[..., tuple[Config, Store, FaultServer]]
) -> tuple[Config, Store, FaultServer]:
    if kind == "unreachable":
        from newsletter.operations.smtp_sink import free_port

        config, store, server = world(alerts={"email": "ops@papers.example.org"})
        data = config.settings.smtp.model_copy(update={"port": free_port()})
        settings = config.settings.model_copy(update={"smtp": data})
        return Config(settings, config.path, config.database_url), store, server
    if kind == "tls":
        return world(smtp={"security": "tls"}, alerts={"email": "ops@papers.example.org"})
    return world(
        refuse_login=True,
        smtp={"username": "digest"},
        alerts={"email": "ops@papers.example.org"},
    )


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("unreachable", "cannot reach the relay"),
        ("tls", "TLS with relay"),
        ("auth", "refused the login for 'digest': 535"),
    ],
)
def test_unusable_relay_stops_the_run_with_one_error_and_one_alert(
    world: Callable[..., tuple[Config, Store, FaultServer]],
    caplog: pytest.LogCaptureFixture,
    kind: str,
    message: str,
) -> None:
    config, store, server = _relay_failure_case(kind, world)
    with caplog.at_level(logging.ERROR, logger="newsletter.alerts"):
        report = send_step(config, store, NOW)
    assert report.relay_error is not None and message in report.relay_error
    assert report.sent == 0 and server.received == []
    alerts = [r for r in caplog.records if r.name == "newsletter.alerts"]
    assert len(alerts) == 1
    # one connection attempt for the whole run, not one per pooled connection or per subscriber
    assert server.handler.connections <= 1
    editions = store.editions_on(edition_date_for(store.get_subscriber(ADA), NOW, "UTC"))  # type: ignore[arg-type]
    assert all(e.status is not EditionStatus.SENT for e in editions)
    [run] = store.last_runs(1)
    assert run.status == "failed" and message in (run.error or "")


def test_after_the_relay_comes_back_the_next_run_sends_everything_once(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(
        refuse_login=True, smtp={"username": "digest"}, alerts={"email": "ops@papers.example.org"}
    )
    assert run_send(config, store, NOW).relay_error is not None
    fixed = config.settings.model_copy(
        update={"smtp": config.settings.smtp.model_copy(update={"username": None})}
    )
    report = run_send(Config(fixed, config.path, config.database_url), store, NOW)
    all_sent_once(server, report, PEOPLE)


def test_dev_recipient_gets_every_message(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(smtp={"dev_recipient": "me@example.net"})
    report = run_send(config, store, NOW)
    assert report.sent == 4
    assert server.count_by_rcpt() == {"me@example.net": 4}


def test_pool_reuses_its_connections(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world(smtp={"pool_size": 2})
    report = run_send(config, store, NOW)
    all_sent_once(server, report, PEOPLE)
    assert server.handler.connections <= 2


def test_subscriber_ids_restrict_the_run(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world()
    ids = [s.id for s in (store.get_subscriber(BOB), store.get_subscriber(DEE)) if s]
    report = run_send(config, store, NOW, subscriber_ids=ids)
    assert report.sent == 2 and report.total == 2
    assert set(server.count_by_rcpt()) == {BOB, DEE}
    rest = run_send(config, store, NOW)
    assert rest.sent == 2 and rest.already == 2
    assert server.count_by_rcpt() == dict.fromkeys(PEOPLE, 1)


def test_send_command_shows_a_summary_and_status_shows_the_run(
    world: Callable[..., tuple[Config, Store, FaultServer]], tmp_path: Path
) -> None:
    def plan(stage: str, rcpt: str | None) -> Fault | None:
        return Fault("550 5.1.1 user unknown") if (stage, rcpt) == ("RCPT", CY) else None

    world(plan)
    path = str(tmp_path / "newsletter.yaml")
    result = CliRunner().invoke(cli, ["--config", path, "send", "--now"])
    assert result.exit_code == 1, result.output  # a failed edition: non-zero for cron
    flat = " ".join(result.output.split())
    assert "sent │ 3" in flat and "failed │ 1" in flat and "messages/s" in flat
    assert "550 5.1.1 user unknown" in flat and CY in flat
    status = CliRunner().invoke(cli, ["--config", path, "status", "--json"])
    [run] = json.loads(status.stdout)["runs"]
    assert run["kind"] == "send" and run["counts"]["sent"] == 3 and run["counts"]["failed"] == 1
    assert run["duration"] is not None and run["duration"] >= 0
    assert "550 5.1.1" in run["error"]
    text = CliRunner().invoke(cli, ["--config", path, "status"])
    assert "Recent runs" in text.stdout and "sent 3" in " ".join(text.stdout.split())


def test_progress_lines_say_sent_failed_remaining_and_rate() -> None:
    from io import StringIO

    from rich.console import Console

    from newsletter.cli import SendProgress

    out = StringIO()
    report = SendReport(total=10, considered=6, sent=3, failed=1)
    with SendProgress(Console(file=out, width=120), every=0) as progress:
        progress(report)
    line = out.getvalue()
    # 6 considered: 3 sent, 1 failed, 2 handed to the connections without an answer yet
    assert "sent 3, failed 1, in flight 2, remaining 4" in line and "msg/s" in line


def test_a_non_ascii_address_goes_out_with_smtputf8(
    world: Callable[..., tuple[Config, Store, FaultServer]],
) -> None:
    config, store, server = world()
    store.add_subscriber("josé@example.org", topics=["gpu-kernels"], now=NOW)
    report = run_send(config, store, NOW)
    assert report.failed == 0 and report.sent == 5
    assert server.count_by_rcpt()["josé@example.org"] == 1
