"""Learning from the reader: "more like this" and "less like this" votes on papers.

Every item of a digest carries two links, ``{base_url}/feedback/{digest token}/{topic}/{paper
id}/{more|less}`` (:class:`VoteLinks`). The digest token is the one of the digest's "view in
browser" link, signed once per digest: it names the reader (id and a binding to the address, like
manage and unsubscribe tokens; see :mod:`newsletter.services.link_tokens`) and the edition's date. The paper,
the vote and the section's topic are in the path, not in the signature: the edition's ledger row
(``editions.paper_ids``) decides whether that paper was in that reader's digest, so a link
holder can vote only on the papers the digest carried. Links mailed before (one signed token per
paper and vote, ``{base_url}/feedback/{token}``, :class:`FeedbackLinks`) keep working until
they expire. Link scanners open every link in a mail, so opening one changes nothing: the page
asks for one click (a POST), which stores the vote. The same votes come from ``newsletter
feedback`` on the command line and are withdrawn from the manage page. What a vote does to the
ranking is the ranker's business (``Store.votes_for``).

Effects are passed in: the store, the tokens and the clock.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from newsletter.errors import StoreError, SubscriberError
from newsletter.identity import arxiv_id_of
from newsletter.models import DigestItem, Paper, Subscriber, Vote
from newsletter.services.link_tokens import Purpose, TokenError, TokenHead, Tokens, TokenTail
from newsletter.store import Store

MORE = 1
LESS = -1


class FeedbackLinks:
    """Feedback links of the form mailed before one token served a whole digest: a signed token
    per reader, paper and vote (read by :func:`read_token`; tests make them to prove that old
    links keep working).

    Tokens are made with :meth:`Tokens.family`: a paper's part of the token is encoded once per
    run, a reader's part once per digest, so a link costs one short HMAC.
    """

    def __init__(self, tokens: Tokens, base_url: str, signed_at: datetime | None = None) -> None:
        self._tokens = tokens
        self._family = tokens.family(Purpose.FEEDBACK, signed_at)
        self.prefix = f"{base_url}/feedback/"
        self._tails: dict[tuple[str, int, str], TokenTail] = {}

    def for_subscriber(self, subscriber: Subscriber, binding: str | None = None) -> ReaderLinks:
        """The feedback links of one reader's digest (``binding``: their address's
        :meth:`Tokens.binding`, when the caller has it already)."""
        if binding is None:
            binding = self._tokens.binding(subscriber.email)
        head = self._family.head({"s": subscriber.id, "h": binding})
        return ReaderLinks(self, head)

    def tail(self, paper_key: str, value: int, topic: str) -> TokenTail:
        """The signed part of a token for a vote of ``value`` on a paper in a topic (cached)."""
        key = (paper_key, value, topic)
        tail = self._tails.get(key)
        if tail is None:
            if value not in (MORE, LESS):
                raise ValueError(f"a vote is +1 or -1, not {value!r}")
            fields: dict[str, object] = {"p": paper_key, "v": value}
            if topic:
                fields["t"] = topic
            if len(self._tails) >= 65536:  # a long-lived web app: stay bounded
                self._tails.clear()
            tail = self._tails[key] = self._family.tail(fields)
        return tail


class ReaderLinks:
    """One reader's feedback links (:class:`newsletter.digest.render.FeedbackUrls`)."""

    __slots__ = ("_head", "_links", "prefix")

    shared_ends = False
    """Each token is signed for this reader (:class:`newsletter.digest.render.FeedbackUrls`)."""

    def __init__(self, links: FeedbackLinks, head: TokenHead) -> None:
        self._links = links
        self._head = head
        self.prefix = links.prefix

    def token(self, item: DigestItem, value: int) -> str:
        """The reader's token for a vote of ``value`` (+1 or -1) on ``item``."""
        return self._head.make(self._links.tail(item.paper.key, value, item.topic))

    def url(self, item: DigestItem, value: int) -> str:
        """``{base_url}/feedback/{token}``: :data:`MORE` (+1) or :data:`LESS` (-1) like this."""
        return self.prefix + self.token(item, value)


@dataclass(frozen=True, slots=True)
class FeedbackRequest:
    """What a feedback token says: who votes which way on which paper, from which section."""

    subscriber_id: int
    reader: dict[str, str]
    """What names the reader's address: ``{"h": binding}``, or ``{"e": address}`` in links
    made before bindings (:meth:`Tokens.made_for` reads both)."""
    paper_key: str
    value: int
    topic: str | None
    signed: datetime
    """When the token was signed: links the page hands out are signed as of then."""


def read_token(tokens: Tokens, token: str) -> FeedbackRequest:
    """The request a feedback token carries. Raises :class:`TokenError` (tampered, expired)."""
    data, signed = tokens.read_signed(Purpose.FEEDBACK, token)
    if not isinstance(data, dict):
        raise TokenError("this link is not valid")
    sid, key, value = data.get("s"), data.get("p"), data.get("v")
    reader = {k: data[k] for k in ("h", "e") if isinstance(data.get(k), str)}
    topic = data.get("t")
    if (
        not isinstance(sid, int)
        or len(reader) != 1
        or not isinstance(key, str)
        or value not in (MORE, LESS)
        or not (topic is None or isinstance(topic, str))
    ):
        raise TokenError("this link is not valid")
    return FeedbackRequest(sid, reader, key, int(value), topic, signed)


# ---------------------------------------------------------------------------- one token per digest

VOTE_WORDS = {"more": MORE, "less": LESS}
_WORD = {MORE: "more", LESS: "less"}
_PLAIN_TOPIC = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def topic_segment(topic: str) -> str:
    """A section's topic as a path segment: the name itself when it is made of letters, digits,
    ``-``, ``_`` and ``.``; else ``~`` and its UTF-8 in URL-safe base64, which no decoding of
    the path (servers and test clients differ) can turn into a slash."""
    if _PLAIN_TOPIC.fullmatch(topic):
        return topic
    return "~" + base64.urlsafe_b64encode(topic.encode()).decode().rstrip("=")


def topic_of_segment(segment: str) -> str:
    """The topic a path segment names (:func:`topic_segment`); raises :class:`TokenError`."""
    if not segment.startswith("~"):
        if _PLAIN_TOPIC.fullmatch(segment):
            return segment
        raise TokenError("this link is not valid")
    try:
        coded = segment[1:]
        topic = base64.urlsafe_b64decode(coded + "=" * (-len(coded) % 4)).decode()
    except (binascii.Error, ValueError) as e:
        raise TokenError("this link is not valid") from e
    if not topic or len(topic) > 200:
        raise TokenError("this link is not valid")
    return topic


class VoteLinks:
    """The more/less links of a run's digests, one signed token per digest (see the module).

    A link's tail (topic, paper id, vote) is the same for every reader of that paper in that
    section: made once per run; a reader's link is their digest's prefix joined to it.
    """

    def __init__(self, base_url: str) -> None:
        self.base = f"{base_url}/feedback/"
        self._tails: dict[tuple[str, int, int], str] = {}

    def for_digest(self, token: str) -> DigestVoteLinks:
        """The links of the digest whose view token is ``token``."""
        return DigestVoteLinks(self, f"{self.base}{token}/")

    def tail(self, topic: str, paper_id: int, value: int) -> str:
        """``{topic}/{paper id}/{more|less}`` (no topic segment for an item without one)."""
        key = (topic, paper_id, value)
        tail = self._tails.get(key)
        if tail is None:
            if value not in _WORD:
                raise ValueError(f"a vote is +1 or -1, not {value!r}")
            tail = f"{paper_id}/{_WORD[value]}"
            if topic:
                tail = f"{topic_segment(topic)}/{tail}"
            if len(self._tails) >= 65536:  # a long-lived web app: stay bounded
                self._tails.clear()
            self._tails[key] = tail
        return tail


class DigestVoteLinks:
    """One digest's more/less links (:class:`newsletter.digest.render.FeedbackUrls`): the prefix holds
    the digest's token, so a link costs a dictionary look-up and no signature."""

    __slots__ = ("_links", "prefix")

    shared_ends = True
    """What follows the prefix names the topic, paper and vote only: the same for every reader
    (:class:`newsletter.digest.render.FeedbackUrls`)."""

    def __init__(self, links: VoteLinks, prefix: str) -> None:
        self._links = links
        self.prefix = prefix

    def token(self, item: DigestItem, value: int) -> str:
        """What follows the prefix for a vote of ``value`` (+1 or -1) on ``item``."""
        return self._links.tail(item.topic, item.paper.id, value)

    def url(self, item: DigestItem, value: int) -> str:
        """The whole link: :data:`MORE` (+1) or :data:`LESS` (-1) like this."""
        return self.prefix + self.token(item, value)


@dataclass(frozen=True, slots=True)
class DigestVote:
    """A vote link of the one-token form, as the web app receives it."""

    token: str
    """The digest's token (a "view in browser" token)."""
    paper_id: int
    value: int
    topic: str | None

    @classmethod
    def parse(cls, token: str, paper_id: int, vote: str, topic: str | None) -> DigestVote:
        """The vote a link's path names; raises :class:`TokenError` for a bad vote or topic."""
        value = VOTE_WORDS.get(vote)
        if value is None:
            raise TokenError("this link is not valid")
        return cls(token, paper_id, value, None if topic is None else topic_of_segment(topic))

    @property
    def path(self) -> str:
        """What follows ``/feedback/`` in the link."""
        tail = f"{self.paper_id}/{_WORD[self.value]}"
        if self.topic:
            return f"{self.token}/{topic_segment(self.topic)}/{tail}"
        return f"{self.token}/{tail}"


@dataclass(frozen=True, slots=True)
class DigestReader:
    """What a digest ("view in browser") token names."""

    subscriber_id: int
    subscriber: Subscriber | None
    """``None`` when the address it was made for is no longer that subscriber's (erased; the id
    is someone else's)."""
    edition_date: date
    signed: datetime
    reader: dict[str, str]
    """``{"h": binding}``, ``{"e": address}`` (older links) or ``{}`` (older still)."""


def digest_reader(tokens: Tokens, store: Store, token: str) -> DigestReader:
    """Read a digest token and look up its reader. Raises :class:`TokenError` for a tampered,
    foreign or expired token."""
    data, signed = tokens.read_signed(Purpose.VIEW, token)
    try:
        sid = data["s"]
        day = date.fromisoformat(data["d"])
        if not isinstance(sid, int):
            raise TypeError(sid)
    except (KeyError, TypeError, ValueError) as e:
        raise TokenError("this link is not valid") from e
    reader = {k: data[k] for k in ("h", "e") if isinstance(data.get(k), str)}
    sub = store.subscriber_by_id(sid)
    if sub is not None:
        made_for = tokens.made_for(data, sub.email)
        if made_for is None:
            # A link made before view links named the address: good only if this subscriber
            # already existed when it was signed (an id reused later belongs to someone else).
            made_for = sub.created < signed + timedelta(seconds=1)
        sub = sub if made_for else None
    return DigestReader(sid, sub, day, signed, reader)


class FeedbackError(SubscriberError):
    """A vote that cannot be recorded: the reader was erased or the paper is not stored."""


@dataclass(frozen=True, slots=True)
class Ballot:
    """A feedback token resolved against the store: the reader and paper it names, if any."""

    request: FeedbackRequest
    subscriber: Subscriber | None
    """``None`` when the reader was erased (or the id now belongs to another address)."""
    paper: Paper | None
    """``None`` when the paper is not (or no longer) stored."""
    current: int | None
    """The reader's vote on the paper as stored now (+1, -1), or ``None``."""
    in_digest: bool = True
    """False when a digest link names a paper that the reader's edition did not carry (or that
    is no longer stored)."""

    @property
    def problem(self) -> str | None:
        """Why this vote cannot be recorded, in words for the reader; ``None`` when it can."""
        if self.subscriber is None:
            return (
                "This address is no longer subscribed (its data was erased), so there is "
                "nothing to tune. Nothing was recorded."
            )
        if not self.in_digest:
            return (
                "This paper is not in the digest this link came with (or is no longer stored "
                "here), so this vote cannot be recorded. Nothing was recorded."
            )
        if self.paper is None:
            return (
                f"The paper {self.request.paper_key} is no longer stored here, so this vote "
                "cannot be recorded. Nothing was recorded."
            )
        return None


class Feedback:
    """Votes from the web pages and the CLI: resolve a token, record, withdraw, list."""

    def __init__(self, store: Store, tokens: Tokens | None, now: Callable[[], datetime]) -> None:
        self.store = store
        self.tokens = tokens
        """``None`` where no link is read (the CLI)."""
        self.now = now

    def ballot(self, link: str | DigestVote) -> Ballot:
        """Read a link (a digest vote, or a feedback token mailed before) and look up what it
        names; changes nothing. Raises :class:`TokenError`."""
        if self.tokens is None:
            raise TokenError("no key to check links with")
        if isinstance(link, DigestVote):
            return self._digest_ballot(self.tokens, link)
        req = read_token(self.tokens, link)
        sub = self.store.subscriber_by_id(req.subscriber_id)
        if sub is not None and not self.tokens.made_for(req.reader, sub.email):
            sub = None  # erased, and the id reused by another address
        paper = self.store.paper_by_key(req.paper_key)
        return Ballot(req, sub, paper, self._current(sub, paper))

    def _digest_ballot(self, tokens: Tokens, vote: DigestVote) -> Ballot:
        """A digest vote: its paper must be among those the reader's edition carried."""
        got = digest_reader(tokens, self.store, vote.token)
        paper = None
        if got.subscriber is not None:
            record = self.store.edition_for(got.subscriber.id, got.edition_date)
            if record is not None:
                found = self.store.edition_papers(record.id)
                paper = next((p for p in found if p.id == vote.paper_id), None)
        key = paper.key if paper is not None else f"#{vote.paper_id}"
        req = FeedbackRequest(
            got.subscriber_id, got.reader, key, vote.value, vote.topic, got.signed
        )
        in_digest = paper is not None or got.subscriber is None
        return Ballot(req, got.subscriber, paper, self._current(got.subscriber, paper), in_digest)

    def _current(self, sub: Subscriber | None, paper: Paper | None) -> int | None:
        if sub is None or paper is None:
            return None
        return next((v.value for v in self.store.votes_of(sub.id) if v.paper_id == paper.id), None)

    def cast(self, token: str | DigestVote) -> Ballot:
        """Record the token's vote (idempotent). Raises :class:`TokenError`, :class:`FeedbackError`."""
        ballot = self.ballot(token)
        if ballot.problem is not None:
            raise FeedbackError(ballot.problem)
        assert ballot.subscriber is not None and ballot.paper is not None
        self._set(ballot.subscriber, ballot.paper, ballot.request.value, ballot.request.topic)
        return Ballot(ballot.request, ballot.subscriber, ballot.paper, ballot.request.value)

    def undo(self, token: str | DigestVote) -> Ballot:
        """Withdraw the reader's vote on the token's paper (whichever way it went)."""
        ballot = self.ballot(token)
        if ballot.problem is not None:
            raise FeedbackError(ballot.problem)
        assert ballot.subscriber is not None and ballot.paper is not None
        self.store.clear_vote(ballot.subscriber.id, ballot.paper.id)
        return Ballot(ballot.request, ballot.subscriber, ballot.paper, None)

    def _set(self, sub: Subscriber, paper: Paper, value: int, topic: str | None) -> None:
        try:
            self.store.set_vote(sub.id, paper.id, value, topic, self.now())
        except StoreError as e:  # erased or pruned between the look-up and the write
            raise FeedbackError(f"the vote on {paper.key} could not be recorded: {e}") from e

    def votes(self, subscriber: Subscriber) -> list[Vote]:
        """The subscriber's votes."""
        return self.store.votes_of(subscriber.id)

    def clear(self, subscriber: Subscriber, paper_id: int) -> bool:
        """Withdraw the subscriber's vote on a paper; ``False`` when there was none."""
        return self.store.clear_vote(subscriber.id, paper_id)

    # ------------------------------------------------------------ the command line

    def papers(self, refs: Sequence[str]) -> dict[str, Paper]:
        """Stored papers for ids or arXiv links as people type them, by the text given.

        Raises :class:`FeedbackError` naming every reference that is not an arXiv id or link, or
        whose paper is not stored.
        """
        keys = {ref: arxiv_id_of(ref) for ref in refs}
        bad = [ref for ref, key in keys.items() if key is None]
        if bad:
            raise FeedbackError(
                f"not an arXiv id or arXiv link: {', '.join(bad)} "
                "(write 2611.00019, 2611.00019v2, hep-th/9901001 or https://arxiv.org/abs/2611.00019)"
            )
        stored = self.store.papers_by_keys(k for k in keys.values() if k)
        unknown = [
            f"{ref}" + (f" ({key})" if key != ref else "")
            for ref, key in keys.items()
            if key not in stored
        ]
        if unknown:
            raise FeedbackError(
                f"no stored paper {', '.join(unknown)}; only papers fetched into this "
                "newsletter can be voted on ('newsletter fetch' first, or check the id)"
            )
        return {ref: stored[key] for ref, key in keys.items() if key}

    def apply(
        self,
        subscriber: Subscriber,
        more: Sequence[str],
        less: Sequence[str],
        clear: Sequence[str],
    ) -> list[tuple[str, Paper]]:
        """Votes from the CLI, all or none: every reference is checked before anything is stored.

        Returns ``(what, paper)`` per reference in order (``more``, ``less``, ``clear``).
        """
        papers = self.papers([*more, *less, *clear])
        seen: dict[int, str] = {}
        for what, refs in (("more", more), ("less", less), ("clear", clear)):
            for ref in refs:
                pid = papers[ref].id
                if pid in seen and seen[pid] != what:
                    raise FeedbackError(
                        f"{ref} is given as both --{seen[pid]} and --{what}; choose one"
                    )
                seen[pid] = what
        done: list[tuple[str, Paper]] = []
        for what, refs in (("more", more), ("less", less), ("clear", clear)):
            for ref in refs:
                paper = papers[ref]
                if what == "clear":
                    self.clear(subscriber, paper.id)
                else:
                    self._set(subscriber, paper, MORE if what == "more" else LESS, None)
                done.append((what, paper))
        return done
