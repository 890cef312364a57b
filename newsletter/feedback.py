"""Learning from the reader: "more like this" and "less like this" votes on papers.

Every item of a digest carries two signed links, ``{base_url}/feedback/{token}``; a token names
the reader (id and a binding to the address, like manage and unsubscribe tokens; see
:mod:`newsletter.tokens`), the paper's key, the vote
(+1 more, -1 less) and the digest section's topic. Link scanners open every link in a mail, so
opening one changes nothing: the page asks for one click (a POST), which stores the vote. The
same votes come from ``newsletter feedback`` on the command line and are withdrawn from the
manage page. What a vote does to the ranking is the ranker's business (``Store.votes_for``).

Effects are passed in: the store, the tokens and the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from newsletter.errors import StoreError, SubscriberError
from newsletter.identity import arxiv_id_of
from newsletter.models import DigestItem, Paper, Subscriber, Vote
from newsletter.store import Store
from newsletter.tokens import Purpose, TokenError, TokenHead, Tokens, TokenTail

MORE = 1
LESS = -1


class FeedbackLinks:
    """The signed feedback links of a run: built once per run, asked once per reader.

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
    """One reader's feedback links (:class:`newsletter.render.FeedbackUrls`)."""

    __slots__ = ("_head", "_links", "prefix")

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

    @property
    def problem(self) -> str | None:
        """Why this vote cannot be recorded, in words for the reader; ``None`` when it can."""
        if self.subscriber is None:
            return (
                "This address is no longer subscribed (its data was erased), so there is "
                "nothing to tune. Nothing was recorded."
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

    def ballot(self, token: str) -> Ballot:
        """Read a token and look up what it names; changes nothing. Raises :class:`TokenError`."""
        if self.tokens is None:
            raise TokenError("no key to check links with")
        req = read_token(self.tokens, token)
        sub = self.store.subscriber_by_id(req.subscriber_id)
        if sub is not None and not self.tokens.made_for(req.reader, sub.email):
            sub = None  # erased, and the id reused by another address
        paper = self.store.paper_by_key(req.paper_key)
        current = None
        if sub is not None and paper is not None:
            current = next(
                (v.value for v in self.store.votes_of(sub.id) if v.paper_id == paper.id), None
            )
        return Ballot(req, sub, paper, current)

    def cast(self, token: str) -> Ballot:
        """Record the token's vote (idempotent). Raises :class:`TokenError`, :class:`FeedbackError`."""
        ballot = self.ballot(token)
        if ballot.problem is not None:
            raise FeedbackError(ballot.problem)
        assert ballot.subscriber is not None and ballot.paper is not None
        self._set(ballot.subscriber, ballot.paper, ballot.request.value, ballot.request.topic)
        return Ballot(ballot.request, ballot.subscriber, ballot.paper, ballot.request.value)

    def undo(self, token: str) -> Ballot:
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
