"""The Store: every query newsletter runs, on SQLite and PostgreSQL alike.

Why one long module: today it is the single class behind which all SQL lives. Splitting it by
domain (papers, subscribers and consent, votes, ledger, runs, sources) behind one ``Store``
protocol is the store part of the send-path redesign (issue 18), done together with the
ledger's fast paths so they are defined once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    ARRAY,
    Connection,
    Date,
    Engine,
    Insert,
    Integer,
    Table,
    Text,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.exc import SQLAlchemyError as _SAError

from newsletter.errors import (
    DatabaseReadOnly,
    DatabaseUnavailable,
    NotInstalled,
    StoreError,
    UnsupportedDatabase,
)
from newsletter.models import (
    EditionStatus,
    Frequency,
    NewSubscriber,
    Paper,
    PaperData,
    Subscriber,
    SubscriberStatus,
    Vote,
)
from newsletter.store import tables as t
from newsletter.store.bounces import BounceStore
from newsletter.store.retry import DEFAULT_WINDOW, is_disconnect, retry_on_disconnect

_T = TypeVar("_T")

MIGRATIONS = Path(__file__).parent / "migrations"


def normalize_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (the driver we ship), not psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


SUPPORTED = {"sqlite": "sqlite:///path/to/newsletter.db", "postgresql": "postgresql+psycopg://…"}


def safe_url(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: show it as given, it has no parsable password
        return url


def _create_engine(url: str, where: str, **engine_kw: Any) -> Engine:
    """``create_engine`` for a database newsletter supports, with its driver installed."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    shown = safe_url(url)
    supported = " or ".join(SUPPORTED.values())
    try:
        backend = make_url(url).get_backend_name()
    except ArgumentError as e:
        raise UnsupportedDatabase(
            f"{where}: {shown!r} is not a database URL; use {supported}"
        ) from e
    if backend not in SUPPORTED:
        raise UnsupportedDatabase(
            f"{where}: {shown}: newsletter does not support {backend} databases; use {supported}"
        )
    if backend == "postgresql":
        # a pooled connection the server ended (restart, pg_terminate_backend) is replaced at
        # checkout instead of failing the statement that drew it
        engine_kw.setdefault("pool_pre_ping", True)
    try:
        return create_engine(url, **engine_kw)
    except NoSuchModuleError as e:
        raise UnsupportedDatabase(
            f"{where}: {shown}: unknown database driver; use {supported}"
        ) from e
    except ImportError as e:
        if backend == "postgresql":
            raise NotInstalled(
                f"{where}: {shown} needs the PostgreSQL driver (psycopg), which is not installed: "
                "pip install 'newsletter[postgres]'"
            ) from e
        raise NotInstalled(f"{where}: {shown} needs the module {e.name}, not installed") from e


def _one_line(text: str) -> str:
    return "; ".join(p.strip() for p in text.splitlines() if p.strip())


def database_error(url: str, error: BaseException, where: str = "database.url") -> StoreError:
    """The :class:`StoreError` that says, in one line, why the database at ``url`` failed and
    what to do; ``where`` names the setting the URL came from."""
    orig = getattr(error, "orig", None) or error
    reason = _one_line(str(orig)) or type(orig).__name__
    shown = safe_url(url)
    if url.startswith("sqlite"):
        name = str(getattr(orig, "sqlite_errorname", ""))
        path = url.split("///", 1)[-1].split("?", 1)[0].removeprefix("file:")
        if name == "SQLITE_READONLY" or "readonly database" in reason:
            return DatabaseReadOnly(
                f"the database file {path} is read-only ({reason}); make it and its folder "
                f"writable by this user (SQLite writes a -wal file next to it), or point {where} "
                "at a writable copy"
            )
        if name == "SQLITE_CANTOPEN" or "unable to open database" in reason:
            return DatabaseUnavailable(
                f"cannot open the database file {path} ({reason}); check that its folder exists "
                f"and this user may write there, or fix {where}"
            )
        return StoreError(f"database {shown}: {reason}")
    code = str(getattr(orig, "sqlstate", "") or "")
    if code == "3D000" or ("does not exist" in reason and "database" in reason):
        database = url.rsplit("/", 1)[-1].split("?", 1)[0]
        return DatabaseUnavailable(
            f"the database {shown} does not exist ({reason}); create it "
            f"(createdb {database}) or fix {where}"
        )
    if code in ("28P01", "28000"):
        return DatabaseUnavailable(
            f"the database {shown} refused the login ({reason}); fix the user or password in "
            f"{where}"
        )
    if code.startswith("08") or isinstance(orig, OSError) or "connection" in reason.lower():
        return DatabaseUnavailable(
            f"cannot connect to the database {shown} ({reason}); start the server or fix {where}"
        )
    return StoreError(f"database {shown}: {reason}")


def content_hash(p: PaperData | Paper) -> str:
    """What decides whether an update to a paper's metadata matters."""
    blob = json.dumps(
        [
            p.title,
            p.abstract,
            list(p.authors),
            sorted(p.categories),
            p.version,
            p.pdf_url,
            p.code_url,
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class PaperWrite:
    """One row to insert or update, decided by :mod:`newsletter.ingest`."""

    data: PaperData
    paper_id: int | None
    """``None`` inserts a new paper; otherwise the stored paper to update."""
    metadata_changed: bool
    signals_changed: bool
    announced: bool = True
    """For inserts: False when the paper is only an update or backfill and must not count as new."""
    new_link: bool = True
    """The paper is not yet linked to this source (always true for inserts)."""
    promote: bool = False
    """For updates: a paper stored unannounced (a backfill) that a listing now announces."""


@dataclass(frozen=True, slots=True)
class EditionClaim:
    id: int
    subscriber_id: int
    edition_date: date
    message_id: str
    resumed: bool
    """True when this run took over a claim that an earlier, interrupted run made."""
    earlier: EditionStatus | None = None
    """The row's status when this run took it over: ``sending`` (in flight when its run was
    interrupted), ``unknown`` or ``resend`` (a re-send of a message that may have arrived)."""

    @property
    def may_have_arrived(self) -> bool:
        """An earlier attempt with this Message-ID may have reached the reader."""
        return self.earlier in _MAY_HAVE_ARRIVED


@dataclass(frozen=True, slots=True)
class LedgerOp:
    """One write a sender makes to the ledger; see :meth:`Store.apply_ledger`."""

    kind: Literal["begin", "mark", "release", "permanent_failure"]
    edition_id: int = 0
    subscriber_id: int = 0
    owner: str = ""
    status: EditionStatus | None = None
    error: str | None = None
    paper_ids: tuple[int, ...] = ()
    limit: int = 0


@dataclass(frozen=True, slots=True)
class EditionRecord:
    id: int
    subscriber_id: int
    email: str
    edition_date: date
    status: EditionStatus
    message_id: str
    attempts: int
    item_count: int
    last_error: str | None
    claimed: datetime
    finished: datetime | None


@dataclass(frozen=True, slots=True)
class SourceState:
    source: str
    etag: str | None = None
    last_modified: str | None = None
    last_fetch: datetime | None = None
    last_success: datetime | None = None
    last_error: str | None = None
    last_count: int | None = None
    consecutive_failures: int = 0


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: int
    kind: str
    started: datetime
    finished: datetime | None
    status: str
    counts: dict[str, Any]
    error: str | None


class Store(BounceStore):
    """All persistence. Construct with a SQLAlchemy URL; call :meth:`upgrade` once to migrate."""

    def __init__(
        self,
        url: str,
        *,
        engine: Engine | None = None,
        where: str = "database.url",
        reconnect_seconds: float = DEFAULT_WINDOW,
        **engine_kw: Any,
    ) -> None:
        self.url = normalize_url(url)
        self.where = where
        self.reconnect_seconds = reconnect_seconds
        """How long a ledger write waits for a lost database to come back (:mod:`.retry`)."""
        if engine is None:
            engine = _create_engine(self.url, where, **engine_kw)
            if self.url.startswith("sqlite:///") and ":memory:" not in self.url:
                path = self.url.removeprefix("sqlite:///")
                if not path.startswith("file:"):  # a file: URI names an existing file
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.engine = engine
        self._sent_papers_stmt: Insert | None = None
        self._claim_stmt: Insert | None = None
        self._datetime_bind: Callable[[datetime], Any] | None = None
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        elif self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "connect", _postgres_session)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def ledger_connection(self) -> Connection | None:
        """PostgreSQL: an autocommit connection for the sender's one-statement group commits,
        planned for key lookups (``None`` on SQLite, whose writer uses its own transactions).

        Every ledger statement finds its rows by primary key. On a fresh database the editions
        table has no statistics and starts empty, so the planner would read it whole for each
        statement; as the edition fills it, that grows with the square of its subscribers. This
        connection tells the planner to prefer the indexes.
        """
        if self.dialect != "postgresql":
            return None
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("SET enable_seqscan = off")
        return conn

    def error(self, error: BaseException) -> StoreError:
        """A database error as one line naming this database and what to do."""
        return database_error(self.url, error, self.where)

    def _gone(self, error: BaseException) -> StoreError:
        reason = _one_line(str(getattr(error, "orig", None) or error)) or type(error).__name__
        return DatabaseUnavailable(
            f"lost the connection to the database {safe_url(self.url)} and it did not come back "
            f"within {self.reconnect_seconds:.0f} s ({reason}); start it or fix {self.where}, then "
            "send again: editions already sent are not sent twice"
        )

    def _retrying(self, run: Callable[[], _T], conn: Connection, *, autocommit: bool = False) -> _T:
        """``run()`` again after ``conn`` was lost (the ledger's writes are idempotent).

        ``conn`` reconnects on its next use once invalidated; an ``autocommit`` one gets its
        isolation level back (a fresh DBAPI connection does not inherit it)."""

        def attempt() -> _T:
            if conn.invalidated:
                if conn.in_transaction():  # the lost transaction must be let go of first
                    conn.rollback()
                if autocommit:
                    conn.execution_options(isolation_level="AUTOCOMMIT")
            try:
                return run()
            except _SAError:
                raise
            except Exception as e:  # a statement run on the driver connection itself
                if self._driver_lost(e, conn):
                    conn.invalidate(e)
                raise

        return retry_on_disconnect(
            attempt,
            gave_up=self._gone,
            lost=lambda e: is_disconnect(e) or conn.invalidated,
            window=self.reconnect_seconds,
        )

    def _driver_lost(self, error: Exception, conn: Connection) -> bool:
        dbapi = self.engine.dialect.loaded_dbapi
        if not isinstance(error, dbapi.Error) or conn.invalidated:
            return False
        if is_disconnect(error):
            return True
        try:
            raw = conn.connection.dbapi_connection
        except _SAError:
            return True
        return bool(self.engine.dialect.is_disconnect(error, raw, None))

    def check_connection(self) -> None:
        """Open one connection; raise :class:`DatabaseUnavailable` (one line) when it fails."""
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except _SAError as e:
            raise self.error(e) from e

    # ------------------------------------------------------------------ schema

    def _alembic_config(self, connection: Connection) -> Any:
        from alembic.config import Config as AlembicConfig

        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = connection
        return cfg

    def upgrade(self, revision: str = "head") -> None:
        """Migrate the schema to ``revision`` (Alembic)."""
        from alembic import command

        try:
            with self.engine.connect() as conn:
                sqlite = self.dialect == "sqlite"
                if sqlite:  # a rebuilt table is dropped: that must not cascade to its children
                    conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
                    conn.commit()
                try:
                    with conn.begin():
                        command.upgrade(self._alembic_config(conn), revision)
                        if sqlite:
                            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                            if broken:
                                raise StoreError(
                                    f"migrating {self._safe_url()} would break references: "
                                    f"{broken[:5]}; nothing was changed"
                                )
                finally:
                    if sqlite:
                        conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                        conn.commit()
        except OperationalError as e:
            raise self.error(e) from e

    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def head_revision(self) -> str | None:
        from alembic.script import ScriptDirectory

        with self.engine.connect() as conn:
            return ScriptDirectory.from_config(self._alembic_config(conn)).get_current_head()

    def check_schema(self) -> None:
        """Raise :class:`StoreError` with the fix when the database is not migrated."""
        try:
            current = self.current_revision()
        except (OperationalError, ProgrammingError) as e:
            raise self.error(e) from e
        head = self.head_revision()
        if current != head:
            state = (
                "is empty" if current is None else f"is at revision {current}, code needs {head}"
            )
            raise StoreError(
                f"the database {self._safe_url()} {state}; run 'newsletter db upgrade' first"
            )

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def _claim_insert(self) -> Insert:
        """The claim: ``INSERT … ON CONFLICT DO NOTHING RETURNING``, built once per store."""
        if self._claim_stmt is None:
            e = t.editions
            self._claim_stmt = (
                self._insert(e)
                .on_conflict_do_nothing(index_elements=["subscriber_id", "edition_date"])  # type: ignore[attr-defined]
                .returning(e.c.id, e.c.subscriber_id, e.c.edition_date)
            )
        return self._claim_stmt

    def _sent_papers_insert(self) -> Insert:
        """``INSERT … ON CONFLICT DO NOTHING`` into ``sent_papers``, built once per store."""
        if self._sent_papers_stmt is None:
            self._sent_papers_stmt = self._insert(t.sent_papers).on_conflict_do_nothing()  # type: ignore[attr-defined]
        return self._sent_papers_stmt

    def _insert(self, table: Table) -> Insert:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)

    # ------------------------------------------------------------------ papers

    def papers_by_keys(self, keys: Iterable[str]) -> dict[str, Paper]:
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
                    .values(upvotes=bindparam("upvotes"), comments=bindparam("comments")),
                    [
                        {"_id": w.paper_id, "upvotes": w.data.upvotes, "comments": w.data.comments}
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
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(t.papers)).scalar_one())

    def sent_paper_ids(self, subscriber_ids: Sequence[int]) -> dict[int, set[int]]:
        """For each subscriber, the ids of every paper already placed in a sent digest."""
        out: dict[int, set[int]] = {sid: set() for sid in subscriber_ids}
        with self.engine.connect() as conn:
            _by_key(conn)
            for start in range(0, len(subscriber_ids), 500):
                q = select(t.sent_papers.c.subscriber_id, t.sent_papers.c.paper_id).where(
                    t.sent_papers.c.subscriber_id.in_(subscriber_ids[start : start + 500])
                )
                for sid, pid in conn.execute(q):
                    out[sid].add(pid)
        return out

    # ------------------------------------------------------------------ subscribers

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
        with self.engine.begin() as conn:
            stmt = (
                self._insert(t.subscribers)
                .values(
                    email=email,
                    name=name,
                    status=status.value,
                    timezone=timezone,
                    created=now,
                    status_changed=now,
                    permanent_failures=0,
                    consent=consent,
                )
                .on_conflict_do_nothing(index_elements=["email"])  # type: ignore[attr-defined]
                .returning(t.subscribers.c.id)
            )
            inserted = conn.execute(stmt).scalar()
            created = inserted is not None
            sid = (
                inserted
                if created
                else conn.execute(
                    select(t.subscribers.c.id).where(t.subscribers.c.email == email)
                ).scalar_one()
            )
            if created and topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": sid, "topic": tp} for tp in dict.fromkeys(topics)],
                )
        sub = self.get_subscriber(email)
        assert sub is not None
        return sub, created

    def set_topics(self, subscriber_id: int, topics: Sequence[str]) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == subscriber_id)
            )
            if topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": subscriber_id, "topic": tp} for tp in dict.fromkeys(topics)],
                )

    def set_status(self, email: str, status: SubscriberStatus, now: datetime) -> bool:
        with self.engine.begin() as conn:
            res = conn.execute(
                update(t.subscribers)
                .where(t.subscribers.c.email == email)
                .values(status=status.value, status_changed=now)
            )
            return res.rowcount == 1

    def remove_subscriber(
        self, email: str, *, forgotten: tuple[str, datetime] | None = None
    ) -> bool:
        """Delete a subscriber and everything recorded about them.

        ``forgotten``: a keyed hash of the address and the time, kept in ``forgotten`` so the
        address is not added back without a fresh confirmation (see :meth:`forgotten_at`).
        """
        with self.engine.begin() as conn:
            sid = conn.execute(
                select(t.subscribers.c.id).where(t.subscribers.c.email == email)
            ).scalar()
            if sid is None:
                return False
            for table in (t.sent_papers, t.subscriptions, t.editions, t.votes):
                conn.execute(delete(table).where(table.c.subscriber_id == sid))
            conn.execute(delete(t.subscribers).where(t.subscribers.c.id == sid))
            if forgotten is not None:
                key, at = forgotten
                conn.execute(delete(t.forgotten).where(t.forgotten.c.hash == key))
                conn.execute(t.forgotten.insert().values(hash=key, at=at))
            return True

    def forgotten_at(self, key: str) -> datetime | None:
        """When the address with this keyed hash was erased, or ``None``."""
        with self.engine.connect() as conn:
            at: datetime | None = conn.execute(
                select(t.forgotten.c.at).where(t.forgotten.c.hash == key)
            ).scalar()
            return at

    def any_forgotten(self) -> bool:
        """Whether any address was ever erased (and not confirmed again since)."""
        with self.engine.connect() as conn:
            return conn.execute(select(t.forgotten.c.hash).limit(1)).first() is not None

    def unforget(self, key: str) -> None:
        """Drop an erased address's hash: it confirmed again, and is a subscriber once more."""
        with self.engine.begin() as conn:
            conn.execute(delete(t.forgotten).where(t.forgotten.c.hash == key))

    def said_no(self, email: str) -> list[Subscriber]:
        """The unsubscribed or suppressed subscribers whose address is ``email`` but for letter
        case (found through the status index: those are few)."""
        gone = [SubscriberStatus.UNSUBSCRIBED.value, SubscriberStatus.SUPPRESSED.value]
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.subscribers)
                .where(
                    t.subscribers.c.status.in_(gone),
                    func.lower(t.subscribers.c.email) == func.lower(email),
                )
                .order_by(t.subscribers.c.id)
            ).all()
            topics = self._topics_for(conn, [r.id for r in rows])
        return [_subscriber(r, topics.get(r.id, ())) for r in rows]

    def import_lookup(
        self, emails: Sequence[str]
    ) -> tuple[
        dict[str, SubscriberStatus], dict[str, tuple[str, SubscriberStatus, datetime | None]]
    ]:
        """For a batch of addresses being imported: the status of each one present (exact
        address), and for each one that said no in any letter case (keyed by the lower-cased
        address) that row's address, status and since when. Two statements per batch."""
        gone = [SubscriberStatus.UNSUBSCRIBED.value, SubscriberStatus.SUPPRESSED.value]
        present: dict[str, SubscriberStatus] = {}
        said_no: dict[str, tuple[str, SubscriberStatus, datetime | None]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.subscribers.c.email, t.subscribers.c.status).where(
                    t.subscribers.c.email.in_(sorted(set(emails)))
                )
            ).all()
            present = {r.email: SubscriberStatus(r.status) for r in rows}
            # lower() on both sides, in SQL, as one-by-one adds compare (SQLite's lower() folds
            # ASCII letters only: an address matches here exactly when it would match there)
            no = conn.execute(
                text(_SAID_NO_SQLITE if self.dialect == "sqlite" else _SAID_NO_PG).columns(
                    t.subscribers.c.email, t.subscribers.c.status, t.subscribers.c.status_changed
                ),
                {
                    "gone1": gone[0],
                    "gone2": gone[1],
                    "emails": json.dumps(list(emails))
                    if self.dialect == "sqlite"
                    else list(emails),
                },
            ).all()
            for r in no:
                said_no.setdefault(
                    r.email.lower(), (r.email, SubscriberStatus(r.status), r.status_changed)
                )
        return present, said_no

    def forgotten_among(self, keys: Sequence[str]) -> dict[str, datetime]:
        """Which of these erased-address hashes the store holds, and when each was erased."""
        if not keys:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.forgotten.c.hash, t.forgotten.c.at).where(
                    t.forgotten.c.hash.in_(sorted(set(keys)))
                )
            ).all()
        return {r.hash: r.at for r in rows}

    def add_subscribers(self, rows: Sequence[NewSubscriber], now: datetime) -> int:
        """Insert subscribers that are not in the store yet, with their topics, in one
        transaction (a bulk import: no row may exist already). Returns how many were added."""
        if not rows:
            return 0
        values = [
            {
                "email": r.email,
                "name": r.name,
                "status": r.status.value,
                "status_changed": now,
                "timezone": r.timezone,
                "send_hour": r.send_hour,
                "frequency": r.frequency.value,
                "confirmed": now,
                "created": now,
                "permanent_failures": 0,
                "consent": {**r.consent, "history": [r.consent]},
            }
            for r in rows
        ]
        try:
            with self.engine.begin() as conn:
                if self.dialect == "postgresql":
                    ids = _pg_add_subscribers(conn, values, now)
                else:  # the sqlite3 cursor itself: SQLAlchemy's per-row binding costs more
                    stamp = self._sqlite_datetime(now)
                    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                    try:
                        cursor.executemany(
                            _SQLITE_ADD_SUBSCRIBER_SQL,
                            [
                                (
                                    v["email"],
                                    v["name"],
                                    v["status"],
                                    v["timezone"],
                                    v["send_hour"],
                                    v["frequency"],
                                    json.dumps(v["consent"]),
                                    stamp,
                                )
                                for v in values
                            ],
                        )
                    finally:
                        cursor.close()
                    found = {
                        email: sid
                        for email, sid in conn.execute(
                            select(t.subscribers.c.email, t.subscribers.c.id).where(
                                t.subscribers.c.email.in_([r.email for r in rows])
                            )
                        )
                    }
                    ids = [found[r.email] for r in rows]
                topics = [
                    (sid, tp)
                    for sid, r in zip(ids, rows, strict=True)
                    for tp in dict.fromkeys(r.topics)
                ]
                if topics and self.dialect == "postgresql":
                    rows_json = json.dumps([{"s": sid, "t": tp} for sid, tp in topics])
                    conn.execute(_PG_SUBSCRIPTIONS, {"rows": rows_json})
                elif topics:
                    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                    try:
                        cursor.executemany(
                            "INSERT INTO subscriptions (subscriber_id, topic) VALUES (?, ?)",
                            topics,
                        )
                    finally:
                        cursor.close()
        except _SAError as e:
            raise self.error(e) from e
        return len(ids)

    def get_subscriber(self, email: str) -> Subscriber | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(t.subscribers).where(t.subscribers.c.email == email)).first()
            if row is None:
                return None
            return _subscriber(row, self._topics_for(conn, [row.id]).get(row.id, ()))

    def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t.subscribers).where(t.subscribers.c.id == subscriber_id)
            ).first()
            if row is None:
                return None
            return _subscriber(row, self._topics_for(conn, [row.id]).get(row.id, ()))

    def _topics_for(self, conn: Connection, ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
        found: dict[int, list[str]] = {}
        _by_key(conn)
        q = (
            select(t.subscriptions.c.subscriber_id, t.subscriptions.c.topic)
            .where(t.subscriptions.c.subscriber_id.in_(ids))
            .order_by(t.subscriptions.c.subscriber_id, t.subscriptions.c.topic)
        )
        for sid, topic in conn.execute(q):
            found.setdefault(sid, []).append(topic)
        return {k: tuple(v) for k, v in found.items()}

    def iter_subscribers(
        self,
        status: SubscriberStatus | None = None,
        *,
        batch: int = 1000,
        email: str | None = None,
        ids: Sequence[int] | None = None,
    ) -> Iterator[list[Subscriber]]:
        """Subscribers in id order, in batches (memory stays flat however many there are).

        ``ids`` restricts the listing to those subscribers (a worker's chunk; keep it to a few
        thousand ids).
        """
        last = 0
        while True:
            with self.engine.connect() as conn:
                q = select(t.subscribers).where(t.subscribers.c.id > last)
                if status is not None:
                    q = q.where(t.subscribers.c.status == status.value)
                if email is not None:
                    q = q.where(t.subscribers.c.email == email)
                if ids is not None:
                    q = q.where(t.subscribers.c.id.in_(list(ids)))
                rows = conn.execute(q.order_by(t.subscribers.c.id).limit(batch)).all()
                if not rows:
                    return
                topics = self._topics_for(conn, [r.id for r in rows])
            yield [_subscriber(r, topics.get(r.id, ())) for r in rows]
            last = rows[-1].id

    def count_subscribers(self, status: SubscriberStatus | None = None) -> int:
        with self.engine.connect() as conn:
            q = select(func.count()).select_from(t.subscribers)
            if status is not None:
                q = q.where(t.subscribers.c.status == status.value)
            return int(conn.execute(q).scalar_one())

    def record_permanent_failure(self, subscriber_id: int, limit: int, now: datetime) -> bool:
        """Count a permanent failure; suppress the address at ``limit``. True when suppressed."""
        with self.engine.begin() as conn:
            return self._permanent_failure(conn, subscriber_id, limit, now)

    @staticmethod
    def _permanent_failure(conn: Connection, subscriber_id: int, limit: int, now: datetime) -> bool:
        conn.execute(
            update(t.subscribers)
            .where(t.subscribers.c.id == subscriber_id)
            .values(permanent_failures=t.subscribers.c.permanent_failures + 1)
        )
        res = conn.execute(
            update(t.subscribers)
            .where(
                and_(
                    t.subscribers.c.id == subscriber_id,
                    t.subscribers.c.permanent_failures >= limit,
                    t.subscribers.c.status == SubscriberStatus.ACTIVE.value,
                )
            )
            .values(status=SubscriberStatus.SUPPRESSED.value, status_changed=now)
        )
        return res.rowcount == 1

    # ------------------------------------------------------------------ subscribing (web, email)

    def confirm_subscriber(
        self,
        email: str,
        *,
        topics: Sequence[str],
        timezone: str,
        send_hour: int | None,
        frequency: Frequency,
        now: datetime,
        consent: dict[str, Any],
        name: str = "",
        status: SubscriberStatus = SubscriberStatus.ACTIVE,
    ) -> tuple[Subscriber, bool]:
        """Make ``email`` an active, confirmed subscriber with these choices (insert or update).

        ``status``: an import keeps a row's paused, unsubscribed or suppressed state. The
        consent record is appended to the subscriber's history (``consent["history"]``), so
        a re-subscription keeps the earlier ones. The bool says whether the row was created.
        """
        with self.engine.begin() as conn:
            row = conn.execute(
                select(t.subscribers.c.id, t.subscribers.c.consent).where(
                    t.subscribers.c.email == email
                )
            ).first()
            values: dict[str, Any] = {
                "status": status.value,
                "status_changed": now,
                "timezone": timezone,
                "send_hour": send_hour,
                "frequency": frequency.value,
                "confirmed": now,
                "permanent_failures": 0,
            }
            if row is None:
                record = {**consent, "history": [consent]}
                sid = conn.execute(
                    t.subscribers.insert()
                    .values(email=email, name=name, created=now, consent=record, **values)
                    .returning(t.subscribers.c.id)
                ).scalar_one()
            else:
                sid = row.id
                old = dict(row.consent or {})
                history = list(old.get("history") or ([old] if old else []))
                record = {**consent, "history": [*history, consent]}
                conn.execute(
                    update(t.subscribers)
                    .where(t.subscribers.c.id == sid)
                    .values(consent=record, **values)
                )
            conn.execute(delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == sid))
            if topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": sid, "topic": tp} for tp in dict.fromkeys(topics)],
                )
        sub = self.subscriber_by_id(sid)
        assert sub is not None
        return sub, row is None

    def update_preferences(
        self,
        subscriber_id: int,
        *,
        topics: Sequence[str],
        send_hour: int | None,
        frequency: Frequency,
        paused: bool,
        now: datetime,
        timezone: str | None = None,
        name: str | None = None,
    ) -> Subscriber | None:
        """Save a subscriber's choices (manage page, API, ``subscribers set``); pausing keeps
        everything else. ``timezone`` and ``name`` are left as they are when ``None``.

        Only an active or paused subscriber can be changed; returns ``None`` otherwise.
        """
        with self.engine.begin() as conn:
            status = conn.execute(
                select(t.subscribers.c.status).where(t.subscribers.c.id == subscriber_id)
            ).scalar()
            live = (SubscriberStatus.ACTIVE.value, SubscriberStatus.PAUSED.value)
            if status not in live:
                return None
            values: dict[str, Any] = {"send_hour": send_hour, "frequency": frequency.value}
            if timezone is not None:
                values["timezone"] = timezone
            if name is not None:
                values["name"] = name
            wanted = (SubscriberStatus.PAUSED if paused else SubscriberStatus.ACTIVE).value
            if wanted != status:
                values.update(status=wanted, status_changed=now)
            conn.execute(
                update(t.subscribers).where(t.subscribers.c.id == subscriber_id).values(**values)
            )
            conn.execute(
                delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == subscriber_id)
            )
            if topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": subscriber_id, "topic": tp} for tp in dict.fromkeys(topics)],
                )
        return self.subscriber_by_id(subscriber_id)

    def unsubscribe_id(self, subscriber_id: int, now: datetime) -> bool:
        """Mark a subscriber unsubscribed (idempotent). True when the status changed just now."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(t.subscribers)
                .where(
                    t.subscribers.c.id == subscriber_id,
                    t.subscribers.c.status != SubscriberStatus.UNSUBSCRIBED.value,
                )
                .values(status=SubscriberStatus.UNSUBSCRIBED.value, status_changed=now)
            )
            return res.rowcount == 1

    def consent_record(self, subscriber_id: int) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            value = conn.execute(
                select(t.subscribers.c.consent).where(t.subscribers.c.id == subscriber_id)
            ).scalar()
        return dict(value) if value else None

    def hit_rate(self, key: str, now: datetime, *, window: timedelta, limit: int) -> bool:
        """Count one request for ``key`` unless ``limit`` were already made within ``window``.

        True: allowed (and counted). False: over the limit (not counted). Old events of the key
        are pruned on the way.
        """
        since = now - window
        with self.engine.begin() as conn:
            conn.execute(
                delete(t.rate_events).where(t.rate_events.c.key == key, t.rate_events.c.at < since)
            )
            used = conn.execute(
                select(func.count())
                .select_from(t.rate_events)
                .where(t.rate_events.c.key == key, t.rate_events.c.at >= since)
            ).scalar_one()
            if used >= limit:
                return False
            conn.execute(t.rate_events.insert().values(key=key, at=now))
            return True

    def forget_rate(self, key: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(t.rate_events).where(t.rate_events.c.key == key))

    def prune_rate_events(self, before: datetime) -> int:
        with self.engine.begin() as conn:
            return int(
                conn.execute(delete(t.rate_events).where(t.rate_events.c.at < before)).rowcount
            )

    # ------------------------------------------------------------------ votes
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

    # ------------------------------------------------------------------ archive

    def edition_papers(self, edition_id: int) -> list[Paper]:
        """The papers a sent edition carried (from ``sent_papers``), with their sources."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.papers)
                .join(t.sent_papers, t.sent_papers.c.paper_id == t.papers.c.id)
                .where(t.sent_papers.c.edition_id == edition_id)
                .order_by(t.papers.c.id)
            ).all()
            sources = self._sources_for(conn, [r.id for r in rows])
            return [_paper(r, sources.get(r.id, ())) for r in rows]

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

    def sent_edition_dates(self, limit: int = 30) -> list[date]:
        """The most recent edition dates on which at least one digest was sent, newest first."""
        with self.engine.connect() as conn:
            q = (
                select(t.editions.c.edition_date)
                .where(t.editions.c.status == EditionStatus.SENT.value)
                .distinct()
                .order_by(t.editions.c.edition_date.desc())
                .limit(limit)
            )
            return [r[0] for r in conn.execute(q)]

    # ------------------------------------------------------------------ operations

    def ops_snapshot(self, today: date, sources: Collection[str] | None = None) -> dict[str, Any]:
        """Counts for /metrics and `newsletter status`, in a handful of grouped queries.

        With ``sources``, failing sources are only those named there (the configured ones): a
        source removed from the config keeps its history here but raises no alert.
        """
        with self.engine.connect() as conn:
            subs: dict[Any, Any] = dict(
                conn.execute(
                    select(t.subscribers.c.status, func.count()).group_by(t.subscribers.c.status)
                ).all()
            )
            editions: dict[Any, Any] = dict(
                conn.execute(
                    select(t.editions.c.status, func.count())
                    .where(t.editions.c.edition_date == today)
                    .group_by(t.editions.c.status)
                ).all()
            )
            papers = conn.execute(select(func.count()).select_from(t.papers)).scalar_one()
            last_runs: dict[str, Any] = {}
            for kind, started, finished, status, duration in conn.execute(
                select(
                    t.runs.c.kind,
                    t.runs.c.started,
                    t.runs.c.finished,
                    t.runs.c.status,
                    t.runs.c.duration,
                ).order_by(t.runs.c.id)
            ):
                last_runs[kind] = {
                    "started": started,
                    "finished": finished,
                    "status": status,
                    "duration": duration,
                }
            failing = conn.execute(
                select(
                    t.source_state.c.source,
                    t.source_state.c.consecutive_failures,
                    t.source_state.c.last_error,
                )
                .where(t.source_state.c.consecutive_failures > 0)
                .where(true() if sources is None else t.source_state.c.source.in_(sorted(sources)))
                .order_by(t.source_state.c.source)
            ).all()
        return {
            "subscribers": {str(k): int(v) for k, v in subs.items()},
            "editions_today": {str(k): int(v) for k, v in editions.items()},
            "papers": int(papers),
            "last_runs": last_runs,
            "failing_sources": [(r[0], int(r[1]), r[2]) for r in failing],
        }

    # ------------------------------------------------------------------ the edition ledger

    def last_sent(self, subscriber_ids: Sequence[int]) -> dict[int, datetime]:
        """When each subscriber's most recent digest went out (absent: never)."""
        out: dict[int, datetime] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(subscriber_ids), 500):
                q = (
                    select(t.editions.c.subscriber_id, func.max(t.editions.c.finished))
                    .where(
                        t.editions.c.subscriber_id.in_(subscriber_ids[start : start + 500]),
                        t.editions.c.status == EditionStatus.SENT.value,
                    )
                    .group_by(t.editions.c.subscriber_id)
                )
                for sid, finished in conn.execute(q):
                    if finished is not None:  # max() keeps the column type: aware UTC
                        out[sid] = finished
        return out

    def force_edition(
        self, subscriber_id: int, edition_date: date, message_id: str, now: datetime, *, owner: str
    ) -> tuple[EditionClaim, list[int]]:
        """Re-open today's edition for a forced re-send, marked ``forced``.

        Returns the claim (with a fresh Message-ID: it is a new message) and the ids of the
        papers the earlier send carried, so the re-send can carry them again.
        """
        with self.engine.begin() as conn:
            row = conn.execute(
                select(t.editions.c.id).where(
                    t.editions.c.subscriber_id == subscriber_id,
                    t.editions.c.edition_date == edition_date,
                )
            ).first()
            if row is None:
                eid = conn.execute(
                    t.editions.insert()
                    .values(
                        subscriber_id=subscriber_id,
                        edition_date=edition_date,
                        status=EditionStatus.CLAIMED.value,
                        message_id=message_id,
                        claimed=now,
                        owner=owner,
                        attempts=0,
                        item_count=0,
                        forced=True,
                    )
                    .returning(t.editions.c.id)
                ).scalar_one()
                return EditionClaim(eid, subscriber_id, edition_date, message_id, resumed=False), []
            eid = row.id
            earlier = [
                r[0]
                for r in conn.execute(
                    select(t.sent_papers.c.paper_id).where(t.sent_papers.c.edition_id == eid)
                )
            ]
            conn.execute(
                update(t.editions)
                .where(t.editions.c.id == eid)
                .values(
                    status=EditionStatus.CLAIMED.value,
                    message_id=message_id,
                    claimed=now,
                    owner=owner,
                    forced=True,
                    finished=None,
                    last_error=None,
                )
            )
            return EditionClaim(
                eid, subscriber_id, edition_date, message_id, resumed=False
            ), earlier

    def claim_edition(
        self,
        subscriber_id: int,
        edition_date: date,
        message_id: str,
        now: datetime,
        *,
        owner: str,
        lease: timedelta = timedelta(minutes=10),
        owner_gone: Callable[[str], bool] | None = None,
    ) -> EditionClaim | None:
        """Claim ``(subscriber, edition_date)`` before sending. ``None``: someone else has it.

        The claim is one atomic INSERT on the unique ``(subscriber_id, edition_date)``; a claim
        left in ``claimed`` or ``sending`` by an interrupted run is taken over (compare-and-set
        on owner and time) once its lease has run out, or at once when ``owner_gone(owner)``
        says its owner process no longer exists, keeping its Message-ID. ``deferred`` rows (a
        run stopped before their message went out) are taken over by any later run.
        """
        [claim] = self.claim_editions(
            [(subscriber_id, edition_date, message_id)],
            now,
            owner=owner,
            lease=lease,
            owner_gone=owner_gone,
        )
        return claim

    def claim_editions(
        self,
        wanted: Sequence[tuple[int, date, str]],
        now: datetime,
        *,
        owner: str,
        lease: timedelta = timedelta(minutes=10),
        owner_gone: Callable[[str], bool] | None = None,
        resend_unknown: bool = False,
    ) -> list[EditionClaim | None]:
        """:meth:`claim_edition` for several ``(subscriber_id, edition_date, message_id)`` in one
        transaction (one multi-row INSERT); results in the same order.

        ``resend_unknown`` (``delivery.on_unknown: resend``) also takes over ``unknown`` rows,
        for their one re-send with the same Message-ID; ``resend`` rows (settled by hand) are
        always taken over.

        Rows are inserted in subscriber order, so two runs claiming overlapping sets at the same
        moment wait for each other instead of deadlocking (PostgreSQL).
        """
        if not wanted:
            return []
        order = sorted(range(len(wanted)), key=lambda k: (wanted[k][0], wanted[k][1]))
        out: list[EditionClaim | None] = [None] * len(wanted)
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                rows = conn.execute(
                    _PG_CLAIM,
                    {
                        "sids": [wanted[k][0] for k in order],
                        "dates": [wanted[k][1] for k in order],
                        "mids": [wanted[k][2] for k in order],
                        "now": now,
                        "owner": owner,
                    },
                )
            else:
                rows = self._claim_rows(conn, wanted, order, now, owner)
            inserted = {(r.subscriber_id, r.edition_date): r.id for r in rows}
            for k in order:
                sid, day, mid = wanted[k]
                eid = inserted.get((sid, day))
                if eid is not None:
                    out[k] = EditionClaim(eid, sid, day, mid, resumed=False)
                else:
                    out[k] = self._take_over(
                        conn, sid, day, now, owner, lease, owner_gone, resend_unknown
                    )
        return out

    def _claim_rows(
        self,
        conn: Connection,
        wanted: Sequence[tuple[int, date, str]],
        order: Sequence[int],
        now: datetime,
        owner: str,
    ) -> Any:
        # executemany with RETURNING ("insertmanyvalues"): one cached statement, rows sent as
        # multi-row INSERTs in the order given
        return conn.execute(
            self._claim_insert(),
            [
                {
                    "subscriber_id": wanted[k][0],
                    "edition_date": wanted[k][1],
                    "status": EditionStatus.CLAIMED.value,
                    "message_id": wanted[k][2],
                    "claimed": now,
                    "owner": owner,
                    "attempts": 0,
                    "item_count": 0,
                    "forced": False,
                }
                for k in order
            ],
        )

    @staticmethod
    def _take_over(
        conn: Connection,
        subscriber_id: int,
        edition_date: date,
        now: datetime,
        owner: str,
        lease: timedelta,
        owner_gone: Callable[[str], bool] | None,
        resend_unknown: bool = False,
    ) -> EditionClaim | None:
        """The existing ledger row, if this run may resume it (compare-and-set)."""
        row = conn.execute(
            select(t.editions).where(
                t.editions.c.subscriber_id == subscriber_id,
                t.editions.c.edition_date == edition_date,
            )
        ).one()
        if row.status == EditionStatus.DEFERRED.value:
            pass  # a temporary failure: any later run retries it
        elif row.status == EditionStatus.RESEND.value or (
            resend_unknown and row.status == EditionStatus.UNKNOWN.value
        ):
            pass  # its one re-send, same Message-ID
        elif row.status not in (EditionStatus.CLAIMED.value, EditionStatus.SENDING.value):
            return None
        elif (
            row.owner != owner
            and row.claimed > now - lease
            and not (owner_gone is not None and owner_gone(row.owner))
        ):
            return None  # another run is working on it right now
        took = conn.execute(
            update(t.editions)
            .where(
                t.editions.c.id == row.id,
                t.editions.c.owner == row.owner,
                t.editions.c.claimed == row.claimed,
                t.editions.c.status == row.status,
            )
            .values(owner=owner, claimed=now, status=EditionStatus.CLAIMED.value)
        )
        if took.rowcount != 1:
            return None
        return EditionClaim(
            row.id,
            subscriber_id,
            edition_date,
            row.message_id,
            resumed=True,
            earlier=EditionStatus(row.status),
        )

    def mark_edition(
        self,
        edition_id: int,
        status: EditionStatus,
        now: datetime,
        *,
        error: str | None = None,
        paper_ids: Sequence[int] = (),
        attempts: int | None = None,
    ) -> None:
        """Record an edition's outcome; a ``sent`` edition records its papers in the same commit."""
        with self.engine.begin() as conn:
            self._mark(conn, edition_id, status, now, error, paper_ids, attempts)

    def _mark(
        self,
        conn: Connection,
        edition_id: int,
        status: EditionStatus,
        now: datetime,
        error: str | None = None,
        paper_ids: Sequence[int] = (),
        attempts: int | None = None,
        subscriber_id: int | None = None,
    ) -> None:
        done = 0
        if subscriber_id is not None and status in _FINAL:
            conn.execute(
                _MARK_FINAL,
                {
                    "b_id": edition_id,
                    "b_status": status.value,
                    "b_error": error,
                    "b_finished": now,
                    "b_items": len(paper_ids) if paper_ids else None,
                },
            )
            if status in _DELIVERED and paper_ids:
                conn.execute(
                    self._sent_papers_insert(),
                    [
                        {"subscriber_id": subscriber_id, "paper_id": pid, "edition_id": edition_id}
                        for pid in paper_ids
                    ],
                )
            return
        if subscriber_id is None or status is EditionStatus.SENDING:
            row = conn.execute(
                select(t.editions.c.subscriber_id, t.editions.c.attempts).where(
                    t.editions.c.id == edition_id
                )
            ).one()
            subscriber_id, done = row.subscriber_id, row.attempts
        values: dict[str, Any] = {"status": status.value, "last_error": error}
        if status in _FINAL:
            values["finished"] = now
        if status is EditionStatus.SENDING:
            values["attempts"] = done + 1 if attempts is None else attempts
        if paper_ids:
            values["item_count"] = len(paper_ids)
        conn.execute(update(t.editions).where(t.editions.c.id == edition_id).values(**values))
        if status in _DELIVERED and paper_ids:
            # executemany with one cached statement: a multi-row VALUES is compiled every time
            conn.execute(
                self._insert(t.sent_papers).on_conflict_do_nothing(),  # type: ignore[attr-defined]
                [
                    {"subscriber_id": subscriber_id, "paper_id": pid, "edition_id": edition_id}
                    for pid in paper_ids
                ],
            )

    def release_edition(self, edition_id: int, *, error: str | None = None) -> None:
        """Give back a claim whose message did not go out in this run (relay down, stop).

        A claim never handed to the relay (no attempt yet) is deleted: the next run claims it
        afresh. One that was tried already (a resumed claim, a retry) becomes ``deferred`` and
        keeps its Message-ID, so if an earlier attempt did reach the reader, the next one folds
        with it.
        """
        with self.engine.begin() as conn:
            self._release(conn, edition_id, error)

    @staticmethod
    def _release(conn: Connection, edition_id: int, error: str | None) -> None:
        active = [EditionStatus.CLAIMED.value, EditionStatus.SENDING.value]
        conn.execute(
            delete(t.editions).where(
                t.editions.c.id == edition_id,
                t.editions.c.status.in_(active),
                t.editions.c.attempts == 0,
            )
        )
        conn.execute(
            update(t.editions)
            .where(t.editions.c.id == edition_id, t.editions.c.status.in_(active))
            .values(status=EditionStatus.DEFERRED.value, last_error=error)
        )

    def begin_send(self, edition_id: int, subscriber_id: int, owner: str, now: datetime) -> str:
        """Mark a claimed edition ``sending`` just before it goes to the relay.

        One compare-and-set that also checks, at send time, that the subscriber is still
        active and that this run still owns the claim. Returns ``"ok"``, ``"inactive"``
        (unsubscribed or suppressed since the digest was rendered; the edition is then
        ``skipped``) or ``"lost"`` (another run took the claim over).
        """
        with self.engine.begin() as conn:
            return self._begin_send(conn, edition_id, subscriber_id, owner, now)

    @staticmethod
    def _begin_send(
        conn: Connection, edition_id: int, subscriber_id: int, owner: str, now: datetime
    ) -> str:
        e, sub = t.editions, t.subscribers
        res = conn.execute(
            _BEGIN_SEND,
            {"b_id": edition_id, "b_owner": owner, "b_sid": subscriber_id, "b_now": now},
        )
        if res.rowcount == 1:
            return "ok"
        active = conn.execute(
            select(sub.c.status).where(sub.c.id == subscriber_id)
        ).scalar_one_or_none()
        if active != SubscriberStatus.ACTIVE.value:
            conn.execute(
                update(e)
                .where(e.c.id == edition_id, e.c.owner == owner)
                .values(
                    status=EditionStatus.SKIPPED.value,
                    finished=now,
                    last_error="unsubscribed before sending",
                )
            )
            return "inactive"
        return "lost"

    def apply_ledger(
        self, ops: Sequence[LedgerOp], now: datetime, *, conn: Connection | None = None
    ) -> list[str | bool | None]:
        """Several senders' ledger writes in one transaction (group commit); one result per op.

        ``begin`` returns what :meth:`begin_send` returns, ``permanent_failure`` what
        :meth:`record_permanent_failure` returns, the others ``None``. Nothing is applied if
        one op fails. Ops are applied in order; a run of ``begin`` ops (one owner) is one
        ``UPDATE … RETURNING``, and a run of ``sent`` marks is one ``UPDATE`` and one insert of
        their papers, whatever their number (on PostgreSQL as arrays: one round trip each).
        ``conn``: a connection the caller keeps open for its writes (no pool checkout each time).
        """
        if conn is None:
            with self.engine.connect() as own:
                return self.apply_ledger(ops, now, conn=own)
        held = conn
        return self._retrying(lambda: self._apply_ledger(ops, now, held), held)

    def _apply_ledger(
        self, ops: Sequence[LedgerOp], now: datetime, conn: Connection
    ) -> list[str | bool | None]:
        out: list[str | bool | None] = []
        with conn.begin():
            at = 0
            while at < len(ops):
                op = ops[at]
                end = at + 1
                if op.kind == "begin":
                    while (
                        end < len(ops) and ops[end].kind == "begin" and ops[end].owner == op.owner
                    ):
                        end += 1
                    out += self._begin_many(conn, ops[at:end], now)
                elif _is_sent_mark(op):
                    while end < len(ops) and _is_sent_mark(ops[end]):
                        end += 1
                    self._mark_sent_many(conn, ops[at:end], now)
                    out += [None] * (end - at)
                elif op.kind == "mark":
                    assert op.status is not None
                    self._mark(
                        conn,
                        op.edition_id,
                        op.status,
                        now,
                        op.error,
                        op.paper_ids,
                        subscriber_id=op.subscriber_id or None,
                    )
                    out.append(None)
                elif op.kind == "release":
                    self._release(conn, op.edition_id, op.error)
                    out.append(None)
                elif op.kind == "permanent_failure":
                    out.append(self._permanent_failure(conn, op.subscriber_id, op.limit, now))
                else:  # pragma: no cover - a programming error
                    raise ValueError(f"unknown ledger op {op.kind!r}")
                at = end
        return out

    def apply_ledger_at_once(
        self, ops: Sequence[LedgerOp], now: datetime, conn: Connection
    ) -> list[str | bool | None] | None:
        """The usual group commit (``begin``s of one owner and ``sent`` marks) on PostgreSQL as
        one statement on an autocommit connection: one round trip, atomic as any statement.

        ``None`` when ``ops`` hold anything else, or on SQLite: use :meth:`apply_ledger`. A
        ``begin`` that did not apply (the subscriber left, or another run took the edition) is
        looked at again in a transaction, to say which.
        """
        if self.dialect != "postgresql":
            return None
        begins = [op for op in ops if op.kind == "begin"]
        marks = [op for op in ops if _is_sent_mark(op)]
        if len(begins) + len(marks) != len(ops) or len({op.owner for op in begins}) > 1:
            return None
        done = self._retrying(lambda: _pg_ledger(conn, marks, begins, now), conn, autocommit=True)
        out: list[str | bool | None] = []
        for op in ops:
            if op.kind != "begin":
                out.append(None)
            elif op.edition_id in done:
                out.append("ok")
            else:
                with self.engine.begin() as again:
                    out.append(
                        self._begin_send(again, op.edition_id, op.subscriber_id, op.owner, now)
                    )
        return out

    def _begin_many(
        self, conn: Connection, ops: Sequence[LedgerOp], now: datetime
    ) -> list[str | bool | None]:
        """:meth:`_begin_send` for several editions of one owner: one statement when all are
        still theirs and active (the usual case); each one that is not is looked at alone."""
        if self.dialect != "postgresql":  # on SQLite one by one is cheaper
            claimed = self._sqlite_datetime(now)
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            out: list[str | bool | None] = []
            try:
                for op in ops:
                    cursor.execute(
                        _SQLITE_BEGIN_SQL,
                        {
                            "now": claimed,
                            "id": op.edition_id,
                            "owner": op.owner,
                            "sid": op.subscriber_id,
                            **_SQLITE_BEGIN_ARGS,
                        },
                    )
                    out.append(
                        "ok"
                        if cursor.rowcount == 1  # else: why not (inactive, or lost)
                        else self._begin_send(conn, op.edition_id, op.subscriber_id, op.owner, now)
                    )
            finally:
                cursor.close()
            return out
        # The hot path goes to psycopg directly, as a prepared statement: SQLAlchemy's share of
        # a statement's CPU is about as large as the driver's, and this runs for every message.
        done = _pg_ledger(conn, (), ops, now)
        return [
            "ok"
            if op.edition_id in done
            else self._begin_send(conn, op.edition_id, op.subscriber_id, op.owner, now)
            for op in ops
        ]

    def _mark_sent_many(self, conn: Connection, ops: Sequence[LedgerOp], now: datetime) -> None:
        """``sent`` marks with their papers (see :func:`_is_sent_mark`): two statements, one on
        PostgreSQL."""
        if self.dialect == "postgresql":
            _pg_ledger(conn, ops, (), now)
            return
        # SQLite: straight to the sqlite3 cursor with positional rows (SQLAlchemy builds a
        # parameter dict per row, 20 rows a message); the datetime goes through the column
        # type's own bind processor, so it is stored exactly as SQLAlchemy stores it.
        finished = self._sqlite_datetime(now)
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.executemany(
                _SQLITE_MARK_SENT_SQL,
                [
                    (EditionStatus.SENT.value, finished, len(op.paper_ids) or None, op.edition_id)
                    for op in ops
                ],
            )
            rows = [(op.subscriber_id, pid, op.edition_id) for op in ops for pid in op.paper_ids]
            if rows:
                cursor.executemany(_SQLITE_SENT_PAPERS_SQL, rows)
        finally:
            cursor.close()

    def _sqlite_datetime(self, moment: datetime) -> Any:
        if self._datetime_bind is None:
            column_type = t.editions.c.finished.type
            dialect = self.engine.dialect
            process = column_type.dialect_impl(dialect).bind_processor(dialect)
            self._datetime_bind = process or (lambda v: v)
        return self._datetime_bind(moment)

    def count_sent_since(self, since: datetime) -> int:
        """Editions handed to the relay since ``since`` (for the per-hour rate limit)."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(t.editions)
                    .where(
                        t.editions.c.status == EditionStatus.SENT.value,
                        t.editions.c.finished >= since,
                    )
                ).scalar_one()
            )

    def delivery_failures(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[int, str | None]]:
        """``{subscriber id: (permanent failures, the relay's last answer)}``."""
        out: dict[int, tuple[int, str | None]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(subscriber_ids), 500):
                chunk = subscriber_ids[start : start + 500]
                counts = conn.execute(
                    select(t.subscribers.c.id, t.subscribers.c.permanent_failures).where(
                        t.subscribers.c.id.in_(chunk)
                    )
                ).all()
                last = dict(
                    conn.execute(
                        select(t.editions.c.subscriber_id, t.editions.c.last_error)
                        .where(
                            t.editions.c.subscriber_id.in_(chunk),
                            t.editions.c.status == EditionStatus.FAILED.value,
                        )
                        .order_by(t.editions.c.id)
                    ).all()
                )
                for sid, n in counts:
                    out[sid] = (int(n or 0), last.get(sid))
        return out

    def edition_statuses(
        self, subscriber_ids: Sequence[int], edition_dates: Iterable[date]
    ) -> dict[tuple[int, date], EditionStatus]:
        """The ledger status of each ``(subscriber, edition_date)`` that has a row."""
        dates = sorted(set(edition_dates))
        if not subscriber_ids or not dates:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    t.editions.c.subscriber_id, t.editions.c.edition_date, t.editions.c.status
                ).where(
                    t.editions.c.subscriber_id.in_(sorted(set(subscriber_ids))),
                    t.editions.c.edition_date.in_(dates),
                )
            )
            return {(r.subscriber_id, r.edition_date): EditionStatus(r.status) for r in rows}

    def editions_on(
        self, edition_date: date, status: EditionStatus | None = None
    ) -> list[EditionRecord]:
        with self.engine.connect() as conn:
            q = (
                select(t.editions, t.subscribers.c.email)
                .join(t.subscribers, t.subscribers.c.id == t.editions.c.subscriber_id)
                .where(t.editions.c.edition_date == edition_date)
            )
            if status is not None:
                q = q.where(t.editions.c.status == status.value)
            return [_edition(r) for r in conn.execute(q.order_by(t.editions.c.id))]

    def edition_for(self, subscriber_id: int, edition_date: date) -> EditionRecord | None:
        with self.engine.connect() as conn:
            r = conn.execute(
                select(t.editions, t.subscribers.c.email)
                .join(t.subscribers, t.subscribers.c.id == t.editions.c.subscriber_id)
                .where(
                    t.editions.c.subscriber_id == subscriber_id,
                    t.editions.c.edition_date == edition_date,
                )
            ).first()
            return None if r is None else _edition(r)

    def unsettled_editions(self, limit: int = 1000) -> list[EditionRecord]:
        """Editions whose delivery is unknown (``unknown``, ``held``, ``resend``), oldest first."""
        with self.engine.connect() as conn:
            q = (
                select(t.editions, t.subscribers.c.email)
                .join(t.subscribers, t.subscribers.c.id == t.editions.c.subscriber_id)
                .where(t.editions.c.status.in_(_UNSETTLED))
                .order_by(t.editions.c.edition_date, t.editions.c.id)
                .limit(limit)
            )
            return [_edition(r) for r in conn.execute(q)]

    def settle_unknown(self, action: Literal["resend", "drop"], now: datetime) -> int:
        """Settle every ``unknown`` or ``held`` edition by hand; returns how many.

        ``resend``: the next send re-sends each once with its Message-ID (status ``resend``);
        ``drop``: given up (``dropped``, with when and how in ``last_error``).
        """
        pending = [EditionStatus.UNKNOWN.value, EditionStatus.HELD.value]
        if action == "drop":
            pending.append(EditionStatus.RESEND.value)
            values: dict[str, Any] = {
                "status": EditionStatus.DROPPED.value,
                "finished": now,
                "last_error": f"given up by hand ('send --settle-unknown drop', "
                f"{now:%Y-%m-%d %H:%M} UTC); the last answer: "
                + func.coalesce(t.editions.c.last_error, "none"),
            }
        else:
            values = {"status": EditionStatus.RESEND.value}
        with self.engine.begin() as conn:
            done = conn.execute(
                update(t.editions).where(t.editions.c.status.in_(pending)).values(**values)
            )
            return int(done.rowcount)

    # ------------------------------------------------------------------ sources and runs

    def source_state(self, source: str) -> SourceState:
        with self.engine.connect() as conn:
            r = conn.execute(
                select(t.source_state).where(t.source_state.c.source == source)
            ).first()
        if r is None:
            return SourceState(source)
        return SourceState(
            r.source,
            r.etag,
            r.last_modified,
            r.last_fetch,
            r.last_success,
            r.last_error,
            r.last_count,
            r.consecutive_failures,
        )

    def all_source_states(self) -> list[SourceState]:
        with self.engine.connect() as conn:
            names = [
                r[0]
                for r in conn.execute(
                    select(t.source_state.c.source).order_by(t.source_state.c.source)
                )
            ]
        return [self.source_state(n) for n in names]

    def save_source_state(self, state: SourceState) -> None:
        values = {
            "etag": state.etag,
            "last_modified": state.last_modified,
            "last_fetch": state.last_fetch,
            "last_success": state.last_success,
            "last_error": state.last_error,
            "last_count": state.last_count,
            "consecutive_failures": state.consecutive_failures,
        }
        with self.engine.begin() as conn:
            stmt = self._insert(t.source_state).values(source=state.source, **values)
            conn.execute(stmt.on_conflict_do_update(index_elements=["source"], set_=values))  # type: ignore[attr-defined]

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
        with self.engine.connect() as conn:
            q = select(t.runs)
            if kind is not None:
                q = q.where(t.runs.c.kind == kind)
            rows = conn.execute(q.order_by(t.runs.c.id.desc()).limit(limit)).all()
        return [
            RunRecord(r.id, r.kind, r.started, r.finished, r.status, r.counts or {}, r.error)
            for r in rows
        ]


StoreErrors = (_SAError,)

# The senders' hot statements, built once (their compiled form is cached; building them per
# message costs more than running them).
_e, _s = t.editions, t.subscribers
_BEGIN_SEND = (
    update(_e)
    .where(
        _e.c.id == bindparam("b_id"),
        _e.c.owner == bindparam("b_owner"),
        _e.c.status.in_(
            [EditionStatus.CLAIMED.value, EditionStatus.SENDING.value, EditionStatus.UNKNOWN.value]
        ),
        _e.c.subscriber_id.in_(
            select(_s.c.id).where(
                _s.c.id == bindparam("b_sid"), _s.c.status == SubscriberStatus.ACTIVE.value
            )
        ),
    )
    .values(
        status=EditionStatus.SENDING.value,
        attempts=_e.c.attempts + 1,
        claimed=bindparam("b_now", type_=_e.c.claimed.type),
    )
)
_PG_BEGIN_STATUSES = {
    "sending": EditionStatus.SENDING.value,
    "in_hand": [
        EditionStatus.CLAIMED.value,
        EditionStatus.SENDING.value,
        EditionStatus.UNKNOWN.value,
    ],
    "active": SubscriberStatus.ACTIVE.value,
}
_PG_LEDGER_AT_ONCE_SQL = (
    # a group commit in one statement: sent marks, their papers, then the begins (different
    # editions: a sender's begin returns before it can post that edition's mark)
    "WITH marked AS (UPDATE editions AS e SET status = %(sent)s, "
    "last_error = NULL, finished = %(now)s, item_count = coalesce(v.n, e.item_count) "
    "FROM unnest(CAST(%(ids)s AS integer[]), CAST(%(counts)s AS integer[])) AS v(id, n) "
    "WHERE e.id = v.id), "
    "papers AS (INSERT INTO sent_papers (subscriber_id, paper_id, edition_id) "
    "SELECT * FROM unnest(CAST(%(sids)s AS integer[]), CAST(%(pids)s AS integer[]), "
    "CAST(%(eids)s AS integer[])) ON CONFLICT DO NOTHING) "
    "UPDATE editions SET status = %(sending)s, attempts = attempts + 1, claimed = %(now)s "
    "WHERE id = ANY(CAST(%(bids)s AS integer[])) AND owner = %(owner)s "
    "AND status = ANY(CAST(%(in_hand)s AS text[])) AND subscriber_id IN "
    "(SELECT id FROM subscribers WHERE status = %(active)s) RETURNING id"
)


def _pg_ledger(
    conn: Connection, marks: Sequence[LedgerOp], begins: Sequence[LedgerOp], now: datetime
) -> set[int]:
    """Sent marks (with their papers) and begins of one owner in one statement; returns the
    editions whose begin applied."""
    rows = [(op.subscriber_id, pid, op.edition_id) for op in marks for pid in op.paper_ids]
    sids, pids, eids = (list(col) for col in zip(*rows, strict=True)) if rows else ([], [], [])
    params = {
        "ids": [op.edition_id for op in marks],
        "counts": [len(op.paper_ids) or None for op in marks],
        "now": _naive(now),
        "sent": EditionStatus.SENT.value,
        "sids": sids,
        "pids": pids,
        "eids": eids,
        "bids": [op.edition_id for op in begins],
        "owner": begins[0].owner if begins else "",
        **_PG_BEGIN_STATUSES,
    }
    return {row[0] for row in _driver_execute(conn, _PG_LEDGER_AT_ONCE_SQL, params)}


_SAID_NO_SQLITE = (
    "SELECT email, status, status_changed FROM subscribers WHERE status IN (:gone1, :gone2) "
    "AND lower(email) IN (SELECT lower(value) FROM json_each(:emails)) ORDER BY id"
)
_SAID_NO_PG = (
    "SELECT email, status, status_changed FROM subscribers WHERE status IN (:gone1, :gone2) "
    "AND lower(email) IN (SELECT lower(x) FROM unnest(CAST(:emails AS text[])) AS x) ORDER BY id"
)
_SQLITE_ADD_SUBSCRIBER_SQL = (
    "INSERT INTO subscribers (email, name, status, timezone, send_hour, frequency, consent, "
    "created, status_changed, confirmed, permanent_failures) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8, 0)"
)
_PG_ADD_SUBSCRIBERS = text(
    # one statement per batch, its rows as one JSON document: psycopg's executemany would run
    # one INSERT per row, and text arrays cost a quoting pass per element on the client
    "INSERT INTO subscribers (email, name, status, status_changed, timezone, send_hour, "
    "frequency, confirmed, created, permanent_failures, consent) "
    "SELECT v.email, v.name, v.status, :now, v.timezone, v.send_hour, v.frequency, :now, :now, "
    "0, v.consent FROM json_to_recordset(CAST(:rows AS json)) AS v(email text, name text, "
    "status text, timezone text, send_hour integer, frequency text, consent json) "
    "RETURNING id, email"
)
_PG_SUBSCRIPTIONS = text(
    "INSERT INTO subscriptions (subscriber_id, topic) "
    "SELECT v.s, v.t FROM json_to_recordset(CAST(:rows AS json)) AS v(s integer, t text)"
)


def _pg_add_subscribers(
    conn: Connection, values: Sequence[dict[str, Any]], now: datetime
) -> list[int]:
    """Insert subscriber rows in one statement; their ids in the order given."""
    keys = ("email", "name", "status", "timezone", "send_hour", "frequency", "consent")
    rows = json.dumps([{k: v[k] for k in keys} for v in values])
    found = {
        email: sid
        for sid, email in conn.execute(_PG_ADD_SUBSCRIBERS, {"now": _naive(now), "rows": rows})
    }
    return [found[v["email"]] for v in values]


def _naive(moment: datetime) -> datetime:
    """A datetime as the schema stores it (naive UTC; see ``tables.UTCDateTime``)."""
    return moment.astimezone(UTC).replace(tzinfo=None)


def _driver_execute(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """``sql`` on the DBAPI connection under ``conn`` (inside its transaction), prepared once
    per connection by psycopg; returns the rows, if any."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall() if cursor.description else []
    finally:
        cursor.close()


_SQLITE_BEGIN_SQL = (
    "UPDATE editions SET status = :sending, attempts = attempts + 1, claimed = :now "
    "WHERE id = :id AND owner = :owner AND status IN (:claimed, :sending, :unknown) "
    "AND subscriber_id IN (SELECT id FROM subscribers WHERE id = :sid AND status = :active)"
)
_SQLITE_BEGIN_ARGS = {
    "sending": EditionStatus.SENDING.value,
    "claimed": EditionStatus.CLAIMED.value,
    "unknown": EditionStatus.UNKNOWN.value,
    "active": SubscriberStatus.ACTIVE.value,
}
_SQLITE_MARK_SENT_SQL = (
    "UPDATE editions SET status = ?, last_error = NULL, finished = ?, "
    "item_count = coalesce(?, item_count) WHERE id = ?"
)
_SQLITE_SENT_PAPERS_SQL = (
    "INSERT INTO sent_papers (subscriber_id, paper_id, edition_id) VALUES (?, ?, ?) "
    "ON CONFLICT DO NOTHING"
)
_PG_CLAIM = text(
    # claims as arrays: one statement whatever their number, rows inserted in the order given
    "INSERT INTO editions (subscriber_id, edition_date, status, message_id, claimed, owner, "
    "attempts, item_count, forced) "
    "SELECT v.s, v.d, :status, v.m, :now, :owner, 0, 0, false "
    "FROM unnest(CAST(:sids AS integer[]), CAST(:dates AS date[]), CAST(:mids AS text[])) "
    "WITH ORDINALITY AS v(s, d, m, k) ORDER BY v.k "
    "ON CONFLICT (subscriber_id, edition_date) DO NOTHING "
    "RETURNING id, subscriber_id, edition_date"
).bindparams(
    bindparam("sids", type_=ARRAY(Integer)),
    bindparam("dates", type_=ARRAY(Date)),
    bindparam("mids", type_=ARRAY(Text)),
    bindparam("now", type_=_e.c.claimed.type),
    status=EditionStatus.CLAIMED.value,
)


def _is_sent_mark(op: LedgerOp) -> bool:
    """A ``sent`` mark that :meth:`Store._mark_sent_many` can take with others."""
    return (
        op.kind == "mark"
        and op.status is EditionStatus.SENT
        and op.subscriber_id > 0
        and not op.error
    )


_FINAL = frozenset(
    {
        EditionStatus.SENT,
        EditionStatus.FAILED,
        EditionStatus.SKIPPED,
        EditionStatus.UNKNOWN,
        EditionStatus.HELD,
        EditionStatus.RESEND_REFUSED,
    }
)
_DELIVERED = frozenset({EditionStatus.SENT, EditionStatus.RESEND_REFUSED})
_MAY_HAVE_ARRIVED = frozenset({EditionStatus.SENDING, EditionStatus.UNKNOWN, EditionStatus.RESEND})
_UNSETTLED = (EditionStatus.UNKNOWN.value, EditionStatus.HELD.value, EditionStatus.RESEND.value)
"""Editions whose delivery is unknown until the next run re-sends them or an operator settles."""
_MARK_FINAL = (
    update(_e)
    .where(_e.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status", type_=_e.c.status.type),
        last_error=bindparam("b_error", type_=_e.c.last_error.type),
        finished=bindparam("b_finished", type_=_e.c.finished.type),
        item_count=func.coalesce(bindparam("b_items", type_=Integer), _e.c.item_count),
    )
)


def _by_key(conn: Connection) -> None:
    """PostgreSQL: let this transaction's statements find rows through their indexes.

    For lookups by subscriber ids in tables that a send fills or that a bulk import has just
    filled: without statistics, PostgreSQL estimates that an ``IN`` list of hundreds of ids
    matches every row, and reads the whole table once per batch of subscribers.
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")


def _postgres_session(dbapi_conn: Any, _record: Any) -> None:
    """Plan each execution of a prepared statement with its own parameters.

    psycopg prepares a statement on the server after five executions, and PostgreSQL then may
    keep one generic plan for good: made while a table was small (a new edition's ledger), it
    keeps reading the whole table when the table has grown. A custom plan sees today's size.
    """
    autocommit = dbapi_conn.autocommit
    dbapi_conn.autocommit = True
    with dbapi_conn.cursor() as cur:
        cur.execute("SET plan_cache_mode = force_custom_plan")
    dbapi_conn.autocommit = autocommit


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


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


def _subscriber(r: Any, topics: tuple[str, ...]) -> Subscriber:
    return Subscriber(
        id=r.id,
        email=r.email,
        name=r.name,
        status=SubscriberStatus(r.status),
        topics=topics,
        timezone=r.timezone,
        created=r.created,
        send_hour=r.send_hour,
        frequency=Frequency(r.frequency),
        confirmed=r.confirmed,
        status_changed=r.status_changed,
    )


def _edition(r: Any) -> EditionRecord:
    return EditionRecord(
        id=r.id,
        subscriber_id=r.subscriber_id,
        email=r.email,
        edition_date=r.edition_date,
        status=EditionStatus(r.status),
        message_id=r.message_id,
        attempts=r.attempts,
        item_count=r.item_count,
        last_error=r.last_error,
        claimed=r.claimed,
        finished=r.finished,
    )
