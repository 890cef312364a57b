"""An in-memory :class:`~newsletter.store.protocol.SendStore`: the send path without a database.

:class:`MemoryStore` keeps papers, subscribers, votes, vectors, the edition ledger and runs in
dictionaries behind one lock. Its ledger (:mod:`.memory_ledger`) follows the SQL ledger's rules
transition by transition; ``tests/store/test_ledger_contract.py`` runs the same contract over
it, SQLite and PostgreSQL.

Besides the send path's interface it has the few writes a test needs to fill it
(:meth:`MemoryStore.write_papers`, :meth:`~MemoryStore.add_subscriber`,
:meth:`~MemoryStore.set_status`, :meth:`~MemoryStore.set_vote`), with the Store's signatures.
Nothing survives the process: it is for tests, demos and benchmarks of the code above the store.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from newsletter.errors import StoreError
from newsletter.models import (
    Frequency,
    OwnTopic,
    Paper,
    PaperWrite,
    RunRecord,
    Subscriber,
    SubscriberStatus,
    Vote,
)
from newsletter.store.memory_ledger import MemoryLedger
from newsletter.store.papers import upvote_velocity
from newsletter.store.tables import parse_paper_list


@dataclass(slots=True)
class _Run:
    kind: str
    started: datetime
    status: str
    counts: dict[str, Any] | None
    finished: datetime | None = None
    error: str | None = None
    duration: float | None = None


class MemoryStore(MemoryLedger):
    """Everything a send reads and writes, in memory; safe to share between threads."""

    def __init__(self) -> None:
        super().__init__()
        self._papers: dict[int, Paper] = {}
        self._paper_keys: dict[str, int] = {}
        self._links: dict[int, dict[str, datetime]] = {}
        self._signals: dict[int, dict[datetime, int | None]] = {}
        self._emails: dict[str, int] = {}
        self._votes: dict[tuple[int, int], tuple[int, int, str | None, datetime]] = {}
        self._vectors: dict[tuple[str, str], tuple[bytes, datetime]] = {}
        self._runs: dict[int, _Run] = {}
        self._own: dict[int, OwnTopic] = {}

    def _with_links(self, paper: Paper, velocity: bool = False) -> Paper:
        links = self._links.get(paper.id, {})
        sources = tuple(sorted(links, key=lambda s: (links[s], s)))
        speed = None
        if velocity:
            snaps = sorted(
                (o, u) for o, u in self._signals.get(paper.id, {}).items() if u is not None
            )
            speed = upvote_velocity(snaps) if snaps else None
        return replace(paper, sources=sources, upvote_velocity=speed)

    # ------------------------------------------------------------------ filling it

    def write_papers(
        self, source: str, writes: Sequence[PaperWrite], now: datetime
    ) -> dict[str, int]:
        """Apply ingest decisions (:meth:`Store.write_papers <newsletter.store.papers.PaperStore.write_papers>`)."""
        ids: dict[str, int] = {}
        with self._atomic():
            new = [w.data.key for w in writes if w.paper_id is None]
            if len(set(new)) < len(new) or any(k in self._paper_keys for k in new):
                raise StoreError("a paper to insert is stored already")
            if any(w.paper_id not in self._papers for w in writes if w.paper_id is not None):
                raise StoreError("a paper to update is not stored")
            for w in writes:
                d = w.data
                if w.paper_id is None:
                    pid = self._next("paper")
                    self._paper_keys[d.key] = pid
                    self._papers[pid] = Paper(
                        pid,
                        d.key,
                        d.title,
                        d.abstract,
                        tuple(d.authors),
                        tuple(d.categories),
                        d.url,
                        d.pdf_url,
                        d.code_url,
                        d.version,
                        d.published,
                        now,
                        now,
                        (),
                        upvotes=d.upvotes,
                        comments=d.comments,
                        announced=w.announced,
                        code_stars=d.code_stars,
                    )
                else:
                    pid = w.paper_id
                    p = self._papers[pid]
                    if w.metadata_changed:
                        p = replace(
                            p,
                            title=d.title,
                            abstract=d.abstract,
                            authors=tuple(d.authors),
                            categories=tuple(d.categories),
                            url=d.url,
                            pdf_url=d.pdf_url,
                            code_url=d.code_url,
                            version=d.version,
                            published=d.published,
                            updated=now,
                        )
                    if w.signals_changed:
                        p = replace(
                            p, upvotes=d.upvotes, comments=d.comments, code_stars=d.code_stars
                        )
                    if w.promote:
                        p = replace(p, announced=True, first_seen=now)
                    self._papers[pid] = p
                ids[d.key] = pid
                if w.signals_changed and (d.upvotes is not None or d.comments is not None):
                    self._signals.setdefault(pid, {}).setdefault(now, d.upvotes)
                changed = w.paper_id is not None and (
                    w.metadata_changed or w.signals_changed or w.promote
                )
                if w.new_link or changed:
                    self._links.setdefault(pid, {}).setdefault(source, now)
        return ids

    def add_subscriber(
        self,
        email: str,
        *,
        name: str = "",
        topics: Sequence[str] = (),
        timezone: str = "UTC",
        status: SubscriberStatus = SubscriberStatus.ACTIVE,
        now: datetime,
        consent: dict[str, Any] | None = None,
    ) -> tuple[Subscriber, bool]:
        """Insert a subscriber, or return the existing one. The bool says whether it was created."""
        with self._atomic():
            if email in self._emails:
                return self._subs[self._emails[email]], False
            sid = self._next("subscriber")
            sub = Subscriber(
                sid,
                email,
                name,
                status,
                tuple(sorted(dict.fromkeys(topics))),
                timezone,
                now,
                frequency=Frequency.DAILY,
                status_changed=now,
            )
            self._emails[email], self._subs[sid], self._failures[sid] = sid, sub, 0
            return sub, True

    def set_status(self, email: str, status: SubscriberStatus, now: datetime) -> bool:
        """Set the status of the subscriber with exactly this address; False if there is none."""
        with self._atomic():
            sid = self._emails.get(email)
            if sid is None:
                return False
            self._put_sub(
                replace(self._subs[sid], status=status, status_changed=now), self._failures[sid]
            )
            return True

    def get_subscriber(self, email: str) -> Subscriber | None:
        """The subscriber with exactly this address, or ``None``."""
        with self._lock:
            sid = self._emails.get(email)
            return None if sid is None else self._subs[sid]

    def set_vote(
        self, subscriber_id: int, paper_id: int, value: int, topic: str | None, now: datetime
    ) -> None:
        """Record ``value`` (+1 more, -1 less) for the paper; replaces any earlier vote on it."""
        if value not in (1, -1):
            raise ValueError(f"a vote is +1 or -1, not {value!r}")
        with self._lock:
            if subscriber_id not in self._subs or paper_id not in self._papers:
                raise StoreError(
                    f"cannot record a vote of subscriber {subscriber_id} on paper {paper_id} "
                    "(is either gone?)"
                )
            self._votes[subscriber_id, paper_id] = (self._next("vote"), value, topic, now)

    # ------------------------------------------------------------------ PaperReads

    def papers_by_keys(self, keys: Iterable[str]) -> dict[str, Paper]:
        """The stored papers with these keys, with their sources; unknown keys are left out."""
        with self._lock:
            found = (self._paper_keys.get(k) for k in keys)
            return {self._papers[p].key: self._with_links(self._papers[p]) for p in found if p}

    def recent_papers(self, since: datetime) -> list[Paper]:
        """Papers first seen at or after ``since``, oldest first, with their sources."""
        with self._lock:
            papers = [p for p in self._papers.values() if p.announced and p.first_seen >= since]
            papers.sort(key=lambda p: (p.first_seen, p.id))
            return [self._with_links(p, velocity=True) for p in papers]

    def sent_paper_ids(
        self, subscriber_ids: Sequence[int], *, since: date | None = None
    ) -> dict[int, set[int]]:
        """For each subscriber, the ids of the papers their editions dated ``since`` or later
        carried (all of them without ``since``)."""
        out: dict[int, set[int]] = {sid: set() for sid in subscriber_ids}
        with self._lock:
            for sid in out:
                for day, eid in self._by_sub.get(sid, {}).items():
                    if since is None or day >= since:
                        out[sid].update(parse_paper_list(self._editions[eid].paper_ids))
        return out

    def votes_for(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[Vote, ...]]:
        """Votes of many readers (newest first); readers without votes are left out."""
        wanted = set(subscriber_ids)
        found: dict[int, list[tuple[datetime, int, Vote]]] = {}
        with self._lock:
            for (sid, pid), (vid, value, topic, at) in self._votes.items():
                if sid in wanted:
                    p = self._papers[pid]
                    vote = Vote(p.key, pid, p.title, value, topic, at)
                    found.setdefault(sid, []).append((at, vid, vote))
        return {
            sid: tuple(v for _, _, v in sorted(votes, key=lambda x: (x[0], x[1]), reverse=True))
            for sid, votes in found.items()
        }

    def add_own_topic(
        self,
        subscriber_id: int,
        text: str,
        text_hash: str,
        examples: Sequence[str],
        now: datetime,
        *,
        limit: int,
    ) -> OwnTopic | None:
        """Add a reader's own topic last (:meth:`Store.add_own_topic
        <newsletter.store.own_topics.OwnTopicStore.add_own_topic>`)."""
        with self._lock:
            mine = [o for o in self._own.values() if o.subscriber_id == subscriber_id]
            same = next((o for o in mine if o.text_hash == text_hash), None)
            if same is not None or len(mine) >= limit:
                return same
            tid = max(self._own, default=0) + 1
            own = OwnTopic(
                tid, subscriber_id, len(mine) + 1, text, text_hash, tuple(examples), now, now
            )
            self._own[tid] = own
            return own

    def own_topics_of(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[OwnTopic, ...]]:
        """Each of these readers' own topics in their order (readers without any left out)."""
        wanted = set(subscriber_ids)
        out: dict[int, list[OwnTopic]] = {}
        with self._lock:
            for own in sorted(self._own.values(), key=lambda o: (o.position, o.id)):
                if own.subscriber_id in wanted:
                    out.setdefault(own.subscriber_id, []).append(own)
        return {k: tuple(v) for k, v in out.items()}

    def own_topic_readers(self) -> list[int]:
        """The active readers that have own topics, by id."""
        with self._lock:
            return sorted(
                {
                    o.subscriber_id
                    for o in self._own.values()
                    if self._subs[o.subscriber_id].status is SubscriberStatus.ACTIVE
                }
            )

    def voted_papers(self, since: datetime, limit: int = 20_000) -> list[Paper]:
        """Papers readers voted on since ``since``, most recently voted first, at most ``limit``."""
        latest: dict[int, datetime] = {}
        with self._lock:
            for (_, pid), (_, _, _, at) in self._votes.items():
                if at >= since and (pid not in latest or at > latest[pid]):
                    latest[pid] = at
            order = sorted(latest, key=lambda pid: (-latest[pid].timestamp(), pid))[:limit]
            return [self._with_links(self._papers[pid]) for pid in order]

    # ------------------------------------------------------------------ Vectors

    def vectors(self, model: str, hashes: Collection[str]) -> dict[str, bytes]:
        """The stored vectors of ``model`` for these text hashes; unknown hashes are left out."""
        with self._lock:
            got = ((h, self._vectors.get((model, h))) for h in hashes)
            return {h: v[0] for h, v in got if v is not None}

    def put_vectors(self, model: str, vectors: Mapping[str, bytes], now: datetime) -> int:
        """Keep ``vectors`` (text hash → bytes) of ``model``; returns how many were new."""
        with self._lock:
            new = [h for h in vectors if (model, h) not in self._vectors]
            for h in new:
                self._vectors[model, h] = (vectors[h], now)
            return len(new)

    def prune_vectors(self, before: datetime) -> int:
        """Delete vectors stored before ``before``; returns how many."""
        with self._lock:
            old = [k for k, (_, at) in self._vectors.items() if at < before]
            for k in old:
                del self._vectors[k]
            return len(old)

    # ------------------------------------------------------------------ SubscriberReads

    def iter_subscribers(
        self,
        status: SubscriberStatus | None = None,
        *,
        batch: int = 1000,
        email: str | None = None,
        ids: Sequence[int] | None = None,
    ) -> Iterator[list[Subscriber]]:
        """Subscribers in id order, in batches."""
        with self._lock:
            chosen = sorted(set(ids)) if ids is not None else sorted(self._subs)
            subs = [
                s
                for i in chosen
                if (s := self._subs.get(i)) is not None
                and (status is None or s.status is status)
                and (email is None or s.email == email)
            ]
        for start in range(0, len(subs), batch):
            yield subs[start : start + batch]

    def count_subscribers(self, status: SubscriberStatus | None = None) -> int:
        """How many subscribers there are (only ``status`` when given)."""
        with self._lock:
            return sum(status is None or s.status is status for s in self._subs.values())

    # ------------------------------------------------------------------ ledger reads, runs

    def start_run(self, kind: str, now: datetime, *, owner: str | None = None) -> int:
        """Record a run as ``running``, with ``owner`` in its lease."""
        lease = {"lease": {"owner": owner, "heartbeat": now.isoformat()}} if owner else None
        with self._lock:
            run_id = self._next("run")
            self._runs[run_id] = _Run(kind, now, "running", lease)
            return run_id

    def beat_run(self, run_id: int, owner: str, now: datetime) -> None:
        """Renew a running run's lease: its process is alive at ``now``."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.status == "running":
                run.counts = {"lease": {"owner": owner, "heartbeat": now.isoformat()}}

    def _record(self, run_id: int, run: _Run) -> RunRecord:
        counts = json.loads(json.dumps(run.counts)) if run.counts else {}
        return RunRecord(run_id, run.kind, run.started, run.finished, run.status, counts, run.error)

    def running_runs(self) -> list[RunRecord]:
        """Runs recorded as ``running``."""
        with self._lock:
            return [
                self._record(i, r) for i, r in sorted(self._runs.items()) if r.status == "running"
            ]

    def ledger_of(self, owner_prefix: str, since: datetime) -> tuple[dict[str, int], list[str]]:
        """What runs whose ledger owner starts with ``owner_prefix`` did to editions since
        ``since``: a count per status, and their distinct errors (at most 20)."""
        by_status: dict[str, int] = {}
        errors: set[str] = set()
        with self._lock:
            for r in self._editions.values():
                if r.owner.startswith(owner_prefix) and (
                    r.claimed >= since or (r.finished is not None and r.finished >= since)
                ):
                    by_status[r.status] = by_status.get(r.status, 0) + 1
                    if r.last_error is not None:
                        errors.add(r.last_error)
        return by_status, sorted(errors)[:20]

    def _end(
        self, run: _Run, status: str, at: datetime, counts: dict[str, Any], error: str | None
    ) -> None:
        run.status, run.finished, run.error = status, at, error
        run.counts = json.loads(json.dumps(counts))
        run.duration = (at - run.started).total_seconds()

    def settle_run(
        self, run_id: int, status: str, at: datetime, counts: dict[str, Any], error: str | None
    ) -> bool:
        """End a run still recorded as ``running``; False if it had ended meanwhile."""
        with self._lock:
            run = self._runs[run_id]
            if run.status != "running":
                return False
            self._end(run, status, at, counts, error)
            run.duration = max(0.0, run.duration or 0.0)
            return True

    def finish_run(
        self,
        run_id: int,
        status: str,
        now: datetime,
        counts: dict[str, Any],
        error: str | None = None,
    ) -> None:
        """Record a run's end: its status, counts, error and duration."""
        with self._lock:
            self._end(self._runs[run_id], status, now, counts, error)

    def last_runs(self, limit: int = 10, kind: str | None = None) -> list[RunRecord]:
        """The most recent runs (of ``kind`` when given), newest first."""
        with self._lock:
            runs = [(i, r) for i, r in self._runs.items() if kind is None or r.kind == kind]
            return [self._record(i, r) for i, r in sorted(runs, key=lambda x: -x[0])[:limit]]


if TYPE_CHECKING:  # mypy: a MemoryStore is a SendStore
    from newsletter.store.protocol import SendStore

    def _memory_is_a_send_store(store: MemoryStore) -> SendStore:
        return store
