"""A real send over the in-memory store: :func:`newsletter.edition.send` with a
:class:`~newsletter.store.memory.MemoryStore`, its messages through a real aiosmtpd server on
loopback.

The send path depends on the ``SendStore`` protocol only (``Services[SendStore]``), so nothing
in it may reach for a database: the configured SQLite file must never be created.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from newsletter.config import Config
from newsletter.edition import SendRequest, Services, send
from newsletter.models import EditionStatus, PaperData, SubscriberStatus
from newsletter.sources.ingest import decide
from newsletter.store.memory import MemoryStore
from tests.conftest import NOW, SmtpServer, base_config

READERS = {
    "ada@example.org": ("gpu-kernels",),
    "bob@example.org": ("rendering",),
    "cy@example.org": ("gpu-kernels", "rendering"),
}
GONE = "dee@example.org"


def _store() -> MemoryStore:
    store = MemoryStore()
    papers = [
        PaperData(key="2611.00001", title="Faster CUDA kernels for GEMM", abstract="CUDA GEMM."),
        PaperData(key="2611.00002", title="NeRF rendering in real time", abstract="Rendering."),
        PaperData(key="2611.00003", title="Matrix multiplication on CUDA", abstract="GEMM."),
    ]
    store.write_papers("cs-dc", decide(papers, {}, source="cs-dc"), NOW - timedelta(hours=3))
    for email, topics in READERS.items():
        store.add_subscriber(email, topics=topics, now=NOW - timedelta(days=2))
    store.add_subscriber(GONE, topics=("rendering",), now=NOW - timedelta(days=2))
    store.set_status(GONE, SubscriberStatus.UNSUBSCRIBED, NOW - timedelta(days=1))
    return store


def test_a_send_over_the_memory_store_delivers_each_digest_once(
    tmp_path: Path, smtp_server: SmtpServer, make_config: Callable[..., Config]
) -> None:
    database = tmp_path / "never-opened.db"
    config = make_config(
        base_config(f"sqlite:///{database}", smtp_server, schedule={"no_listing": "send"})
    )
    store = _store()
    services = Services(config, store, clock=lambda: NOW)

    outcome = send(services, SendRequest(), now=NOW)

    report = outcome.report
    assert report is not None and report.sent == len(READERS) and not report.errors
    assert sorted(rcpt for r in smtp_server.received for rcpt in r.rcpt_tos) == sorted(READERS)
    day = NOW.date()
    for email in READERS:
        [message] = smtp_server.messages_to(email)
        sub = store.get_subscriber(email)
        assert sub is not None
        assert store.edition_statuses([sub.id], [day]) == {(sub.id, day): EditionStatus.SENT}
        assert store.sent_paper_ids([sub.id])[sub.id]  # the ledger kept what it carried
        assert message["Message-ID"]
    assert smtp_server.messages_to(GONE) == []
    [run] = store.last_runs(1)
    assert run.kind == "send" and run.status == "ok" and run.counts["sent"] == len(READERS)

    again = send(services, SendRequest(), now=NOW + timedelta(minutes=5)).report
    assert again is not None and again.sent == 0 and again.already == len(READERS)
    assert len(smtp_server.received) == len(READERS)  # each digest went out once
    assert not database.exists()  # no database was ever opened


def test_a_send_runs_as_a_batch_job_and_puts_the_process_back(
    tmp_path: Path, smtp_server: SmtpServer, make_config: Callable[..., Config]
) -> None:
    """While the loop runs, the objects alive when it started are frozen (the collector's full
    passes skip them) and, on Linux, its thread is under ``SCHED_BATCH``; afterwards both are
    as they were, so a long-lived process collects them and schedules as before."""
    import gc
    import os

    config = make_config(
        base_config(f"sqlite:///{tmp_path / 'x.db'}", smtp_server, schedule={"no_listing": "send"})
    )
    services = Services(config, _store(), clock=lambda: NOW)
    linux = hasattr(os, "SCHED_BATCH")
    seen: list[tuple[int, int | None]] = []
    before = (gc.get_freeze_count(), os.sched_getscheduler(0) if linux else None)

    def progress(_: object) -> None:
        seen.append((gc.get_freeze_count(), os.sched_getscheduler(0) if linux else None))

    report = send(services, SendRequest(), now=NOW, progress=progress).report

    assert report is not None and report.sent == len(READERS)
    assert seen and all(frozen > before[0] for frozen, _ in seen), "nothing was frozen"
    if linux and before[1] == os.SCHED_OTHER:
        assert {policy for _, policy in seen} == {os.SCHED_BATCH}
    assert (gc.get_freeze_count(), os.sched_getscheduler(0) if linux else None) == before
