"""Editions: who gets one now, what it holds, and the recorded run that sends them.

The one entry point is :func:`send`: ``newsletter send``, ``POST /admin/send``, the
scheduler's tick and the demo build a :class:`SendRequest` and call it; it sends in this
process or queues the edition for the workers, and records the run either way.

- :mod:`.request`: :class:`SendRequest`, validated once for every front end;
- :mod:`.policy`: :class:`SendPolicy`, the request and the settings a run follows, fixed once;
- :mod:`.plan`: the pure planner (who is left out, what each ledger answer leads to: intents);
- :mod:`.build`: rank → render → message (:class:`EditionBuilder`);
- :mod:`.loop`: the applier (claim, build, hand to :mod:`newsletter.deliver.pool`, record);
- :mod:`.run`: the run record, its log line and alerts (:class:`SendRun`);
- :mod:`.report`: :class:`SendReport`, one serialization for both modes;
- :mod:`.workers`: the Celery chunks and their enqueuer.

May import: core, config, store, semantic, rank, digest, deliver, services, subscribe, bounces,
runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from newsletter.edition.build import EditionBuilder
from newsletter.edition.loop import send_editions
from newsletter.edition.policy import SendPolicy
from newsletter.edition.report import ProgressFn, SendReport
from newsletter.edition.request import BadSendRequest, SendRequest
from newsletter.edition.send_run import SendRun
from newsletter.runs.due_dates import edition_date_for
from newsletter.services import Services
from newsletter.store.protocol import SendStore

if TYPE_CHECKING:
    from newsletter.edition.workers import Enqueued, Progress


@dataclass
class SendOutcome:
    """What :func:`send` did: the report (``None`` when the workers were not waited for) and,
    with workers, what was queued."""

    report: SendReport | None
    enqueued: Enqueued | None = None


def send(
    services: Services[SendStore],
    request: SendRequest,
    *,
    now: datetime | None = None,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    chunk_progress: Callable[[Progress], None] | None = None,
    on_enqueued: Callable[[Enqueued], None] | None = None,
) -> SendOutcome:
    """Send (or dry-run) the editions ``request`` asks for, at ``now`` (default: the clock).

    A whole-list send with ``workers:`` configured is queued in chunks for the workers
    (``chunk_progress`` and ``on_enqueued`` follow it); anything else runs in this process
    (``progress`` follows it). Every run but a dry run is recorded in ``runs``, logged, and
    alerted on when the relay could not be used. ``request`` is validated here
    (:class:`BadSendRequest` says what is wrong)."""
    request = request.validated(services.config, services.store)
    now = now or services.clock()
    if request.by_workers(services.config):
        from newsletter.edition.workers import send_with_workers

        enqueued, report = send_with_workers(
            services,
            now,
            request,
            stop=stop,
            progress=chunk_progress,
            on_enqueued=on_enqueued,
        )
        return SendOutcome(report, enqueued)
    if request.dry_run:
        policy = SendPolicy.of(request, services.config)
        return SendOutcome(send_editions(services, now, policy, progress=progress, stop=stop))
    with SendRun(services, now, request.kind) as run:
        # the claims carry the recorded run's own name: one owner for the run and its editions
        policy = SendPolicy.of(request, services.config, owner=run.owner)
        return SendOutcome(
            run.finish(send_editions(services, now, policy, progress=progress, stop=stop))
        )


__all__ = [
    "BadSendRequest",
    "EditionBuilder",
    "SendOutcome",
    "SendPolicy",
    "SendReport",
    "SendRequest",
    "Services",
    "edition_date_for",
    "send",
    "send_editions",
]
