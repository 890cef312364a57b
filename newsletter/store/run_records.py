"""Run records: starting, heartbeating, settling and finishing ingest and send runs, and the
leases that tell a stale run from a live one (a mixin of the Store)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    and_,
    func,
    or_,
    select,
    update,
)

from newsletter.models import RunRecord
from newsletter.store import tables as t
from newsletter.store.base import StoreBase


class RunStore(StoreBase):
    """Run records and their heartbeats (leases)."""

    def start_run(self, kind: str, now: datetime, *, owner: str | None = None) -> int:
        """Record a run as ``running``; ``owner`` (its process) goes into the run's lease, which
        :meth:`beat_run` renews while it is alive."""
        lease = {"lease": {"owner": owner, "heartbeat": now.isoformat()}} if owner else None
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    t.runs.insert()
                    .values(kind=kind, started=now, status="running", counts=lease)
                    .returning(t.runs.c.id)
                ).scalar_one()
            )

    def beat_run(self, run_id: int, owner: str, now: datetime) -> None:
        """Renew a running run's lease: its process is alive at ``now``."""
        lease = {"lease": {"owner": owner, "heartbeat": now.isoformat()}}
        with self.engine.begin() as conn:
            conn.execute(
                update(t.runs)
                .where(t.runs.c.id == run_id, t.runs.c.status == "running")
                .values(counts=lease)
            )

    def running_runs(self) -> list[RunRecord]:
        """Runs recorded as ``running`` (alive, or killed before they could say otherwise)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.runs).where(t.runs.c.status == "running").order_by(t.runs.c.id)
            ).all()
        return [
            RunRecord(r.id, r.kind, r.started, r.finished, r.status, r.counts or {}, r.error)
            for r in rows
        ]

    def ledger_of(self, owner_prefix: str, since: datetime) -> tuple[dict[str, int], list[str]]:
        """What runs whose ledger owner starts with ``owner_prefix`` did to editions since
        ``since``: a count per status, and their distinct errors (at most 20)."""
        e = t.editions
        mine = and_(
            e.c.owner.startswith(owner_prefix, autoescape=True),
            or_(e.c.claimed >= since, e.c.finished >= since),
        )
        with self.engine.connect() as conn:
            counts = conn.execute(select(e.c.status, func.count()).where(mine).group_by(e.c.status))
            by_status = {str(k): int(v) for k, v in counts}
            errors = conn.execute(
                select(e.c.last_error)
                .where(mine, e.c.last_error.is_not(None))
                .group_by(e.c.last_error)
                .order_by(e.c.last_error)
                .limit(20)
            ).scalars()
            return by_status, [str(x) for x in errors]

    def settle_run(
        self, run_id: int, status: str, at: datetime, counts: dict[str, Any], error: str | None
    ) -> bool:
        """End a run still recorded as ``running`` (one whose process is gone); False if it
        had ended meanwhile."""
        with self.engine.begin() as conn:
            started = conn.execute(
                select(t.runs.c.started).where(t.runs.c.id == run_id)
            ).scalar_one()
            done = conn.execute(
                update(t.runs)
                .where(t.runs.c.id == run_id, t.runs.c.status == "running")
                .values(
                    status=status,
                    finished=at,
                    counts=counts,
                    error=error,
                    duration=max(0.0, (at - started).total_seconds()),
                )
            )
            return bool(done.rowcount)

    def finish_run(
        self,
        run_id: int,
        status: str,
        now: datetime,
        counts: dict[str, Any],
        error: str | None = None,
    ) -> None:
        """Record a run's end: its status, counts, error and duration."""
        with self.engine.begin() as conn:
            started = conn.execute(
                select(t.runs.c.started).where(t.runs.c.id == run_id)
            ).scalar_one()
            conn.execute(
                update(t.runs)
                .where(t.runs.c.id == run_id)
                .values(
                    status=status,
                    finished=now,
                    counts=counts,
                    error=error,
                    duration=(now - started).total_seconds(),
                )
            )

    def last_runs(self, limit: int = 10, kind: str | None = None) -> list[RunRecord]:
        """The most recent runs (of ``kind`` when given), newest first."""
        with self.engine.connect() as conn:
            q = select(t.runs)
            if kind is not None:
                q = q.where(t.runs.c.kind == kind)
            rows = conn.execute(q.order_by(t.runs.c.id.desc()).limit(limit)).all()
        return [
            RunRecord(r.id, r.kind, r.started, r.finished, r.status, r.counts or {}, r.error)
            for r in rows
        ]
