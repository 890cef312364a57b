"""Papers: storing and updating them with their sources and signals, reading them back for
ranking, the archive and feedback, and subscribers' votes on them (a mixin of the Store)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ARRAY,
    Connection,
    Date,
    Integer,
    bindparam,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError as _SAError

from newsletter.errors import (
    StoreError,
)
from newsletter.identity import content_hash
from newsletter.models import (
    Paper,
    PaperData,
    PaperWrite,
    Vote,
)
from newsletter.store import tables as t
from newsletter.store.base import StoreBase, _by_key
from newsletter.store.tables import parse_paper_list


def _paper_row(d: PaperData) -> dict[str, Any]:
    return {
        "key": d.key,
        "title": d.title,
        "abstract": d.abstract,
        "authors": list(d.authors),
        "categories": list(d.categories),
        "url": d.url,
        "pdf_url": d.pdf_url,
        "code_url": d.code_url,
        "version": d.version,
        "published": d.published,
        "upvotes": d.upvotes,
        "comments": d.comments,
        "code_stars": d.code_stars,
        "content_hash": content_hash(d),
    }


def _paper(r: Any, sources: tuple[str, ...], velocity: float | None = None) -> Paper:
    return Paper(
        id=r.id,
        key=r.key,
        title=r.title,
        abstract=r.abstract,
        authors=tuple(r.authors or ()),
        categories=tuple(r.categories or ()),
        url=r.url,
        pdf_url=r.pdf_url,
        code_url=r.code_url,
        version=r.version,
        published=r.published,
        first_seen=r.first_seen,
        updated=r.updated,
        sources=sources,
        upvotes=r.upvotes,
        comments=r.comments,
        upvote_velocity=velocity,
        announced=bool(r.announced),
        code_stars=r.code_stars,
    )


_META_COLUMNS = (
    "title",
    "abstract",
    "authors",
    "categories",
    "url",
    "pdf_url",
    "code_url",
    "version",
    "published",
    "content_hash",
)


VELOCITY_WINDOW = timedelta(hours=24)
"""Snapshots older than this (before the latest one) do not count towards velocity."""


def upvote_velocity(snapshots: Sequence[tuple[datetime, int]]) -> float | None:
    """Upvotes per hour between the first and last snapshot within the window; ``None`` if unknown.

    ``snapshots`` are ``(observed, upvotes)`` oldest first. One snapshot, or snapshots less than
    six minutes apart, say nothing about speed.
    """
    if len(snapshots) < 2:
        return None
    last_at, last = snapshots[-1]
    window = [(at, n) for at, n in snapshots if last_at - at <= VELOCITY_WINDOW]
    first_at, first = window[0]
    hours = (last_at - first_at).total_seconds() / 3600
    if hours < 0.1:
        return None
    return max(0.0, (last - first) / hours)


_PG_HISTORY = text(
    # Each reader's own editions, by key (a nested loop over the ids): as "subscriber_id IN
    # (...) AND edition_date >= ..." PostgreSQL without statistics took the (edition_date,
    # status) index and read every edition since that date, per batch of readers (a send grew
    # with the square of its list). ``OFFSET 0`` keeps the subquery from being flattened into
    # that same plan (a hash join over the date index).
    "SELECT u.sid, e.paper_ids FROM unnest(CAST(:ids AS integer[])) AS u(sid) "
    "JOIN LATERAL (SELECT paper_ids FROM editions WHERE subscriber_id = u.sid "
    "AND edition_date >= :since AND paper_ids IS NOT NULL OFFSET 0) AS e ON true"
).bindparams(bindparam("ids", type_=ARRAY(Integer)), bindparam("since", type_=Date))


class PaperStore(StoreBase):
    """Papers, their sources and upvote signals, and votes (the papers part of the Store)."""

    def papers_by_keys(self, keys: Iterable[str]) -> dict[str, Paper]:
        """The stored papers with these keys, with their sources; unknown keys are left out."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, Paper] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                rows = conn.execute(select(t.papers).where(t.papers.c.key.in_(chunk))).all()
                ids = [r.id for r in rows]
                sources = self._sources_for(conn, ids)
                for r in rows:
                    out[r.key] = _paper(r, sources.get(r.id, ()))
        return out

    def papers_by_ids(self, ids: Iterable[int]) -> dict[int, Paper]:
        """The stored papers with these ids, with their sources; unknown ids are left out."""
        wanted = list(dict.fromkeys(ids))
        out: dict[int, Paper] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                rows = conn.execute(select(t.papers).where(t.papers.c.id.in_(chunk))).all()
                sources = self._sources_for(conn, [r.id for r in rows])
                for r in rows:
                    out[r.id] = _paper(r, sources.get(r.id, ()))
        return out

    def _sources_for(self, conn: Connection, ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
        found: dict[int, list[str]] = {}
        for start in range(0, len(ids), 500):
            q = (
                select(t.paper_sources.c.paper_id, t.paper_sources.c.source)
                .where(t.paper_sources.c.paper_id.in_(ids[start : start + 500]))
                .order_by(
                    t.paper_sources.c.paper_id,
                    t.paper_sources.c.first_seen,
                    t.paper_sources.c.source,
                )
            )
            for pid, src in conn.execute(q):
                found.setdefault(pid, []).append(src)
        return {k: tuple(v) for k, v in found.items()}

    def write_papers(
        self, source: str, writes: Sequence[PaperWrite], now: datetime
    ) -> dict[str, int]:
        """Apply ingest decisions in one transaction, batched: inserts, updates, links, signals.

        A write that changes nothing (same metadata, same signals, source already linked) issues
        no statement at all, so re-ingesting an unchanged feed writes nothing.
        Returns the stored id of every paper key written.
        """
        ids: dict[str, int] = {}
        inserts = [w for w in writes if w.paper_id is None]
        updates = [
            w
            for w in writes
            if w.paper_id is not None and (w.metadata_changed or w.signals_changed or w.promote)
        ]
        if not inserts and not updates and not any(w.new_link for w in writes):
            return {w.data.key: w.paper_id for w in writes if w.paper_id is not None}
        with self.engine.begin() as conn:
            if inserts:
                rows = []
                for w in inserts:
                    row = _paper_row(w.data)
                    row.update(first_seen=now, updated=now, announced=w.announced)
                    rows.append(row)
                for start in range(0, len(rows), 1000):
                    got = conn.execute(
                        t.papers.insert().returning(t.papers.c.id, t.papers.c.key),
                        rows[start : start + 1000],
                    )
                    ids.update({key: pid for pid, key in got})
            meta = [w for w in updates if w.metadata_changed]
            if meta:
                conn.execute(
                    update(t.papers)
                    .where(t.papers.c.id == bindparam("_id"))
                    .values({c: bindparam(c) for c in (*_META_COLUMNS, "updated")}),
                    [
                        {
                            "_id": w.paper_id,
                            "updated": now,
                            **{c: v for c, v in _paper_row(w.data).items() if c in _META_COLUMNS},
                        }
                        for w in meta
                    ],
                )
            signal_updates = [w for w in updates if w.signals_changed]
            if signal_updates:
                conn.execute(
                    update(t.papers)
                    .where(t.papers.c.id == bindparam("_id"))
                    .values(
                        upvotes=bindparam("upvotes"),
                        comments=bindparam("comments"),
                        code_stars=bindparam("code_stars"),
                    ),
                    [
                        {
                            "_id": w.paper_id,
                            "upvotes": w.data.upvotes,
                            "comments": w.data.comments,
                            "code_stars": w.data.code_stars,
                        }
                        for w in signal_updates
                    ],
                )
            promoted = [w for w in updates if w.promote]
            if promoted:
                # Announced today: it enters today's listings as a new paper, once.
                conn.execute(
                    update(t.papers)
                    .where(t.papers.c.id == bindparam("_id"))
                    .values(announced=True, first_seen=bindparam("first_seen")),
                    [{"_id": w.paper_id, "first_seen": now} for w in promoted],
                )
            for w in writes:
                if w.paper_id is not None:
                    ids[w.data.key] = w.paper_id
            snapshots = [
                {
                    "paper_id": ids[w.data.key],
                    "observed": now,
                    "source": source,
                    "upvotes": w.data.upvotes,
                    "comments": w.data.comments,
                }
                for w in writes
                if w.signals_changed and (w.data.upvotes is not None or w.data.comments is not None)
            ]
            if snapshots:
                conn.execute(
                    self._insert(t.paper_signals).on_conflict_do_nothing(),  # type: ignore[attr-defined]
                    snapshots,
                )
            changed = {w.data.key for w in updates}
            links = [
                {"paper_id": ids[w.data.key], "source": source, "first_seen": now, "last_seen": now}
                for w in writes
                if w.new_link or w.data.key in changed
            ]
            if links:
                stmt = self._insert(t.paper_sources)
                stmt = stmt.on_conflict_do_update(  # type: ignore[attr-defined]
                    index_elements=["paper_id", "source"],
                    set_={"last_seen": stmt.excluded.last_seen},  # type: ignore[attr-defined]
                )
                conn.execute(stmt, links)
        return ids

    def _velocities(self, conn: Connection, ids: Sequence[int]) -> dict[int, float]:
        """Upvotes gained per hour, from each paper's signal snapshots of its latest day."""
        history: dict[int, list[tuple[datetime, int]]] = {}
        for start in range(0, len(ids), 500):
            q = (
                select(
                    t.paper_signals.c.paper_id,
                    t.paper_signals.c.observed,
                    t.paper_signals.c.upvotes,
                )
                .where(
                    t.paper_signals.c.paper_id.in_(ids[start : start + 500]),
                    t.paper_signals.c.upvotes.is_not(None),
                )
                .order_by(t.paper_signals.c.paper_id, t.paper_signals.c.observed)
            )
            for pid, observed, upvotes in conn.execute(q):
                history.setdefault(pid, []).append((observed, upvotes))
        return {
            pid: v for pid, snaps in history.items() if (v := upvote_velocity(snaps)) is not None
        }

    def recent_papers(self, since: datetime) -> list[Paper]:
        """Papers first seen at or after ``since``, oldest first, with their sources."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.papers)
                .where(t.papers.c.first_seen >= since, t.papers.c.announced.is_(True))
                .order_by(t.papers.c.first_seen, t.papers.c.id)
            ).all()
            ids = [r.id for r in rows]
            sources = self._sources_for(conn, ids)
            velocity = self._velocities(conn, ids)
            return [_paper(r, sources.get(r.id, ()), velocity.get(r.id)) for r in rows]

    def count_papers(self) -> int:
        """How many papers the store holds."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(t.papers)).scalar_one())

    def sent_paper_ids(
        self, subscriber_ids: Sequence[int], *, since: date | None = None
    ) -> dict[int, set[int]]:
        """For each subscriber, the ids of the papers their delivered editions dated ``since``
        or later carried (all of them without ``since``).

        A send passes the earliest date an edition holding one of the day's candidate papers
        can have (:func:`~newsletter.edition.build.history_since`): a reader's history grows by
        a digest a day, and only its tail can hold today's papers. The ``(subscriber_id,
        edition_date)`` index reads just that tail, a row per digest."""
        e = t.editions
        out: dict[int, set[int]] = {sid: set() for sid in subscriber_ids}
        with self.engine.connect() as conn:
            _by_key(conn)
            for start in range(0, len(subscriber_ids), 500):
                ids = list(subscriber_ids[start : start + 500])
                if self.dialect == "postgresql":
                    rows = conn.execute(_PG_HISTORY, {"ids": ids, "since": since or date.min})
                else:
                    q = select(e.c.subscriber_id, e.c.paper_ids).where(
                        e.c.subscriber_id.in_(ids), e.c.paper_ids.is_not(None)
                    )
                    if since is not None:
                        q = q.where(e.c.edition_date >= since)
                    rows = conn.execute(q)
                for sid, papers in rows:
                    out[sid].update(parse_paper_list(papers))
        return out

    # A reader's "more like this" / "less like this": one row per (subscriber, paper), a new
    # vote replacing the old one. Written by the web feedback page and `newsletter feedback`,
    # read by the manage page, the export and (votes_for, one query) the send path.

    def set_vote(
        self, subscriber_id: int, paper_id: int, value: int, topic: str | None, now: datetime
    ) -> None:
        """Record ``value`` (+1 more, -1 less) for the paper; replaces any earlier vote on it.

        Raises :class:`StoreError` when the subscriber or the paper does not exist.
        """
        if value not in (1, -1):
            raise ValueError(f"a vote is +1 or -1, not {value!r}")
        v = t.votes
        stmt = self._insert(v).values(
            subscriber_id=subscriber_id,
            paper_id=paper_id,
            value=value,
            topic=topic,
            created_at=now,
        )
        stmt = stmt.on_conflict_do_update(  # type: ignore[attr-defined]
            index_elements=["subscriber_id", "paper_id"],
            set_={"value": value, "topic": topic, "created_at": now},
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(stmt)
        except _SAError as e:
            raise StoreError(
                f"cannot record a vote of subscriber {subscriber_id} on paper {paper_id} "
                "(is either gone?)"
            ) from e

    def clear_vote(self, subscriber_id: int, paper_id: int) -> bool:
        """Withdraw the reader's vote on the paper; True when there was one."""
        v = t.votes
        with self.engine.begin() as conn:
            res = conn.execute(
                delete(v).where(v.c.subscriber_id == subscriber_id, v.c.paper_id == paper_id)
            )
            return res.rowcount == 1

    def _votes_query(self) -> Any:
        v, p = t.votes, t.papers
        return (
            select(
                v.c.subscriber_id,
                p.c.key,
                v.c.paper_id,
                p.c.title,
                v.c.value,
                v.c.topic,
                v.c.created_at,
            )
            .join(p, p.c.id == v.c.paper_id)
            .order_by(v.c.subscriber_id, v.c.created_at.desc(), v.c.id.desc())
        )

    def votes_of(self, subscriber_id: int) -> list[Vote]:
        """The reader's votes, newest first."""
        return list(self.votes_for([subscriber_id]).get(subscriber_id, ()))

    def votes_for(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[Vote, ...]]:
        """Votes of many readers (newest first), one query per 500 of them; readers without
        votes are left out of the mapping."""
        ids = list(dict.fromkeys(subscriber_ids))
        found: dict[int, list[Vote]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(ids), 500):
                q = self._votes_query().where(t.votes.c.subscriber_id.in_(ids[start : start + 500]))
                for r in conn.execute(q):
                    found.setdefault(r.subscriber_id, []).append(
                        Vote(r.key, r.paper_id, r.title, r.value, r.topic, r.created_at)
                    )
        return {sid: tuple(votes) for sid, votes in found.items()}

    def voted_papers(self, since: datetime, limit: int = 20_000) -> list[Paper]:
        """Papers readers voted on since ``since``, most recently voted first, at most ``limit``:
        the examples a run's reader profiles can use."""
        v = t.votes
        latest = func.max(v.c.created_at)
        with self.engine.connect() as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    select(v.c.paper_id)
                    .where(v.c.created_at >= since)
                    .group_by(v.c.paper_id)
                    .order_by(latest.desc(), v.c.paper_id)
                    .limit(limit)
                )
            ]
            out: list[Paper] = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                rows = conn.execute(select(t.papers).where(t.papers.c.id.in_(chunk))).all()
                sources = self._sources_for(conn, [r.id for r in rows])
                out.extend(_paper(r, sources.get(r.id, ())) for r in rows)
            return out

    def paper_by_key(self, key: str) -> Paper | None:
        """One stored paper by its key (a versionless arXiv id, ``doi:...``, ``url:...``)."""
        return self.papers_by_keys([key]).get(key)

    def edition_papers(self, edition_id: int) -> list[Paper]:
        """The papers a sent edition carried, in digest order, with their sources."""
        with self.engine.connect() as conn:
            ids = parse_paper_list(
                conn.execute(
                    select(t.editions.c.paper_ids).where(t.editions.c.id == edition_id)
                ).scalar_one_or_none()
            )
            rows = (
                {r.id: r for r in conn.execute(select(t.papers).where(t.papers.c.id.in_(ids)))}
                if ids
                else {}
            )
            sources = self._sources_for(conn, list(rows))
            return [_paper(rows[i], sources.get(i, ())) for i in ids if i in rows]

    def edition_layout(self, edition_id: int) -> str | None:
        """What a sent edition showed besides its papers (``editions.layout``), or ``None``
        (not sent, or sent before layouts were recorded)."""
        with self.engine.connect() as conn:
            found: str | None = conn.execute(
                select(t.editions.c.layout).where(t.editions.c.id == edition_id)
            ).scalar_one_or_none()
            return found

    def papers_first_seen_between(self, start: datetime, end: datetime) -> list[Paper]:
        """Announced papers first seen in ``[start, end)``, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.papers)
                .where(
                    t.papers.c.first_seen >= start,
                    t.papers.c.first_seen < end,
                    t.papers.c.announced.is_(True),
                )
                .order_by(t.papers.c.first_seen, t.papers.c.id)
            ).all()
            sources = self._sources_for(conn, [r.id for r in rows])
            return [_paper(r, sources.get(r.id, ())) for r in rows]
