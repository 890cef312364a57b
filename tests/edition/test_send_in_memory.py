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
from newsletter.ingest import decide
from newsletter.models import EditionStatus, PaperData, SubscriberStatus
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


def test_a_send_leaves_what_it_started_with_out_of_the_collector_and_gives_it_back(
    tmp_path: Path, smtp_server: SmtpServer, make_config: Callable[..., Config]
) -> None:
    """The objects alive when the loop starts are frozen while it runs (the collector's full
    passes skip them) and unfrozen once it ends, so a long-lived process can collect them."""
    import gc

    config = make_config(
        base_config(f"sqlite:///{tmp_path / 'x.db'}", smtp_server, schedule={"no_listing": "send"})
    )
    services = Services(config, _store(), clock=lambda: NOW)
    frozen: list[int] = []
    before = gc.get_freeze_count()

    report = send(
        services, SendRequest(), now=NOW, progress=lambda r: frozen.append(gc.get_freeze_count())
    ).report

    assert report is not None and report.sent == len(READERS)
    assert frozen and min(frozen) > before, "the loop ran with nothing frozen"
    assert gc.get_freeze_count() == before, "the send left its objects frozen"
