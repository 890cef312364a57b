"""Scale-out: Celery workers render and send chunks of an edition.

The enqueuing side (``newsletter send`` and the scheduler, when ``workers:`` is configured)
streams the due subscribers, leaves out those whose edition for the date is settled, and sends
one task per chunk of subscriber ids, all with the same ``now``. A worker runs
:func:`newsletter.edition.loop.send_editions` restricted to its chunk, so every edition still goes through
the ledger claim:

- a redelivered or duplicated task finds the editions claimed or sent and sends nothing twice;
- tasks are acknowledged late and rejected when their worker dies, so the broker gives a killed
  worker's chunk to another worker (Redis: after ``workers.visibility_timeout``);
- claims carry the wall-clock time they were made, and a claim left by a dead worker is taken over
  after ``delivery.claim_lease``, keeping its Message-ID. A chunk that finds editions claimed by
  someone else retries just those subscribers once the lease has run out, so nothing is left
  behind whether the other worker finished them or died.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from newsletter.config import Config
from newsletter.edition.build import EditionBuilder
from newsletter.edition.loop import send_editions
from newsletter.edition.plan import choose, is_in_flight, is_settled
from newsletter.edition.report import SendReport
from newsletter.edition.request import SendRequest
from newsletter.edition.send_run import SendRun
from newsletter.errors import NewsletterError, NotInstalled
from newsletter.logs import step
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.runs.due_dates import edition_date_for
from newsletter.services import Services
from newsletter.store import Store
from newsletter.store.protocol import SendStore

log = logging.getLogger(__name__)

TASK_NAME = "newsletter.send_chunk"
MAX_RETRIES = 25


class BrokerError(NewsletterError):
    """The broker cannot be reached, so nothing could be queued."""

    def __init__(self, url: str, cause: Exception) -> None:
        safe = re.sub(r"://[^@/]*@", "://***@", url)
        super().__init__(
            f"cannot queue the edition: the broker at {safe} did not answer ({cause}); start it, "
            "or fix workers.broker_url / $NEWSLETTER_BROKER_URL"
        )


INSTALL = "pip install 'newsletter[workers]' (from a checkout: pip install -e '.[workers]')"
"""Celery and its Redis client are the ``workers`` extra: one process on one machine needs
neither (about 28 MB of the install)."""


def require_celery(config: Config) -> None:
    """:class:`~newsletter.errors.NotInstalled`, with the install command, when Celery is
    missing; looks without importing it (``serve`` checks at start-up, :func:`make_app` too)."""
    import importlib.util

    with contextlib.suppress(ImportError, ValueError):  # ValueError: a half-removed install
        if importlib.util.find_spec("celery") is not None:
            return
    raise NotInstalled(
        f"{config.path}: workers: sending with Celery workers needs the workers extra, which "
        f"is not installed: {INSTALL}; or remove the workers: section to send from this process"
    )


def _celery(config: Config) -> Any:
    require_celery(config)
    try:
        import celery
        import celery.utils.nodenames
    except ImportError as e:  # there, but broken
        raise NotInstalled(f"{config.path}: workers: cannot import Celery ({e}): {INSTALL}") from e
    return celery


def _settings(config: Config) -> Any:
    w = config.settings.workers
    if w is None:
        raise ValueError("this config has no workers: section")
    return w


def make_app(config: Config) -> Any:
    """The Celery app for this config, with the send task registered."""
    celery = _celery(config)
    w = _settings(config)
    app = celery.Celery("newsletter", broker=w.broker(), backend=w.backend(), set_as_current=False)
    app.conf.update(
        task_default_queue=w.queue,
        task_acks_late=True,  # acknowledged after the chunk ran, not when it was received
        task_reject_on_worker_lost=True,  # a killed worker's chunk goes back to the queue
        worker_prefetch_multiplier=1,  # a dying worker holds at most the chunks it runs
        broker_transport_options={
            "visibility_timeout": w.visibility_timeout,
            # look for the unacknowledged chunks of dead workers a few times per timeout
            "unacked_restore_interval": max(1, min(60, w.visibility_timeout // 4)),
            "unacked_restore_throttle": 1,
        },
        result_backend_transport_options={"visibility_timeout": w.visibility_timeout},
        result_expires=timedelta(days=2),
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        worker_send_task_events=False,
        task_publish_retry_policy={
            "max_retries": 3,
            "interval_start": 0.5,
            "interval_step": 1,
            "interval_max": 2,
        },
    )
    register_tasks(app, config)
    return app


def register_tasks(app: Any, config: Config) -> Any:
    """Register ``send_chunk`` on ``app``; each worker process opens its own database pool."""
    w = _settings(config)
    processes: dict[int, Services] = {}
    lock = threading.Lock()
    local = threading.local()  # this thread's EditionBuilder for the edition it works on

    def services_for_process() -> Services:
        pid = os.getpid()  # a forked pool child must not share its parent's connections
        with lock:
            if pid not in processes:
                processes[pid] = Services.open(config)
            return processes[pid]

    @app.task(name=TASK_NAME, bind=True, max_retries=MAX_RETRIES)  # type: ignore[untyped-decorator]
    def send_chunk_task(
        self: Any,
        ids: list[int],
        now: str,
        topic: str | None = None,
        carried: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        services = services_for_process()
        key = (os.getpid(), now)
        if getattr(local, "key", None) != key:  # papers, ranker, templates: once per edition
            local.key, local.builder = (
                key,
                EditionBuilder(services, datetime.fromisoformat(now)),
            )
        outcome = send_chunk(
            services,
            ids,
            datetime.fromisoformat(now),
            topic=topic,
            carried=carried,
            builder=local.builder,
        )
        if outcome.retry_ids:
            retry_in = (
                int(config.settings.delivery.claim_lease) + 1 if outcome.busy else w.retry_delay
            )
            log.info(
                "chunk: %d edition(s) to try again in %d s (%s)",
                len(outcome.retry_ids),
                retry_in,
                "claimed elsewhere" if outcome.busy else "relay failed",
            )
            raise self.retry(
                args=[outcome.retry_ids, now],
                kwargs={"topic": topic, "carried": outcome.result},
                countdown=retry_in,
            )
        return outcome.result

    return send_chunk_task


@dataclass
class ChunkOutcome:
    result: dict[str, Any]
    """Counts so far (JSON), carried into a retry."""
    retry_ids: list[int] = field(default_factory=list)
    busy: bool = False
    """The retry is for editions another run held (wait out the lease), not a relay failure."""


def send_chunk(
    services: Services,
    ids: Sequence[int],
    now: datetime,
    *,
    topic: str | None = None,
    carried: dict[str, Any] | None = None,
    builder: EditionBuilder | None = None,
) -> ChunkOutcome:
    """One task's work: the edition for these subscribers, through the ledger claim.

    Subscribers whose edition is claimed by another run (alive, or dead with its lease not yet
    run out) are returned to retry after the lease; so are those the relay refused to take."""
    _settings(services.config)  # a config without workers: is a mistake here
    store, zone = services.store, services.config.settings.schedule.timezone
    request = SendRequest(kind="chunk", topic=topic, subscriber_ids=list(ids))
    report = send_editions(services, now, request, claim_clock=services.clock, builder=builder)
    total = SendReport()  # the one serialization of a report, added up by wait_for
    total.merge(carried or SendReport.empty_chunk())
    total.merge(report.as_chunk())
    if report.relay_error:
        # the run stopped at the relay: the editions not sent yet are tried again later; the
        # error stays in the chunk's report (the run reports and alerts on it, as in-process)
        return ChunkOutcome(total.as_chunk(), retry_ids=_unsettled(store, ids, now, zone))
    busy: list[int] = []
    if report.already:
        busy = _in_flight_elsewhere(store, ids, now, zone)
        total.already -= len(busy)
        total.considered -= len(busy)
    return ChunkOutcome(total.as_chunk(), retry_ids=busy, busy=bool(busy))


def _own_dates(
    store: SendStore, ids: Sequence[int], now: datetime, zone: str
) -> list[tuple[Subscriber, date]]:
    return [
        (s, edition_date_for(s, now, zone))
        for batch in store.iter_subscribers(SubscriberStatus.ACTIVE, ids=ids)
        for s in batch
    ]


def _in_flight_elsewhere(
    store: SendStore, ids: Sequence[int], now: datetime, zone: str
) -> list[int]:
    subs = _own_dates(store, ids, now, zone)
    statuses = store.edition_statuses([s.id for s, _ in subs], {d for _, d in subs})
    return [s.id for s, d in subs if is_in_flight(statuses.get((s.id, d)))]


def _unsettled(store: SendStore, ids: Sequence[int], now: datetime, zone: str) -> list[int]:
    subs = _own_dates(store, ids, now, zone)
    statuses = store.edition_statuses([s.id for s, _ in subs], {d for _, d in subs})
    return [s.id for s, d in subs if not is_settled(statuses.get((s.id, d)))]


# ---------------------------------------------------------------------------- enqueuing


def check_broker(app: Any, url: str) -> None:
    """Fail fast, with a clear error, when the broker or the result store cannot be reached."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=5)
        client = getattr(app.backend, "client", None)
        if client is not None and hasattr(client, "ping"):
            client.ping()  # the Redis result store
    except Exception as e:  # kombu's and redis's connection errors share no base but this
        raise BrokerError(url, e) from e


@dataclass
class Enqueued:
    now: datetime
    results: list[Any] = field(default_factory=list)
    """One Celery AsyncResult per chunk."""
    subscribers: int = 0
    not_due: int = 0
    settled: int = 0
    """Due subscribers left out: their edition for the date is already sent or skipped."""
    run_id: int | None = None
    """The run recorded for this enqueuing (set by :func:`send_with_workers`)."""


def enqueue_edition(
    services: Services[SendStore], now: datetime, request: SendRequest, app: Any
) -> Enqueued:
    """Queue one task per chunk of the subscribers whose edition is to be sent now."""
    store = services.store
    w = _settings(services.config)
    check_broker(app, w.broker())
    out = Enqueued(now)
    chunk: list[int] = []
    topic = request.topic

    def flush() -> None:
        if chunk:
            try:
                result = app.send_task(
                    TASK_NAME, args=[list(chunk), now.isoformat()], kwargs={"topic": topic}
                )
            except Exception as e:  # the broker or the result store went away mid-way
                raise BrokerError(w.broker(), e) from e
            out.results.append(result)
            chunk.clear()

    for batch in store.iter_subscribers(SubscriberStatus.ACTIVE, email=request.to, batch=1000):
        choice = choose(
            batch,
            now,
            topic=topic,
            due=request.due,
            default_zone=services.config.settings.schedule.timezone,
        )
        out.not_due += choice.not_due
        statuses = store.edition_statuses(
            [s.id for s, _ in choice.wanted], {d for _, d in choice.wanted}
        )
        for s, edition_date in choice.wanted:
            if is_settled(statuses.get((s.id, edition_date))):
                out.settled += 1
                continue
            chunk.append(s.id)
            out.subscribers += 1
            if len(chunk) >= w.chunk_size:
                flush()
    flush()
    return out


PEEK = 8
"""Unfinished chunks :func:`wait_for` asks about per poll."""


@dataclass
class Progress:
    chunks: int
    done: int = 0
    sent: int = 0
    waited: float = 0.0


def wait_for(
    enqueued: Enqueued,
    *,
    progress: Callable[[Progress], None] | None = None,
    stop: threading.Event | None = None,
    poll: float = 0.5,
) -> SendReport:
    """Wait for every chunk and add up their reports (``stopped`` if ``stop`` was set first)."""
    report = SendReport(not_due=enqueued.not_due)
    report.already = enqueued.settled
    report.considered = enqueued.settled
    state = Progress(len(enqueued.results))
    pending = list(enqueued.results)
    started = time.monotonic()
    while pending:
        still = []
        unfinished = 0
        for result in pending:
            # Chunks finish roughly in the order they were queued: after a few unfinished ones
            # the rest are not asked about this time (a question to the result store each).
            if unfinished >= PEEK or not result.ready():
                unfinished += 1
                still.append(result)
                continue
            state.done += 1
            try:
                counts = result.get(propagate=True, disable_sync_subtasks=False)
            except Exception as e:  # the task failed after its retries: say which chunk
                report.errors.append(f"chunk {result.id} failed: {type(e).__name__}: {e}")
                report.failed += 1
                continue
            report.merge(counts)
            state.sent += int(counts["sent"])
        pending = still
        state.waited = time.monotonic() - started
        if progress is not None:
            progress(state)
        if pending:
            if stop is not None and stop.wait(poll):
                report.stopped = True
                break
            if stop is None:
                time.sleep(poll)
    report.duration = time.monotonic() - report.started
    return report


def send_with_workers(
    services: Services[SendStore],
    now: datetime,
    request: SendRequest,
    *,
    stop: threading.Event | None = None,
    progress: Callable[[Progress], None] | None = None,
    on_enqueued: Callable[[Enqueued], None] | None = None,
    app: Any = None,
) -> tuple[Enqueued, SendReport | None]:
    """Enqueue the edition's chunks, record the run, and (``request.wait``) add up what the
    workers did."""
    own_app = app is None
    app = app or make_app(services.config)
    try:
        with SendRun(services, now, request.kind) as run:
            try:
                enqueued = enqueue_edition(services, now, request, app)
            except Exception as e:
                run.end("failed", {}, f"could not enqueue: {e}")
                raise
            enqueued.run_id = run.id
            if on_enqueued is not None:
                on_enqueued(enqueued)
            counts: dict[str, Any] = {
                "enqueued": enqueued.subscribers,
                "chunks": len(enqueued.results),
                "already": enqueued.settled,
            }
            step(f"{request.kind} enqueued", **{k: v for k, v in counts.items() if v})
            if not request.wait:
                run.end("enqueued", counts, None)
                return enqueued, None
            report = wait_for(enqueued, progress=progress, stop=stop)
            return enqueued, run.finish(report, chunks=len(enqueued.results))
    finally:
        if own_app:
            app.close()  # the broker and result connections of this run


# ---------------------------------------------------------------------------- the worker


def node_name(name: str | None) -> str:
    """The worker's node name: ``%h`` is this host's name (one per container). Called once
    :func:`make_app` has found Celery."""
    from celery.utils.nodenames import host_format

    return str(host_format(name or f"newsletter-{os.getpid()}@%h"))


def ping_worker(config: Config, name: str, timeout: float = 5.0) -> bool:
    """Whether the worker called ``name`` answers over the broker (a container healthcheck)."""
    app = make_app(config)
    try:
        replies = app.control.ping(destination=[node_name(name)], timeout=timeout)
    finally:
        app.close()
    return any(node_name(name) in r for r in replies or [])


def run_worker(
    config: Config,
    *,
    concurrency: int | None = None,
    pool: str = "prefork",
    name: str | None = None,
    loglevel: str = "INFO",
) -> int:
    """Run a Celery worker on the configured queue until stopped; returns its exit code.

    SIGTERM is a warm shutdown: the chunk in flight is finished, the rest stays queued."""
    w = _settings(config)
    _celery(config)  # first: without Celery installed, say so before anything else
    check = Store(config.database_url)
    try:
        check.check_schema()
    finally:
        check.close()  # each pool process opens its own connections
    app = make_app(config)
    worker = app.Worker(
        queues=[w.queue],
        concurrency=concurrency or os.cpu_count() or 1,
        pool_cls=pool,
        hostname=node_name(name),
        loglevel=loglevel,
        without_gossip=True,
        without_mingle=True,
    )
    worker.start()
    return int(worker.exitcode or 0)


__all__ = [
    "TASK_NAME",
    "BrokerError",
    "ChunkOutcome",
    "Enqueued",
    "Progress",
    "enqueue_edition",
    "make_app",
    "node_name",
    "ping_worker",
    "require_celery",
    "run_worker",
    "send_chunk",
    "send_with_workers",
    "wait_for",
]
