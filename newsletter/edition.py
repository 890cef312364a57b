"""The composition root: one edition per subscriber and date, end to end.

For each due subscriber: claim the ledger row ``(subscriber, edition_date)`` → rank → render →
build → check the subscriber is still active → hand to the relay → record. Subscribers are
streamed in batches, so memory does not grow with their number.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from newsletter.config import Config
from newsletter.deliver import (
    Envelope,
    Mailer,
    MailerFactory,
    SmtpMailer,
    build_message,
    make_message_id,
)
from newsletter.errors import DeliveryError, RelayError
from newsletter.models import Digest, EditionStatus, Subscriber, SubscriberStatus
from newsletter.rank import Ranker
from newsletter.render import DigestLinks, RenderedDigest, Renderer
from newsletter.signing import DkimSigner, maybe_sign
from newsletter.store import Store
from newsletter.tokens import Purpose, Tokens

log = logging.getLogger(__name__)


def edition_date_for(subscriber: Subscriber, now: datetime) -> date:
    """The edition date is the subscriber's local calendar date."""
    return now.astimezone(ZoneInfo(subscriber.timezone)).date()


def run_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class SendReport:
    dates: set[date] = field(default_factory=set)
    considered: int = 0
    sent: int = 0
    already: int = 0
    """Subscribers whose edition for the date was already sent, skipped or in progress elsewhere."""
    empty: int = 0
    failed: int = 0
    suppressed: int = 0
    resumed: int = 0
    dry_run: bool = False
    errors: list[str] = field(default_factory=list)
    relay_error: str | None = None
    not_due: int = 0
    """Subscribers skipped because their edition is not due now (scheduled runs)."""
    no_listing: int = 0
    no_listing_reason: str | None = None
    stopped: bool = False
    """The run was asked to stop (SIGTERM) and finished the message in flight first."""
    rendered: list[tuple[str, RenderedDigest]] = field(default_factory=list)
    """(address, digest) for dry runs and for the demo's 'open this in a browser'."""

    def as_dict(self) -> dict[str, object]:
        return {
            "considered": self.considered,
            "sent": self.sent,
            "already": self.already,
            "empty": self.empty,
            "failed": self.failed,
            "suppressed": self.suppressed,
            "resumed": self.resumed,
            "not_due": self.not_due,
            "no_listing": self.no_listing,
            "stopped": self.stopped,
            "dry_run": self.dry_run,
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
        self.ranker = Ranker(self.settings.topics, self.papers, now)
        self.renderer = Renderer(self.settings, config.templates_dir())
        self.tokens = Tokens(config.secret_key())
        self.signer = DkimSigner.from_config(config)

    def digest(
        self,
        subscriber: Subscriber,
        edition_date: date,
        sent_ids: set[int],
        *,
        only_topic: str | None = None,
    ) -> Digest:
        d = self.settings.digest
        topics = (only_topic,) if only_topic else subscriber.topics
        sections = self.ranker.sections(
            topics,
            exclude_ids=sent_ids,
            max_items=d.max_items,
            group_by_topic=d.group_by_topic,
        )
        titles = tuple(self.settings.topic(t).label for t in topics if t in self.ranker.topics)
        return Digest(subscriber, edition_date, sections, titles)

    def links(self, subscriber: Subscriber, edition_date: date) -> DigestLinks:
        base = self.settings.sender.base_url
        unsub = self.tokens.make(Purpose.UNSUBSCRIBE, {"s": subscriber.id, "e": subscriber.email})
        manage = self.tokens.make(Purpose.MANAGE, {"s": subscriber.id, "e": subscriber.email})
        view = self.tokens.make(Purpose.VIEW, {"s": subscriber.id, "d": edition_date.isoformat()})
        return DigestLinks(
            unsubscribe=f"{base}/unsubscribe/{unsub}",
            manage=f"{base}/manage/{manage}",
            view=f"{base}/archive/view/{view}",
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
        return maybe_sign(self.signer, envelope)


def _batches(
    store: Store, to: str | None, subscriber_ids: Sequence[int] | None = None
) -> Iterator[list[Subscriber]]:
    yield from store.iter_subscribers(
        SubscriberStatus.ACTIVE, email=to, batch=500, ids=subscriber_ids
    )


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
    claim_lease: timedelta = timedelta(minutes=10),
    claim_clock: Callable[[], datetime] | None = None,
    builder: EditionBuilder | None = None,
) -> SendReport:
    """Send today's edition to every active subscriber who has not had it yet.

    ``to`` limits the run to one address, ``topic`` to the followers of one topic (their digest
    then holds only that topic), ``due`` to the subscribers whose edition is due (the
    scheduler's filter). ``force`` re-sends today's edition to ``to``, marked as forced.
    ``stop`` is checked between messages: a SIGTERM finishes the message in flight, then stops.
    ``subscriber_ids`` limits the run to those subscribers (a worker's chunk). A claim left by an
    interrupted run is taken over once ``claim_lease`` has passed since it was made, measured
    by ``claim_clock`` (default: the run's ``now``; workers pass the wall clock, since every
    chunk of an edition shares one ``now``). ``builder`` reuses the papers, ranker and templates
    loaded for an earlier run with the same ``now`` (a worker's next chunk of the same edition).
    """
    from newsletter.schedule import listing_gap

    if force and to is None:
        raise ValueError("force re-sends one subscriber's edition: give the address")
    builder = builder or EditionBuilder(config, store, now)
    report = SendReport(dry_run=dry_run)
    owner = run_owner()
    domain = config.settings.sender.message_domain
    mailer: Mailer | None = None
    factory = mailer_factory or (lambda: SmtpMailer(config.settings.smtp))
    skip_quiet = config.settings.schedule.no_listing == "skip"
    try:
        for batch in _batches(store, to, subscriber_ids):
            if topic is not None:
                batch = [s for s in batch if topic in s.topics]
            if due is not None:
                wanted = [s for s in batch if due(s)]
                report.not_due += len(batch) - len(wanted)
                batch = wanted
            if not batch:
                continue
            sent_ids = store.sent_paper_ids([s.id for s in batch])
            last = store.last_sent([s.id for s in batch]) if skip_quiet and not force else {}
            for sub in batch:
                if stop is not None and stop.is_set():
                    report.stopped = True
                    return report
                report.considered += 1
                edition_date = edition_date_for(sub, now)
                report.dates.add(edition_date)
                if dry_run:
                    digest = builder.digest(sub, edition_date, sent_ids[sub.id], only_topic=topic)
                    if digest.is_empty and config.settings.digest.empty == "skip":
                        report.empty += 1
                    else:
                        rendered, _ = builder.render(digest)
                        report.rendered.append((sub.email, rendered))
                    continue
                if force:
                    claim, earlier = store.force_edition(
                        sub.id, edition_date, make_message_id(domain), now, owner=owner
                    )
                    exclude = sent_ids[sub.id] - set(earlier)
                else:
                    maybe = store.claim_edition(
                        sub.id,
                        edition_date,
                        make_message_id(domain),
                        now if claim_clock is None else claim_clock(),
                        owner=owner,
                        lease=claim_lease,
                    )
                    if maybe is None:
                        report.already += 1
                        continue
                    claim, exclude = maybe, sent_ids[sub.id]
                report.resumed += int(claim.resumed)
                gap = listing_gap(now, last[sub.id]) if sub.id in last else None
                if gap is not None:
                    store.mark_edition(claim.id, EditionStatus.SKIPPED, now, error=gap)
                    report.no_listing += 1
                    report.no_listing_reason = gap
                    continue
                digest = builder.digest(sub, edition_date, exclude, only_topic=topic)
                if digest.is_empty and config.settings.digest.empty == "skip":
                    store.mark_edition(
                        claim.id,
                        EditionStatus.SKIPPED,
                        now,
                        error="nothing new in the subscriber's topics",
                    )
                    report.empty += 1
                    continue
                rendered, links = builder.render(digest)
                envelope = builder.envelope(digest, rendered, links, claim.message_id)
                current = store.subscriber_by_id(sub.id)  # suppression is checked at send time
                if current is None or current.status is not SubscriberStatus.ACTIVE:
                    store.mark_edition(
                        claim.id, EditionStatus.SKIPPED, now, error="unsubscribed before sending"
                    )
                    continue
                if mailer is None:
                    mailer = factory()
                store.mark_edition(claim.id, EditionStatus.SENDING, now)
                try:
                    mailer.send(envelope)
                except DeliveryError as e:
                    report.failed += 1
                    report.errors.append(str(e))
                    status = EditionStatus.DEFERRED if e.temporary else EditionStatus.FAILED
                    store.mark_edition(claim.id, status, now, error=e.reason)
                    if not e.temporary and store.record_permanent_failure(sub.id, 3, now):
                        report.suppressed += 1
                    log.warning("edition for %s failed: %s", sub.email, e)
                    continue
                except RelayError:
                    store.release_edition(claim.id)
                    raise
                store.mark_edition(
                    claim.id, EditionStatus.SENT, now, paper_ids=[i.paper.id for i in digest.items]
                )
                report.sent += 1
                if len(report.rendered) < keep_rendered:
                    report.rendered.append((sub.email, rendered))
                if progress is not None:
                    progress(report)
    except RelayError as e:
        report.relay_error = str(e)
    finally:
        if mailer is not None:
            mailer.close()
    return report
