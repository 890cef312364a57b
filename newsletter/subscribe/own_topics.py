"""Readers' own topics (issue 45): a sentence of their own and a few example papers, each its own
section of that reader's digest, ranked like an operator's topic.

The rules live here, for the manage page, the ``topic add:`` / ``topic remove:`` email
commands and the send alike:

- what a sentence may be (:func:`check_sentence`: one line, at most ``own_topics.max_chars``,
  letters in it, no HTML and no links) and its examples (:func:`parse_examples`: arXiv ids
  only, at most ``own_topics.max_examples``); a refusal is an :class:`OwnTopicRefused` whose
  reason never quotes the input;
- the words it matches by (:func:`content_words`: stop words dropped), and the operator-style
  topic the ranker gets (:func:`own_topic_settings`, named ``own.<id>``: no operator topic can
  have a dot in its name);
- whether they are on (:func:`own_topics_on`) and whether they match by meaning or by words only
  (:func:`lexical_only`);
- :class:`OwnTopicEditor`: add, edit, remove under ``own_topics.max`` and
  ``own_topics.edits_per_day``, embedding the sentence once when it is saved (semantic
  matching on), so a send reads its vector by the text's hash.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from newsletter.config import Config, OwnTopicsSettings, TopicSettings
from newsletter.errors import SubscriberError
from newsletter.identity import arxiv_id_of
from newsletter.models import OwnTopic, Subscriber
from newsletter.rank.profiles import STOPWORDS
from newsletter.store.protocol import Vectors
from newsletter.store.protocol_own_topics import OwnTopics
from newsletter.text import WORD_PATTERN, fold, one_line_text, phrase_terms

log = logging.getLogger(__name__)


class OwnTopicRefused(SubscriberError):
    """A reader's own topic that cannot be saved as given; ``field`` names the part (``text``,
    ``examples``, ``topic``) and ``reason`` says why in words that never quote the input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


REQUEST_WORDS = frozenset(
    (
        "approach",
        "approaches",
        "interested",
        "like",
        "method",
        "methods",
        "new",
        "paper",
        "papers",
        "research",
        "studies",
        "study",
        "using",
        "work",
        "works",
    )
)
"""Words a reader uses to ask rather than to say what about ("papers on …", "new work in …")."""

_HTML = re.compile(r"[<>]|&#?\w+;")
_LINK = re.compile(
    r"[a-z][a-z0-9+.-]*://|\bwww\.|\bmailto:|\bjavascript:|\bdata:"
    r"|\b[\w-]+\.(?:com|org|net|io|ai|co|me|info|biz|ly|gl|xyz|ru|cn|de|uk|app|dev|site|link"
    r"|click|top|edu|gov|tk|to|sh|gg|be|in|us)\b",
    re.IGNORECASE,
)
EDIT_WINDOW = timedelta(days=1)
"""``own_topics.edits_per_day`` counts the changes a reader made within this window."""


def check_sentence(text: str, settings: OwnTopicsSettings) -> str:
    """The reader's sentence as it is kept (controls gone, one line, spaces collapsed), or an
    :class:`OwnTopicRefused` (field ``text``) saying what is wrong, never quoting it."""
    clean = one_line_text(text).strip()
    if not clean:
        raise OwnTopicRefused("text", "write a sentence saying what the topic is about")
    if len(clean) > settings.max_chars:
        raise OwnTopicRefused(
            "text", f"too long: at most {settings.max_chars} characters ({len(clean)} given)"
        )
    if _HTML.search(clean):
        raise OwnTopicRefused("text", "no HTML, please: write plain words (no < or >)")
    if _LINK.search(clean):
        raise OwnTopicRefused(
            "text", "no links, please: name example papers by their arXiv ids instead"
        )
    if not content_words(clean):
        raise OwnTopicRefused("text", "say what the topic is about in a few words of substance")
    return clean


def parse_examples(text: str | Sequence[str], settings: OwnTopicsSettings) -> tuple[str, ...]:
    """Example papers as versionless arXiv ids (repeats dropped), from ids or arXiv links
    separated by spaces or commas; an :class:`OwnTopicRefused` (field ``examples``) names the
    position of one that is not an arXiv id, never the text."""
    items = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    ids: list[str] = []
    for n, item in enumerate(items, start=1):
        key = arxiv_id_of(item) if len(item) <= 100 else None
        if key is None:
            raise OwnTopicRefused(
                "examples",
                f"example {n} is not an arXiv id (write them like 2401.04088 or hep-th/9901001)",
            )
        if key not in ids:
            ids.append(key)
    if len(ids) > settings.max_examples:
        raise OwnTopicRefused(
            "examples", f"too many examples: at most {settings.max_examples} papers per topic"
        )
    return tuple(ids)


def content_words(sentence: str) -> list[str]:
    """The words of a sentence worth matching, as written, in order: stop words and request
    words ("papers", "new", "using") dropped, and words that match alike (plurals,
    inflections) kept once. The keywords of an own topic; any free text the ranker should read
    as keywords can go through it."""
    out: list[str] = []
    seen: set[tuple[tuple[str, ...], ...]] = set()
    for word in WORD_PATTERN.findall(sentence):
        folded = fold(word)
        if len(folded) < 2 or folded in STOPWORDS or folded in REQUEST_WORDS or folded.isdigit():
            continue
        terms = phrase_terms(word)
        if not terms or terms in seen:
            continue
        seen.add(terms)
        out.append(word)
    return out


def own_topic_settings(own: OwnTopic) -> TopicSettings:
    """The topic the ranker gets for a reader's own topic: named ``own.<id>``, titled with their
    sentence, its content words as keywords, its examples as ``like:`` papers.

    Built without the config's validation: the name has a dot on purpose (no operator topic can
    be called that), and the sentence's words passed :func:`check_sentence`."""
    fields = _topic_defaults()
    fields.update(
        name=own.name, title=own.text, keywords=content_words(own.text), like=list(own.examples)
    )
    return TopicSettings.model_construct(
        _fields_set={"name", "title", "keywords", "like"}, **fields
    )


def _topic_defaults() -> dict[str, Any]:
    """Every field of a topic at its default (fresh lists): ``model_construct`` given them all
    takes microseconds, but looks each missing default's factory's signature up again, which
    made 30,000 own topics cost 27 s."""
    return {
        name: field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        for name, field in TopicSettings.model_fields.items()
    }


def own_texts(text: str) -> list[str]:
    """What semantic matching embeds for a sentence, the sentence first (its hash is the own
    topic's ``text_hash``), then each content word (to name what a paper is nearest to)."""
    from newsletter.semantic.vectors import keyword_texts, topic_text

    settings = TopicSettings.model_construct(
        name="own.0", title=text, keywords=content_words(text), like=[]
    )
    return [topic_text(settings), *keyword_texts(settings).values()]


def sentence_hash(text: str) -> str:
    """The key the sentence's vector is stored under (the hash of its first :func:`own_texts`)."""
    from newsletter.semantic.vectors import text_hash

    return text_hash(own_texts(text)[0])


def own_topics_on(config: Config) -> bool:
    """Whether readers may have own topics: ``own_topics.enabled``, where ``auto`` follows
    ``ranking.semantic`` (without the extra installed they then match words only)."""
    enabled = config.settings.own_topics.enabled
    return config.settings.ranking.semantic if enabled == "auto" else bool(enabled)


def lexical_only(config: Config) -> bool:
    """Whether own topics match words only: semantic matching is off or cannot run (the
    ``semantic`` extra is not installed). Only looks for the packages (no import)."""
    from newsletter.semantic.model import runtime_missing

    return not config.settings.ranking.semantic or runtime_missing(load=False) is not None


LEXICAL_NOTE = (
    "Your own topics match papers by their words only until the operator installs semantic "
    "matching; then they match by meaning too."
)
"""What the manage page and the digest's footer say, once, when :func:`lexical_only`."""


class EditorStore(OwnTopics, Vectors, Protocol):
    """What :class:`OwnTopicEditor` needs of the store (rate limits included)."""

    def hit_rate(self, key: str, now: datetime, *, window: timedelta, limit: int) -> bool:
        """Count one event for ``key``; False when over ``limit`` within ``window``."""
        ...


class OwnTopicEditor:
    """Adds, edits and removes readers' own topics under the operator's limits."""

    def __init__(
        self,
        config: Config,
        store: EditorStore,
        now: Callable[[], datetime],
        embed: Callable[[Sequence[str]], object] | None = None,
    ) -> None:
        """``embed``: stores the vectors of texts (a :class:`VectorSource`'s ``vectors``);
        default: one made on first use when semantic matching can run."""
        self.config = config
        self.settings = config.settings.own_topics
        self.store = store
        self.now = now
        self._embed = embed

    @property
    def on(self) -> bool:
        """Whether own topics are enabled (:func:`own_topics_on`)."""
        return own_topics_on(self.config)

    def mine(self, subscriber: Subscriber) -> tuple[OwnTopic, ...]:
        """The reader's own topics, in their order."""
        return self.store.own_topics_of([subscriber.id]).get(subscriber.id, ())

    def check(self, text: str, examples: str | Sequence[str]) -> tuple[str, tuple[str, ...]]:
        """The sentence and examples as they would be saved; raises :class:`OwnTopicRefused`."""
        if not self.on:
            raise OwnTopicRefused("text", "own topics are turned off on this service")
        return check_sentence(text, self.settings), parse_examples(examples, self.settings)

    def _allow(self, subscriber: Subscriber) -> None:
        if not self.store.hit_rate(
            f"own:{subscriber.id}",
            self.now(),
            window=EDIT_WINDOW,
            limit=self.settings.edits_per_day,
        ):
            raise OwnTopicRefused(
                "text",
                f"too many changes today: at most {self.settings.edits_per_day} in 24 hours; "
                "try again tomorrow",
            )

    def add(
        self, subscriber: Subscriber, text: str, examples: str | Sequence[str] = ""
    ) -> OwnTopic:
        """Add an own topic last in the reader's list (the same sentence twice is one topic);
        raises :class:`OwnTopicRefused` (bad text or examples, too many topics, rate limit)."""
        sentence, ids = self.check(text, examples)
        if len(self.mine(subscriber)) >= self.settings.max:
            raise OwnTopicRefused("text", self._too_many())
        self._allow(subscriber)
        added = self.store.add_own_topic(
            subscriber.id,
            sentence,
            sentence_hash(sentence),
            ids,
            self.now(),
            limit=self.settings.max,
        )
        if added is None:
            raise OwnTopicRefused("text", self._too_many())
        self._embed_texts(sentence)
        return added

    def _too_many(self) -> str:
        n = self.settings.max
        return f"you have {n} own topic{'s' if n != 1 else ''} already, the most allowed: remove one first"

    def edit(
        self, subscriber: Subscriber, topic_id: int, text: str, examples: str | Sequence[str] = ""
    ) -> OwnTopic:
        """Change one of the reader's own topics (its votes stay with it); raises
        :class:`OwnTopicRefused`."""
        sentence, ids = self.check(text, examples)
        self._allow(subscriber)
        done = self.store.edit_own_topic(
            subscriber.id, topic_id, sentence, sentence_hash(sentence), ids, self.now()
        )
        if done is None:
            raise OwnTopicRefused("topic", "that topic is not one of yours (any more)")
        self._embed_texts(sentence)
        return done

    def remove(self, subscriber: Subscriber, topic_id: int) -> bool:
        """Remove one of the reader's own topics; False when it was not theirs (or gone)."""
        if not any(o.id == topic_id for o in self.mine(subscriber)):
            return False
        self._allow(subscriber)
        return self.store.remove_own_topic(subscriber.id, topic_id)

    def _embed_texts(self, sentence: str) -> None:
        """Embed the sentence (and its words) now, once, when semantic matching can run; a
        failure is logged and the next send embeds it."""
        if lexical_only(self.config):
            return
        try:
            if self._embed is None:
                from newsletter.semantic.vectors import VectorSource

                self._embed = VectorSource(self.config, self.store, self.now).vectors
            self._embed(own_texts(sentence))
        except Exception:  # the topic is saved; the next send embeds what is missing
            log.exception("own topics: embedding a sentence failed; the next send will")


def own_topic_rows(
    own: Mapping[int, Sequence[OwnTopic]],
) -> list[TopicSettings]:
    """The ranker's extra topic rows for these readers' own topics (reader by reader)."""
    return [own_topic_settings(o) for mine in own.values() for o in mine]
