"""The composition root: one edition per subscriber and date, end to end.

For each due subscriber: claim the ledger row ``(subscriber, edition_date)`` → rank → render →
build → (sender pool) check the subscriber is still active → hand to the relay → record.
Subscribers are streamed in batches and messages wait in a bounded queue, so memory does not
grow with their number.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import ClassVar
from zoneinfo import ZoneInfo

from newsletter.bounces.verp import Verp
from newsletter.config import Config
from newsletter.deliver import (
    Envelope,
    MailerFactory,
    SmtpMailer,
    build_message,
    make_message_id,
)
from newsletter.feedback import FeedbackLinks
from newsletter.models import Digest, EditionStatus, Paper, Subscriber, SubscriberStatus, Vote
from newsletter.rank import Ranker
from newsletter.render import DigestLinks, RenderedDigest, Renderer
from newsletter.sending import Job, Outcome, SendPool, owner_gone, run_owner
from newsletter.signing import DkimSigner, maybe_sign
from newsletter.store import Store
from newsletter.store.db import EditionClaim
from newsletter.tokens import Purpose, Tokens

log = logging.getLogger(__name__)


def edition_date_for(subscriber: Subscriber, now: datetime) -> date:
    """The edition date is the subscriber's local calendar date."""
    return now.astimezone(ZoneInfo(subscriber.timezone)).date()


VOTES_SINCE = timedelta(days=365)
"""Votes older than this no longer shape a reader's digest (feedback links last a year)."""


def profile_examples(
    config: Config, store: Store, papers: Sequence[Paper], now: datetime
) -> list[Paper]:
    """The papers reader profiles can use this run, besides the run's own: those readers voted
    on (within ``VOTES_SINCE``) and those topics' ``like:`` lists name; a ``like:`` paper that
    is not stored is logged, naming the topic and what to do."""
    examples = store.voted_papers(now - VOTES_SINCE)
    have = {p.key for p in papers} | {p.key for p in examples}
    wanted = {k: t.name for t in config.settings.topics for k in t.like if k not in have}
    found = store.papers_by_keys(wanted) if wanted else {}
    for key, topic in wanted.items():
        if key not in found:
            log.warning(
                "topic %s: like: %s is not a stored paper, so it shapes nothing yet; fetch it "
                "(an arxiv_api source) or remove it from the topic",
                topic,
                key,
            )
    return [*examples, *found.values()]  # the Ranker adds the run's own like: papers


CLAIM_CHUNK = 50
"""Subscribers claimed per ledger transaction."""
MAX_ERRORS = 100
"""Error lines kept in a report (the ledger keeps every one)."""


@dataclass
class SendReport:
    dates: set[date] = field(default_factory=set)
    considered: int = 0
    total: int | None = None
    """Active subscribers this run may consider (for 'remaining'); None when unknown."""
    sent: int = 0
    already: int = 0
    """Subscribers whose edition for the date was already sent, skipped or in progress elsewhere."""
    empty: int = 0
    failed: int = 0
    suppressed: int = 0
    """Addresses suppressed in this run (their failure is counted in ``failed`` too)."""
    unknown: int = 0
    """Editions left ``unknown``: the line dropped after the final dot (and not re-sent)."""
    resent: int = 0
    """``unknown`` editions re-sent once with the same Message-ID."""
    resend_refused: int = 0
    """Re-sends refused for editions whose first attempt may have arrived (counted delivered)."""
    retried: int = 0
    """Retries after temporary failures (4xx, drops)."""
    throttled: int = 0
    """Throttling replies that slowed the sender down."""
    unsubscribed: int = 0
    """Not sent: the subscriber left after the digest was rendered (checked at send time)."""
    released: int = 0
    """Claims given back unsent (the relay failed or the run was stopped); the next run does them."""
    resumed: int = 0
    dry_run: bool = False
    errors: list[str] = field(default_factory=list)
    more_errors: int = 0
    relay_error: str | None = None
    not_due: int = 0
    """Subscribers skipped because their edition is not due now (scheduled runs)."""
    other_topics: int = 0
    """Subscribers left out because they do not follow the run's ``topic``."""
    no_listing: int = 0
    no_listing_reason: str | None = None
    stopped: bool = False
    """The run was asked to stop (SIGTERM) and finished the messages in flight first."""
    rendered: list[tuple[str, RenderedDigest]] = field(default_factory=list)
    """(address, digest) for dry runs and for the demo's 'open this in a browser'."""
    started: float = field(default_factory=time.monotonic)
    duration: float = 0.0
    """Seconds the run took (set when it ends)."""

    @property
    def remaining(self) -> int | None:
        if self.total is None:
            return None
        return max(0, self.total - self.considered - self.not_due - self.other_topics)

    @property
    def in_flight(self) -> int:
        """Editions handed to the senders whose outcome is not known yet (queued or being sent)."""
        if self.dry_run:
            return 0
        settled = (
            self.sent
            + self.resend_refused
            + self.failed
            + self.unknown
            + self.unsubscribed
            + self.released
            + self.already
            + self.empty
            + self.no_listing
        )
        return max(0, self.considered - settled)

    @property
    def rate(self) -> float:
        """Messages sent per second so far."""
        elapsed = (self.duration or (time.monotonic() - self.started)) or 1e-9
        return self.sent / elapsed

    def error(self, line: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(line)
        else:
            self.more_errors += 1

    COUNTS: ClassVar[tuple[str, ...]] = (
        "considered",
        "sent",
        "already",
        "empty",
        "failed",
        "suppressed",
        "unknown",
        "resent",
        "resend_refused",
        "retried",
        "throttled",
        "unsubscribed",
        "released",
        "resumed",
        "not_due",
        "no_listing",
    )
    """Every count of :meth:`as_dict` (the rest are flags and the duration)."""
    """The counts in :meth:`as_dict` that add up across the parts of a run (worker chunks)."""

    def add_counts(self, counts: Mapping[str, object]) -> None:
        """Add the :data:`COUNTS` of another part's :meth:`as_dict` (a worker chunk's) to these."""
        for key in self.COUNTS:
            value = counts.get(key, 0)
            setattr(self, key, getattr(self, key) + (value if isinstance(value, int) else 0))

    def as_dict(self) -> dict[str, object]:
        """The report as JSON: what the run record, the log line and a worker chunk carry."""
        return {
            "considered": self.considered,
            "sent": self.sent,
            "already": self.already,
            "empty": self.empty,
            "failed": self.failed,
            "suppressed": self.suppressed,
            "unknown": self.unknown,
            "resent": self.resent,
            "resend_refused": self.resend_refused,
            "retried": self.retried,
            "throttled": self.throttled,
            "unsubscribed": self.unsubscribed,
            "released": self.released,
            "resumed": self.resumed,
            "not_due": self.not_due,
            "no_listing": self.no_listing,
            "stopped": self.stopped,
            "dry_run": self.dry_run,
            "duration": round(self.duration, 3),
        }


ProgressFn = Callable[[SendReport], None]


class EditionBuilder:
    """Everything needed to turn a subscriber into a digest and a message, built once per run."""

    def __init__(self, config: Config, store: Store, now: datetime) -> None:
        self.config = config
        self.settings = config.settings
        self.store = store
        self.now = now
        since = now - timedelta(days=self.settings.digest.lookback_days)
        self.papers = store.recent_papers(since)
        self.ranker = Ranker(
            self.settings.topics,
            self.papers,
            now,
            examples=profile_examples(config, store, self.papers, now),
        )
        self.renderer = Renderer(self.settings, config.templates_dir())
        self.tokens = Tokens(config.secret_key())
        self.feedback = FeedbackLinks(self.tokens, self.settings.sender.base_url)
        self.signer = DkimSigner.from_config(config)
        self.verp = Verp.from_settings(
            self.settings.bounces, self.tokens.secret, self.settings.sender.from_address
        )

    def digest(
        self,
        subscriber: Subscriber,
        edition_date: date,
        sent_ids: set[int],
        *,
        only_topic: str | None = None,
        votes: Sequence[Vote] = (),
    ) -> Digest:
        """The subscriber's digest: their topics' sections, reordered by their ``votes``."""
        d = self.settings.digest
        topics = (only_topic,) if only_topic else subscriber.topics
        sections = self.ranker.sections(
            topics,
            exclude_ids=sent_ids,
            max_items=d.max_items,
            group_by_topic=d.group_by_topic,
            votes=votes,
        )
        titles = tuple(self.settings.topic(t).label for t in topics if t in self.ranker.topics)
        return Digest(subscriber, edition_date, sections, titles)

    def links(self, subscriber: Subscriber, edition_date: date) -> DigestLinks:
        base = self.settings.sender.base_url
        unsub = self.tokens.make(Purpose.UNSUBSCRIBE, {"s": subscriber.id, "e": subscriber.email})
        manage = self.tokens.make(Purpose.MANAGE, {"s": subscriber.id, "e": subscriber.email})
        view = self.tokens.make(
            Purpose.VIEW,
            {"s": subscriber.id, "e": subscriber.email, "d": edition_date.isoformat()},
        )
        return DigestLinks(
            unsubscribe=f"{base}/unsubscribe/{unsub}",
            manage=f"{base}/manage/{manage}",
            view=f"{base}/archive/view/{view}",
            feedback=self.feedback.for_subscriber(subscriber),
        )

    def render(self, digest: Digest) -> tuple[RenderedDigest, DigestLinks]:
        links = self.links(digest.subscriber, digest.edition_date)
        return self.renderer.render(digest, links), links

    def envelope(
        self, digest: Digest, rendered: RenderedDigest, links: DigestLinks, message_id: str
    ) -> Envelope:
        to = self.settings.smtp.dev_recipient or digest.subscriber.email
        envelope = build_message(
            rendered,
            settings=self.settings,
            to_address=to,
            to_name=digest.subscriber.name,
            message_id=message_id,
            links=links,
            now=self.now,
        )
        if self.verp is not None:  # bounces come back to a signed address (newsletter.bounces)
            envelope = replace(
                envelope, sender=self.verp.sender(digest.subscriber.id, digest.edition_date)
            )
        return maybe_sign(self.signer, envelope)


def _batches(
    store: Store, to: str | None, subscriber_ids: Sequence[int] | None
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


def run_send(
    config: Config,
    store: Store,
    now: datetime,
    *,
    mailer_factory: MailerFactory | None = None,
    to: str | None = None,
    topic: str | None = None,
    due: Callable[[Subscriber], bool] | None = None,
    force: bool = False,
    dry_run: bool = False,
    keep_rendered: int = 0,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
    subscriber_ids: Sequence[int] | None = None,
    claim_clock: Callable[[], datetime] | None = None,
    builder: EditionBuilder | None = None,
) -> SendReport:
    """Send today's edition to every active subscriber who has not had it yet.

    ``to`` limits the run to one address, ``subscriber_ids`` to those subscribers (a worker's
    chunk), ``topic`` to the followers of one topic (their digest then holds only that topic),
    ``due`` to the subscribers whose edition is due (the scheduler's filter). ``force`` re-sends
    today's edition to ``to``, marked as forced. ``stop`` is checked between messages: a SIGTERM
    finishes the messages in flight, gives the queued ones back to the ledger, then stops.

    This thread claims, ranks, renders and builds; a :class:`~newsletter.sending.SendPool` of
    ``smtp.pool_size`` connections sends and records each outcome. ``progress`` is called on
    this thread with the report as it fills.

    ``claim_clock`` stamps the claims (default: ``now`` plus the time this run has taken);
    workers pass the wall clock, since every chunk of an edition shares one ``now``.
    ``builder`` reuses the papers, ranker and templates loaded for an earlier run with the same
    ``now`` (a worker's next chunk of the same edition).
    """
    from newsletter.schedule import listing_gap

    if force and to is None:
        raise ValueError("force re-sends one subscriber's edition: give the address")
    builder = builder or EditionBuilder(config, store, now)
    report = SendReport(dry_run=dry_run)
    if to is None and subscriber_ids is None:
        report.total = store.count_subscribers(SubscriberStatus.ACTIVE)
    elif subscriber_ids is not None:
        report.total = len(set(subscriber_ids))
    owner = run_owner()
    domain = config.settings.sender.message_domain
    factory = mailer_factory or (lambda: SmtpMailer(config.settings.smtp))
    skip_quiet = config.settings.schedule.no_listing == "skip"
    lease = timedelta(seconds=config.settings.delivery.claim_lease)
    resend_unknown = config.settings.delivery.on_unknown == "resend"
    t0 = time.monotonic()

    def clock() -> datetime:
        if claim_clock is not None:
            return claim_clock()
        return now + timedelta(seconds=time.monotonic() - t0)

    pool: SendPool | None = None
    try:
        for batch in _batches(store, to, subscriber_ids):
            if topic is not None:
                following = [s for s in batch if topic in s.topics]
                report.other_topics += len(batch) - len(following)
                batch = following
            if due is not None:
                wanted = [s for s in batch if due(s)]
                report.not_due += len(batch) - len(wanted)
                batch = wanted
            if not batch:
                continue
            sent_ids = store.sent_paper_ids([s.id for s in batch])
            votes = store.votes_for([s.id for s in batch])
            last = store.last_sent([s.id for s in batch]) if skip_quiet and not force else {}
            claims: dict[int, EditionClaim | None] = {}
            for sub in batch:
                if (stop is not None and stop.is_set()) or (
                    pool is not None and pool.abort.is_set()
                ):
                    report.stopped = pool is None or pool.relay_error is None
                    for left in claims.values():  # claimed here, never queued: give them back
                        if left is not None:
                            store.release_edition(left.id, error="the run stopped before sending")
                    return report
                report.considered += 1
                edition_date = edition_date_for(sub, now)
                report.dates.add(edition_date)
                if dry_run:
                    digest = builder.digest(
                        sub,
                        edition_date,
                        sent_ids[sub.id],
                        only_topic=topic,
                        votes=votes.get(sub.id, ()),
                    )
                    if digest.is_empty and config.settings.digest.empty == "skip":
                        report.empty += 1
                    else:
                        rendered, _ = builder.render(digest)
                        report.rendered.append((sub.email, rendered))
                    continue
                if force:
                    claim, earlier = store.force_edition(
                        sub.id, edition_date, make_message_id(domain), clock(), owner=owner
                    )
                    exclude = sent_ids[sub.id] - set(earlier)
                else:
                    if sub.id not in claims:
                        # Claim the next few subscribers in one transaction (one writer lock
                        # instead of one per subscriber); still claimed before anything is sent.
                        at = batch.index(sub)
                        chunk = batch[at : at + CLAIM_CHUNK]
                        got = store.claim_editions(
                            [
                                (c.id, edition_date_for(c, now), make_message_id(domain))
                                for c in chunk
                            ],
                            clock(),
                            owner=owner,
                            lease=lease,
                            owner_gone=owner_gone,
                            resend_unknown=resend_unknown,
                        )
                        claims = dict(zip([c.id for c in chunk], got, strict=True))
                    maybe = claims.pop(sub.id)
                    if maybe is None:
                        report.already += 1
                        continue
                    claim, exclude = maybe, sent_ids[sub.id]
                report.resumed += int(claim.resumed)
                gap = listing_gap(now, last[sub.id]) if sub.id in last else None
                if gap is not None:
                    store.mark_edition(claim.id, EditionStatus.SKIPPED, clock(), error=gap)
                    report.no_listing += 1
                    report.no_listing_reason = gap
                    continue
                digest = builder.digest(
                    sub, edition_date, exclude, only_topic=topic, votes=votes.get(sub.id, ())
                )
                if digest.is_empty and config.settings.digest.empty == "skip":
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
                        mailer_factory=factory,
                        record=lambda o, j, e: _tally(report, o, j, e, keep_rendered),
                        stop=stop,
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
        report.duration = time.monotonic() - t0
        if progress is not None and not dry_run:
            progress(report)
    return report
