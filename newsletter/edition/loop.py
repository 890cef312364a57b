"""The run loop: one edition per subscriber and date, end to end.

For each chosen subscriber (:mod:`.plan`): claim the ledger row ``(subscriber, edition_date)``
→ decide (:func:`.plan.after_claim`) → rank, render, build (:mod:`.build`) → the sender pool
(:mod:`newsletter.deliver.pool`) checks the subscriber is still active, hands the message to
the relay and records the outcome. Subscribers are streamed in batches and messages wait in a
bounded queue, so memory does not grow with their number.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta

from newsletter.deliver import make_message_id
from newsletter.deliver.ledger import owner_gone, run_owner
from newsletter.deliver.pool import Job, Outcome, SendPool
from newsletter.edition.build import EditionBuilder
from newsletter.edition.plan import (
    AlreadySent,
    Skip,
    after_claim,
    choose,
    is_in_flight,
    is_settled,
)
from newsletter.edition.report import ProgressFn, SendReport
from newsletter.edition.request import SendRequest
from newsletter.models import EditionClaim, EditionStatus, Subscriber, SubscriberStatus
from newsletter.services import Services
from newsletter.store.protocol import SendStore

log = logging.getLogger(__name__)

CLAIM_CHUNK = 50
"""Subscribers claimed per ledger transaction."""


def _batches(
    store: SendStore, to: str | None, subscriber_ids: Sequence[int] | None
) -> Iterator[list[Subscriber]]:
    if subscriber_ids is None:
        yield from store.iter_subscribers(SubscriberStatus.ACTIVE, email=to, batch=500)
        return
    ids = sorted(set(subscriber_ids))
    for start in range(0, len(ids), 500):
        yield from store.iter_subscribers(
            SubscriberStatus.ACTIVE, email=to, batch=500, ids=ids[start : start + 500]
        )


def _tally(report: SendReport, outcome: Outcome, job: Job, error: str | None, keep: int) -> None:
    """Count one sender outcome in the report (called under the pool's lock)."""
    if outcome == "sent":
        report.sent += 1
        if job.rendered is not None and len(report.rendered) < keep:
            report.rendered.append((job.subscriber.email, job.rendered))
    elif outcome in ("failed", "suppressed"):
        report.failed += 1
        report.suppressed += outcome == "suppressed"
        report.error(error or job.subscriber.email)
        log.warning("edition for %s failed: %s", job.subscriber.email, error)
    elif outcome == "unknown":
        report.unknown += 1
        report.error(error or job.subscriber.email)
    elif outcome == "resent":
        report.resent += 1
    elif outcome == "resend_refused":
        report.resend_refused += 1
        report.error(error or job.subscriber.email)
    elif outcome == "retried":
        report.retried += 1
    elif outcome == "throttled":
        report.throttled += 1
    elif outcome == "unsubscribed":
        report.unsubscribed += 1
    elif outcome == "lost":
        report.already += 1
    elif outcome == "released":
        report.released += 1


def send_editions(
    services: Services,
    now: datetime,
    request: SendRequest,
    *,
    builder: EditionBuilder | None = None,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    claim_clock: Callable[[], datetime] | None = None,
) -> SendReport:
    """Send the edition of ``now`` to every subscriber ``request`` names who has not had it.

    Records no run (:func:`newsletter.edition.send` does); ``request`` is taken as validated.
    This thread claims, ranks, renders and builds; a :class:`~newsletter.deliver.pool.SendPool`
    of ``smtp.pool_size`` connections sends and records each outcome. ``progress`` is called on
    this thread with the report as it fills. ``stop`` is checked between messages: a SIGTERM
    finishes the messages in flight, gives the queued ones back to the ledger, then stops.

    ``claim_clock`` stamps the claims (default: ``now`` plus the time this run has taken);
    workers pass the wall clock, since every chunk of an edition shares one ``now``.
    ``builder`` reuses the papers, ranker and templates loaded for an earlier run with the same
    ``now`` (a worker's next chunk of the same edition).
    """
    config, store = services.config, services.store
    to, topic, force, dry_run = request.to, request.topic, request.force, request.dry_run
    keep_rendered = request.keep_rendered
    if force and to is None:
        raise ValueError("force re-sends one subscriber's edition: give the address")
    builder = builder or EditionBuilder(services, now)
    report = SendReport(dry_run=dry_run)
    if to is None and request.subscriber_ids is None:
        report.total = store.count_subscribers(SubscriberStatus.ACTIVE)
    elif request.subscriber_ids is not None:
        report.total = len(set(request.subscriber_ids))
    owner = run_owner()
    domain = config.settings.sender.message_domain
    skip_quiet = config.settings.schedule.no_listing == "skip"
    lease = timedelta(seconds=config.settings.delivery.claim_lease)
    resend_unknown = config.settings.delivery.on_unknown == "resend"
    empty_skips = config.settings.digest.empty == "skip"
    t0 = services.monotonic()

    def clock() -> datetime:
        if claim_clock is not None:
            return claim_clock()
        return now + timedelta(seconds=services.monotonic() - t0)

    pool: SendPool | None = None

    def stopping() -> bool:
        return (stop is not None and stop.is_set()) or (pool is not None and pool.abort.is_set())

    try:
        for batch in _batches(store, to, request.subscriber_ids):
            choice = choose(batch, now, topic=topic, due=request.due)
            report.other_topics += choice.other_topics
            report.not_due += choice.not_due
            if not choice.wanted:
                continue
            ids = [sub.id for sub, _ in choice.wanted]
            sent_ids = store.sent_paper_ids(ids, since=builder.history_since)
            votes = store.votes_for(ids)
            last = store.last_sent(ids) if skip_quiet and not force else {}
            # A dry run claims nothing: it reads the ledger to say what a real run would skip.
            ledger = (
                store.edition_statuses(ids, {d for _, d in choice.wanted})
                if dry_run and not force
                else {}
            )
            claims: dict[int, EditionClaim | None] = {}
            for at, (sub, edition_date) in enumerate(choice.wanted):
                if stopping():
                    report.stopped = pool is None or pool.relay_error is None
                    for left in claims.values():  # claimed here, never queued: give them back
                        if left is not None:
                            store.release_edition(left.id, error="the run stopped before sending")
                    return report
                report.considered += 1
                report.dates.add(edition_date)
                if dry_run:
                    status = ledger.get((sub.id, edition_date))
                    if is_settled(status) or is_in_flight(status):
                        report.already += 1  # the claim a real run makes would be refused
                        continue
                    digest = builder.digest(
                        sub,
                        edition_date,
                        sent_ids[sub.id],
                        only_topic=topic,
                        votes=votes.get(sub.id, ()),
                    )
                    if digest.is_empty and empty_skips:
                        report.empty += 1
                    else:
                        rendered, _ = builder.render(digest)
                        report.rendered.append((sub.email, rendered))
                    continue
                if force:
                    claim, earlier = store.force_edition(
                        sub.id, edition_date, make_message_id(domain), clock(), owner=owner
                    )
                    maybe: EditionClaim | None = claim
                    exclude = sent_ids[sub.id] - set(earlier)
                else:
                    if sub.id not in claims:
                        # Claim the next few subscribers in one transaction (one writer lock
                        # instead of one per subscriber); still claimed before anything is sent.
                        chunk = choice.wanted[at : at + CLAIM_CHUNK]
                        got = store.claim_editions(
                            [(c.id, d, make_message_id(domain)) for c, d in chunk],
                            clock(),
                            owner=owner,
                            lease=lease,
                            owner_gone=owner_gone,
                            resend_unknown=resend_unknown,
                        )
                        claims = dict(zip([c.id for c, _ in chunk], got, strict=True))
                    maybe, exclude = claims.pop(sub.id), sent_ids[sub.id]
                decision = after_claim(maybe, now, last.get(sub.id))
                if isinstance(decision, AlreadySent):
                    report.already += 1
                    continue
                claim = decision.claim
                report.resumed += int(claim.resumed)
                if isinstance(decision, Skip):
                    store.mark_edition(
                        claim.id, EditionStatus.SKIPPED, clock(), error=decision.reason
                    )
                    report.no_listing += 1
                    report.no_listing_reason = decision.reason
                    continue
                digest = builder.digest(
                    sub, edition_date, exclude, only_topic=topic, votes=votes.get(sub.id, ())
                )
                if digest.is_empty and empty_skips:
                    store.mark_edition(
                        claim.id,
                        EditionStatus.SKIPPED,
                        clock(),
                        error="nothing new in the subscriber's topics",
                    )
                    report.empty += 1
                    continue
                rendered, links = builder.render(digest)
                envelope = builder.envelope(digest, rendered, links, claim.message_id)
                job = Job(
                    claim,
                    sub,
                    envelope,
                    tuple(i.paper.id for i in digest.items),
                    rendered if keep_rendered else None,
                )
                if pool is None:
                    pool = SendPool(
                        config,
                        store,
                        owner=owner,
                        clock=clock,
                        mailer_factory=services.mailer_factory,
                        record=lambda o, j, e: _tally(report, o, j, e, keep_rendered),
                        stop=stop,
                        rng=services.rng,
                    )
                pool.submit(job)
                if progress is not None:
                    progress(report)
    finally:
        if pool is not None:
            try:
                pool.close()
            finally:
                report.relay_error = pool.relay_error
                if stop is not None and stop.is_set():
                    report.stopped = True
        report.duration = services.monotonic() - t0
        if progress is not None and not dry_run:
            progress(report)
    return report
