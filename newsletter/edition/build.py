"""The builder: a subscriber and a date become a digest, its links and a signed message.

:class:`EditionBuilder` loads what every edition of a run shares once (the day's papers, the
ranker with its reader profiles, templates, link tokens, the DKIM signer, VERP) and then, per
subscriber: rank (:meth:`~EditionBuilder.digest`) → render (:meth:`~EditionBuilder.render`) →
message (:meth:`~EditionBuilder.envelope`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date, datetime, timedelta

from newsletter.bounces.verp import Verp
from newsletter.config import Config, TopicSettings
from newsletter.deliver import (
    Envelope,
    build_message,
)
from newsletter.deliver.dkim import maybe_sign
from newsletter.deliver.message import build_encoded_message
from newsletter.deliver.wire import WireHtml, WireText
from newsletter.digest.render import DigestLinks, RenderedDigest, Renderer
from newsletter.digest.shared_render import Shared, reader_values, render_shared, share_key
from newsletter.edition.layout import Layouts
from newsletter.edition.plan import choose
from newsletter.models import Digest, OwnTopic, Paper, Subscriber, SubscriberStatus, Vote
from newsletter.rank import Ranker
from newsletter.rank.builder import build_ranker
from newsletter.semantic.vectors import VectorSource
from newsletter.services import Services
from newsletter.services.link_tokens import Purpose
from newsletter.store.protocol import SendStore
from newsletter.subscribe.own_topics import LEXICAL_NOTE, own_topic_rows, own_topics_on
from newsletter.subscribe.votes import VoteLinks

log = logging.getLogger(__name__)


def day_ranker(
    config: Config,
    store: SendStore,
    now: datetime,
    vectors: VectorSource | None = None,
    extra_topics: Sequence[TopicSettings] = (),
) -> tuple[list[Paper], Ranker]:
    """The papers first seen within ``digest.lookback_days`` of ``now`` and the ranker over
    them (:func:`~newsletter.rank.builder.build_ranker`, with ``vectors`` and the readers' own
    topics in ``extra_topics``): what ``newsletter send``, ``rank`` and ``preview`` all rank
    with."""
    papers = store.recent_papers(now - timedelta(days=config.settings.digest.lookback_days))
    ranker = build_ranker(config, store, papers, now, vectors=vectors, extra_topics=extra_topics)
    return papers, ranker


def due_own_topics(
    config: Config,
    store: SendStore,
    now: datetime,
    due: Callable[[Subscriber], bool] | None = None,
    email: str | None = None,
) -> dict[int, tuple[OwnTopic, ...]]:
    """The own topics of the active readers a run may send to (``due`` now, only ``email``
    when given), by reader: the only own topics the run's ranker scores. None when own topics
    are off."""
    if not own_topics_on(config):
        return {}
    ids = store.own_topic_readers()
    if not ids:
        return {}
    zone = config.settings.schedule.timezone
    chosen: list[int] = []
    for batch in store.iter_subscribers(SubscriberStatus.ACTIVE, batch=500, ids=ids, email=email):
        chosen.extend(s.id for s, _ in choose(batch, now, due=due, default_zone=zone).wanted)
    return store.own_topics_of(chosen) if chosen else {}


SHARED_SHAPES = 1024
"""Shapes of shared messages a run keeps (each a few KB of its own: the sections' cards are
shared between shapes, see :mod:`newsletter.deliver.wire`)."""

HISTORY_MARGIN = timedelta(days=2)
"""How much earlier than its first paper's first sighting an edition may be dated: a reader's
local date runs up to a day behind UTC, and an edition the relay left unanswered is re-sent by
the next run, a day later at most, under its own date."""


def history_since(papers: Sequence[Paper]) -> date | None:
    """The earliest date an edition carrying one of ``papers`` can have: nothing sent to a
    reader before their first sighting can repeat one of them (``None`` without papers: no
    history is needed)."""
    first = min((p.first_seen for p in papers), default=None)
    return None if first is None else first.date() - HISTORY_MARGIN


class EditionBuilder:
    """Everything needed to turn a subscriber into a digest and a message, built once per run."""

    def __init__(
        self,
        services: Services[SendStore],
        now: datetime,
        *,
        due: Callable[[Subscriber], bool] | None = None,
        email: str | None = None,
    ) -> None:
        """``due`` and ``email``: the run's filters, so that only the own topics of readers
        this run may send to are ranked (default: every active reader's)."""
        config, store = services.config, services.store
        self.config = config
        self.settings = config.settings
        self.store = store
        self.now = now
        self.own = due_own_topics(config, store, now, due, email)
        """Readers' own topics by reader id (only those this run may send to)."""
        self.papers, self.ranker = day_ranker(
            config, store, now, services.send_vectors, own_topic_rows(self.own)
        )
        self.lexical_own = bool(self.own) and self.ranker.meaning is None
        """Own topics are ranked by their words only (the digest's footer says so once)."""
        log.info("%s", services.send_vectors.state)
        self.history_since = history_since(self.papers)
        """The earliest edition date that can hold one of the day's papers (see
        :func:`history_since`): only editions from it on can repeat one today."""
        self.renderer = Renderer(self.settings, config.templates_dir())
        self.tokens = services.tokens
        # Signed as of the run's start, with HMAC states prepared once (Tokens.family).
        self._unsubscribe = self.tokens.family(Purpose.UNSUBSCRIBE)
        self._manage = self.tokens.family(Purpose.MANAGE)
        self._view = self.tokens.family(Purpose.VIEW)
        self.votes = VoteLinks(self.settings.sender.base_url)
        self.signer = services.signer
        self.verp = Verp.from_settings(
            self.settings.bounces, self.tokens.secret, self.settings.sender.from_address
        )
        self.shared = SharedMessages()
        """Messages encoded once for the readers of one shape (see :meth:`message`)."""
        self.layouts = Layouts(grouped=self.settings.digest.group_by_topic)
        """What each digest showed besides its papers, for its ledger row (the archive's
        "view in browser" page renders it again: :mod:`newsletter.edition.layout`)."""

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
        own = () if only_topic else tuple(o.name for o in self.own.get(subscriber.id, ()))
        topics = (only_topic,) if only_topic else (*subscriber.topics, *own)
        sections = self.ranker.sections(
            topics,
            exclude_ids=sent_ids,
            max_items=d.max_items,
            group_by_topic=d.group_by_topic,
            votes=votes,
        )
        titles = tuple(self.ranker.topics[t].label for t in topics if t in self.ranker.topics)
        note = LEXICAL_NOTE if own and self.lexical_own else ""
        return Digest(subscriber, edition_date, sections, titles, note)

    def links(self, subscriber: Subscriber, edition_date: date) -> DigestLinks:
        """The subscriber's unsubscribe, manage, view and feedback links for the edition.

        Three signatures per digest: unsubscribe and manage each have their own purpose-bound
        token; the view link's token also serves every more/less link, whose paper and vote
        are in the path (:mod:`newsletter.subscribe.votes`).
        """
        base = self.settings.sender.base_url
        # The id and the address's binding, never the address (see newsletter.services.link_tokens).
        reader = {"s": subscriber.id, "h": self.tokens.binding(subscriber.email)}
        unsub = self._unsubscribe.make(reader)
        manage = self._manage.make(reader)
        view = self._view.make({**reader, "d": edition_date.isoformat()})
        return DigestLinks(
            unsubscribe=f"{base}/unsubscribe/{unsub}",
            manage=f"{base}/manage/{manage}",
            view=f"{base}/archive/view/{view}",
            more=f"{base}/archive/view/{view}/more",
            feedback=self.votes.for_digest(view),
        )

    def message(self, digest: Digest, message_id: str) -> Envelope:
        """The message for ``digest``, ready for the relay, as :meth:`render` and
        :meth:`envelope` make it (the same bytes).

        The second reader of a shape (the same sections, titles and date: the same topics, no
        votes) has the message rendered and encoded once for every later one, with slots for
        their own values (:mod:`newsletter.digest.shared_render`, :mod:`newsletter.deliver.wire`); each
        later reader's message is then a join. The first is rendered alone: most shapes of
        a run with many topics have one reader, and sharing would only cost them.
        """
        links = self.links(digest.subscriber, digest.edition_date)
        to = self.settings.smtp.dev_recipient or digest.subscriber.email
        envelope = self.shared.envelope(
            self.renderer, digest, links, to=to, message_id=message_id, now=self.now
        )
        if envelope is not None:
            return self._sealed(digest, envelope)
        return self.envelope(digest, self.renderer.render(digest, links), links, message_id)

    def render(self, digest: Digest) -> tuple[RenderedDigest, DigestLinks]:
        """The rendered digest and the links in it."""
        links = self.links(digest.subscriber, digest.edition_date)
        return self.renderer.render(digest, links), links

    def envelope(
        self, digest: Digest, rendered: RenderedDigest, links: DigestLinks, message_id: str
    ) -> Envelope:
        """The message ready for the relay: built, with a VERP sender when bounces are on, and
        DKIM-signed."""
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
        return self._sealed(digest, envelope)

    def _sealed(self, digest: Digest, envelope: Envelope) -> Envelope:
        """With a VERP sender when bounces are on, and DKIM-signed."""
        if self.verp is not None:  # bounces come back to a signed address (newsletter.bounces)
            envelope = replace(
                envelope, sender=self.verp.sender(digest.subscriber.id, digest.edition_date)
            )
        return maybe_sign(self.signer, envelope)


Shape = tuple[Shared, WireHtml, WireText]


class SharedMessages:
    """The run's shared messages by shape: made on a shape's second reader, bounded (the
    oldest go first)."""

    def __init__(self, max_shapes: int = SHARED_SHAPES) -> None:
        self.max_shapes = max_shapes
        self._seen: set[object] = set()
        self._made: dict[object, Shape | None] = {}

    def get(self, key: object, render: Callable[[], Shared | None]) -> Shape | None:
        """The shape of ``key``: ``None`` for a key seen for the first time (render that reader
        alone), or one that cannot be shared; made with ``render`` on the second sight."""
        if key is None:
            return None
        try:
            found = self._made.get(key, False)
        except TypeError:  # unhashable: render alone
            return None
        if found is not False:
            return found  # type: ignore[return-value]
        if key not in self._seen:
            if len(self._seen) > 200_000:
                self._seen.clear()
            self._seen.add(key)
            return None
        made = _encoded(render())
        while len(self._made) >= self.max_shapes:
            del self._made[next(iter(self._made))]
        self._made[key] = made
        return made

    def envelope(
        self,
        renderer: Renderer,
        digest: Digest,
        links: DigestLinks,
        *,
        to: str,
        message_id: str,
        now: datetime,
    ) -> Envelope | None:
        """The reader's message from their shape's shared one (unsigned, no VERP), or ``None``:
        render it alone (a shape seen for the first time, one that cannot be shared, or values
        of theirs that do not fit the shared encoding)."""
        key = share_key(renderer, digest, links)
        shape = self.get(key, lambda: render_shared(renderer, digest, links))
        if shape is None:
            return None
        shared, html, text = shape
        html_values, text_values = reader_values(shared, digest, links)
        body, plain = html.fill(html_values), text.fill(text_values)
        if body is None or plain is None:
            return None
        return build_encoded_message(
            renderer.subject(digest),
            plain[0],
            body[0],
            plain[1] or body[1],
            settings=renderer.settings,
            to_address=to,
            to_name=digest.subscriber.name,
            message_id=message_id,
            links=links,
            now=now,
        )


def _encoded(shared: Shared | None) -> Shape | None:
    """Both parts encoded; the rendering itself is dropped but for its deferred filter calls."""
    if shared is None:
        return None
    html = WireHtml.build(shared.html.pieces)
    text = WireText.build(shared.text.pieces)
    if html is None or text is None:
        return None
    return shared.without_pieces(), html, text
