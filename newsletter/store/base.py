"""The core of the :class:`~newsletter.store.db.Store`: its engine, errors and schema.

:class:`StoreBase` opens the engine (SQLite pragmas, PostgreSQL session settings), turns
database failures into one-line :class:`~newsletter.errors.StoreError` messages, retries the
ledger's idempotent writes across a lost connection and runs the Alembic migrations. The
helpers here (URL handling, ``_by_key``, ``_naive``) are shared by every domain mixin, which
is why they live here and not in :mod:`.db`: the mixins import this module, never ``db``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Insert,
    Table,
    create_engine,
    event,
)
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import SQLAlchemyError as _SAError

from newsletter.config.database_url import problem as url_problem
from newsletter.errors import (
    DatabaseReadOnly,
    DatabaseUnavailable,
    NotInstalled,
    StoreError,
    UnsupportedDatabase,
)
from newsletter.store import tables as t
from newsletter.store.retry import DEFAULT_WINDOW, is_disconnect, retry_on_disconnect

_T = TypeVar("_T")


MIGRATIONS = Path(__file__).parent / "migrations"

_REVISION_LINE = re.compile(
    r"""^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:["']([^"']+)["']|None)""", re.M
)


@functools.cache
def migrations_head() -> str | None:
    """The head of the migration chain in :data:`MIGRATIONS`, read from the files' ``revision``
    and ``down_revision`` lines without loading Alembic (``tests/store/test_store.py`` checks it
    against Alembic's own answer); Alembic decides when the chain has branches."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        found = dict((k, v) for k, v in _REVISION_LINE.findall(path.read_text(encoding="utf-8")))
        if found.get("revision"):
            revisions.add(found["revision"])
        if found.get("down_revision"):
            parents.add(found["down_revision"])
    heads = revisions - parents
    if len(heads) == 1:
        return heads.pop()
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


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
    why = url_problem(url, memory_ok=True)
    if why:
        raise UnsupportedDatabase(f"{where}: {why}")
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
    except ArgumentError as e:  # one the dialect cannot read (NoSuchModuleError is one too)
        raise UnsupportedDatabase(
            f"{where}: {shown!r} is not a valid database URL; use {supported}"
        ) from e
    except ImportError as e:
        if backend == "postgresql":
            raise NotInstalled(
                f"{where}: {shown} needs the PostgreSQL driver (psycopg), which is not installed: "
                "pip install 'newsletter[postgres]' (from a checkout: pip install -e '.[postgres]')"
            ) from e
        raise NotInstalled(f"{where}: {shown} needs the module {e.name}, not installed") from e


def _make_folder(folder: Path, where: str) -> None:
    """The folder of a SQLite file, made when missing; one line when it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatabaseUnavailable(
            f"cannot make the folder {folder} for the database file ({e.strerror or e}); "
            f"fix {where} or create the folder"
        ) from e


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
    # what SQLAlchemy itself says about a connection (a misuse) is no sign the server is away
    from_driver = isinstance(error, DBAPIError) or not isinstance(error, _SAError)
    if (
        code.startswith("08")
        or isinstance(orig, OSError)
        or (from_driver and "connection" in reason.lower())
        or (from_driver and "resolve host" in reason.lower())  # psycopg: a host name unknown
    ):
        return DatabaseUnavailable(
            f"cannot connect to the database {shown} ({reason}); start the server or fix {where}"
        )
    return StoreError(f"database {shown}: {reason}")


StoreErrors = (_SAError,)


def _naive(moment: datetime) -> datetime:
    """A datetime as the schema stores it (naive UTC; see ``tables.UTCDateTime``)."""
    return moment.astimezone(UTC).replace(tzinfo=None)


def _by_key(conn: Connection) -> None:
    """PostgreSQL: let this transaction's statements find rows through their indexes.

    For lookups by subscriber ids in tables that a send fills or that a bulk import has just
    filled: without statistics, PostgreSQL estimates that an ``IN`` list of hundreds of ids
    matches every row, and reads the whole table once per batch of subscribers. Bitmap scans
    are off too: estimating a dozen rows, PostgreSQL listed "the next 500 active subscribers"
    with a bitmap scan, which cannot stop at the limit (it read every later one, then sorted).
    """
    if conn.dialect.name == "postgresql":  # both as SET LOCAL, in one round trip
        conn.exec_driver_sql(
            "SELECT set_config('enable_seqscan', 'off', true), "
            "set_config('enable_bitmapscan', 'off', true)"
        )


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


class StoreBase:
    """What every domain mixin of the Store shares: the engine, error mapping, retries, schema."""

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
                    _make_folder(Path(path.split("?", 1)[0]).parent, where)
        self.engine = engine
        self._db_errors: tuple[type[BaseException], ...] = (
            _SAError,
            self.engine.dialect.loaded_dbapi.Error,
        )
        """What a public method turns into :meth:`error` (see :mod:`.guard`): SQLAlchemy's errors
        and the driver's own (the ledger's fast paths run SQL on the driver connection)."""
        self._claim_stmt: Insert | None = None
        self._datetime_bind: Callable[[datetime], Any] | None = None
        self._datetime_last: tuple[datetime, Any] | None = None
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        elif self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "connect", _postgres_session)

    @property
    def dialect(self) -> str:
        """The database's SQLAlchemy dialect name: ``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def close(self) -> None:
        """Close the pooled connections (dispose of the engine)."""
        self.engine.dispose()

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
        with self.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

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
        """The schema revision the database is at (``None``: never migrated).

        Read from Alembic's ``alembic_version`` table directly: loading Alembic costs every
        command a quarter of a second at start-up, and only ``db upgrade`` needs it."""
        from sqlalchemy import inspect

        with self.engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        if len(rows) > 1:  # branches: let Alembic say what it makes of them
            from alembic.runtime.migration import MigrationContext

            with self.engine.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        return str(rows[0][0]) if rows else None

    def head_revision(self) -> str | None:
        """The revision this code's migrations lead to (:func:`migrations_head`)."""
        return migrations_head()

    def check_schema(self) -> None:
        """Raise :class:`StoreError` with the fix when the database is not migrated."""
        current = self.current_revision()  # a database error comes as StoreError (.guard)
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

    def _insert(self, table: Table) -> Insert:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)

    def _sqlite_datetime(self, moment: datetime) -> Any:
        """``moment`` as the ``DATETIME`` columns store it on SQLite (through the column type's
        own bind processor); the last one is kept, as a ledger batch's begins and marks share
        their ``now``."""
        last = self._datetime_last
        if last is not None and last[0] == moment:
            return last[1]
        if self._datetime_bind is None:
            column_type = t.editions.c.finished.type
            dialect = self.engine.dialect
            process = column_type.dialect_impl(dialect).bind_processor(dialect)
            self._datetime_bind = process or (lambda v: v)
        stored = self._datetime_bind(moment)
        self._datetime_last = (moment, stored)
        return stored
