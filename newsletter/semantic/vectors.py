"""Vectors for the ranker: each text embedded once, kept by its hash, the model loaded only when
a text has no stored vector.

The texts: a paper's title and abstract (:func:`paper_text`), a topic's query written from its
title and keywords (:func:`topic_text`; its ``like:`` papers join in the ranker, as vectors).
Each is stored under the model's name and the SHA-256 of the text, so a revised abstract is
embedded again and an unchanged one never is: a send whose papers were embedded when they were
fetched, with topics that did not change, reads every vector from the database and never loads
the model (about 100 MB and a second or two). A send that finds texts without a vector (the
day's papers were stored by something other than ``fetch``) says so in one line and has a child
process embed and store them (:mod:`.child`), so the model never joins the send's own memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from newsletter.config import Config, TopicSettings
from newsletter.models import MAX_TEXT_CHARS, Paper, is_own_topic
from newsletter.semantic.cache import model_cache
from newsletter.semantic.model import (
    ALIASES,
    Embedder,
    ModelUnavailable,
    enable,
    locate,
    runtime_missing,
)
from newsletter.store.protocol import Vectors

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


def paper_text(paper: Paper) -> str:
    """What a paper's vector embeds: its title, then its abstract (each at most
    :data:`~newsletter.models.MAX_TEXT_CHARS`, whatever is stored)."""
    title, abstract = paper.title[:MAX_TEXT_CHARS].strip(), paper.abstract[:MAX_TEXT_CHARS].strip()
    return f"{title}. {abstract}" if abstract else title


def topic_text(topic: TopicSettings) -> str:
    """What a topic's vector embeds: its title, then every keyword with its aliases and the
    ``all:`` entries ("Mixture of experts: MoE, mixture of experts; expert routing"). A
    reader's own topic embeds their sentence alone (stored when they saved it)."""
    if is_own_topic(topic.name):
        return topic.label
    entries = [*topic.keywords, *topic.all]
    words = "; ".join(", ".join([e] if isinstance(e, str) else e) for e in entries)
    return f"{topic.label}: {words}" if words else topic.label


def keyword_texts(topic: TopicSettings) -> dict[str, str]:
    """A topic's keyword entries as texts to embed, by their first alias (none for a reader's
    own topic: its sentence is its query, and its "keywords" are only the sentence's words)."""
    out: dict[str, str] = {}
    if is_own_topic(topic.name):
        return out
    for entry in topic.keywords:
        aliases = [entry] if isinstance(entry, str) else list(entry)
        out.setdefault(aliases[0], ", ".join(aliases))
    return out


def text_hash(text: str) -> str:
    """The key a text's vector is stored under (SHA-256, hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Semantic:
    """A run's vectors, as the ranker takes them (unit rows, float32)."""

    model: str
    papers: FloatArray
    """One row per paper, in the order the papers were given."""
    topics: FloatArray
    """One row per topic, in the order the topics were given."""
    examples: Mapping[str, FloatArray]
    """Example papers (``like:``, voted on) by key."""
    keywords: tuple[Mapping[str, FloatArray], ...] = ()
    """Per topic, each keyword entry's vector by its first alias (to name what is near)."""


CHILD_TIMEOUT = 3600.0
"""Seconds the child process that embeds a send's missing texts may take."""


class VectorSource:
    """Stored vectors first, the model for the rest; semantic matching off when it cannot run.

    ``state`` says in one line whether ranking is semantic and, if not, why and how to turn it
    on (``status``, ``rank`` and the run log print it).
    """

    def __init__(
        self,
        config: Config,
        store: Vectors,
        now: Callable[[], datetime],
        *,
        progress: Callable[[int, int], Any] | None = None,
        child: bool = False,
    ) -> None:
        ranking = config.settings.ranking
        self._config = config
        self._child = child
        """Embed missing texts in a child process (the send), when the store is a database
        that a child can open."""
        self._settings = ranking
        self._store = store
        self._now = now
        self._base = config.base_dir
        self.cache = model_cache(config)
        """The folder that keeps ONNX files made from weights (:mod:`.cache`)."""
        self._progress = progress
        self._embedder: Embedder | None = None
        self.loaded = False
        """Whether the model was loaded (some text had no stored vector)."""
        self.embedded = 0
        """How many texts this source embedded (the others were read back)."""
        self.problem: str | None = self._problem()
        self.model = self._name()

    def _problem(self) -> str | None:
        if not self._settings.semantic:
            return "ranking is lexical: ranking.semantic is false"
        missing = runtime_missing(load=False)
        if missing:
            return f"ranking is lexical: {missing}; to match by meaning too: {enable(self._settings.model)}"
        return None

    def _name(self) -> str:
        spec = self._settings.model
        path = Path(spec).expanduser()
        if not path.is_absolute():
            path = self._base / path
        name = path.resolve().name if path.is_dir() else ALIASES.get(spec.lower(), spec)
        return f"{name}@{self._settings.max_tokens}"

    def check(self) -> str:
        """:attr:`state`, after checking that the model's files are there (without loading
        the model): what ``status`` shows."""
        if self.problem is None:
            try:
                locate(self._settings.model, self.cache, self._base, convert=False)
            except ModelUnavailable as e:
                return str(e).replace("semantic matching is off", "ranking is lexical")
        return self.state

    @property
    def state(self) -> str:
        """One line: semantic matching on (with the model) or off (why, and what to do)."""
        if self.problem:
            return self.problem
        return f"ranking fuses keywords with meaning ({self.model})"

    def _load(self) -> Embedder | None:
        if self._embedder is None and self.problem is None:
            try:
                files = locate(self._settings.model, self.cache, self._base)
                log.info("ranking: loading the model %s (%s)", files.name, files.onnx)
                self._embedder = Embedder(files, max_tokens=self._settings.max_tokens)
                self.model = self._embedder.name
                self.loaded = True
            except ModelUnavailable as e:
                self.problem = str(e).replace("semantic matching is off", "ranking is lexical")
                log.warning("%s", self.problem)
        return self._embedder

    def vectors(self, texts: Sequence[str]) -> FloatArray | None:
        """Unit vectors of ``texts``: stored ones read back, the others embedded and stored.
        ``None`` when some are missing and the model cannot run (``problem`` says why)."""
        if self.problem:
            return None
        hashes = [text_hash(t) for t in texts]
        stored = self._store.vectors(self.model, hashes)
        missing = {h: t for h, t in zip(hashes, texts, strict=True) if h not in stored}
        if missing and self._child and self._embed_in_child(list(missing.values()), len(texts)):
            stored.update(self._store.vectors(self.model, list(missing)))
            missing = {h: t for h, t in missing.items() if h not in stored}
        if missing:
            embedder = self._load()
            if embedder is None:
                return None
            todo = list(missing.items())
            done = 0

            def step(n: int) -> None:
                nonlocal done
                done += n
                if self._progress is not None:
                    self._progress(done, len(todo))

            made = embedder.embed([t for _, t in todo], progress=step)
            fresh = {h: made[i].astype("<f4").tobytes() for i, (h, _) in enumerate(todo)}
            self._store.put_vectors(self.model, fresh, self._now())
            stored.update(fresh)
            self.embedded += len(fresh)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([np.frombuffer(stored[h], dtype="<f4") for h in hashes])

    def _embed_in_child(self, texts: list[str], of: int) -> bool:
        """Have ``python -m newsletter.semantic.child CONFIG`` embed and store ``texts``; False
        (the caller embeds them itself) when no child can share the store or the child failed."""
        url = getattr(self._store, "url", None)  # the SQL store's; an in-memory one has none
        if not isinstance(url, str) or ":memory:" in url:
            return False
        log.warning(
            "ranking: %d of the send's %d texts have no stored vector (newsletter fetch stores "
            "them): embedding them in a child process",
            len(texts),
            of,
        )
        try:
            done = subprocess.run(
                [sys.executable, "-m", "newsletter.semantic.child", str(self._config.path)],
                input=json.dumps(texts).encode(),
                capture_output=True,
                timeout=CHILD_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("ranking: the child process failed (%s): embedding here instead", e)
            return False
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            log.warning(
                "ranking: the child process failed (exit %d: %s): embedding here instead",
                done.returncode,
                said[-1] if said else "no message",
            )
            return False
        self.embedded += len(texts)
        return True

    def embed_papers(self, papers: Sequence[Paper]) -> int:
        """Make sure every paper has a vector (after a fetch); returns how many were new.
        Does nothing when semantic matching is off."""
        if self.problem or not papers:
            return 0
        texts = [paper_text(p) for p in papers]
        have = self._store.vectors(self.model, [text_hash(t) for t in texts])
        new = sum(text_hash(t) not in have for t in texts)
        if new:
            self.vectors(texts)
        return new if self.problem is None else 0

    def semantic(
        self,
        papers: Sequence[Paper],
        topics: Sequence[TopicSettings],
        examples: Sequence[Paper] = (),
    ) -> Semantic | None:
        """The run's vectors, or ``None`` (lexical ranking) when semantic matching is off."""
        if self.problem:
            return None
        extra = list({p.key: p for p in examples}.values())
        entries = [keyword_texts(t) for t in topics]
        words = [text for mine in entries for text in mine.values()]
        texts = [
            *(paper_text(p) for p in papers),
            *(topic_text(t) for t in topics),
            *(paper_text(p) for p in extra),
            *words,
        ]
        found = self.vectors(texts)
        if found is None:
            return None
        n, k, x = len(papers), len(topics), len(extra)
        dim = found.shape[1] if found.size else 0
        empty = np.zeros((0, dim), np.float32)
        at = n + k + x
        keywords: list[dict[str, FloatArray]] = []
        for mine in entries:
            keywords.append({label: found[at + i] for i, label in enumerate(mine)})
            at += len(mine)
        return Semantic(
            self.model,
            found[:n] if n else empty,
            found[n : n + k] if k else empty,
            {p.key: found[n + k + i] for i, p in enumerate(extra)},
            tuple(keywords),
        )
