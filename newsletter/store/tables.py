"""The schema: SQLAlchemy Core tables. Alembic migrations in ``migrations/`` create them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

from newsletter.addresses import address_key


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite keeps no timezone; we store naive UTC)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """An aware datetime as naive UTC for the database; refuses a naive one."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; pass an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """A datetime read from the database, as an aware UTC datetime."""
        if value is None:
            return None
        if isinstance(value, str):  # defensive: raw SQLite text
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _email_key(context: Any) -> str:
    """``subscribers.email_key`` for a row inserted without one (the address's key)."""
    return address_key(context.get_current_parameters()["email"])


papers = Table(
    "papers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(300), nullable=False, unique=True),
    Column("title", Text, nullable=False),
    Column("abstract", Text, nullable=False, default=""),
    Column("authors", JSON, nullable=False),
    Column("categories", JSON, nullable=False),
    Column("url", Text, nullable=False, default=""),
    Column("pdf_url", Text),
    Column("code_url", Text),
    Column("version", Integer),
    Column("published", UTCDateTime),
    Column("first_seen", UTCDateTime, nullable=False),
    Column("updated", UTCDateTime, nullable=False),
    Column("upvotes", Integer),
    Column("comments", Integer),
    # The code repository's stars, when a source gives them (migration 0014).
    Column("code_stars", Integer),
    Column("content_hash", String(64), nullable=False),
    # False for a paper we first met through a replacement or a backfill: stored, never "new".
    Column("announced", Boolean, nullable=False, default=True),
)
Index("ix_papers_first_seen", papers.c.first_seen)

paper_sources = Table(
    "paper_sources",
    metadata,
    Column("paper_id", Integer, ForeignKey("papers.id", ondelete="CASCADE"), primary_key=True),
    Column("source", String(100), primary_key=True),
    Column("first_seen", UTCDateTime, nullable=False),
    Column("last_seen", UTCDateTime, nullable=False),
)

paper_signals = Table(
    "paper_signals",
    metadata,
    Column("paper_id", Integer, ForeignKey("papers.id", ondelete="CASCADE"), primary_key=True),
    Column("observed", UTCDateTime, primary_key=True),
    Column("source", String(100), nullable=False),
    Column("upvotes", Integer),
    Column("comments", Integer),
)

subscribers = Table(
    "subscribers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("email", String(320), nullable=False, unique=True),
    Column("name", String(200), nullable=False, default=""),
    Column("status", String(20), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("created", UTCDateTime, nullable=False),
    Column("status_changed", UTCDateTime, nullable=False),
    Column("permanent_failures", Integer, nullable=False, default=0),
    Column("consent", JSON),
    # Added by migration 0004 (subscribing on the web and by email).
    Column("send_hour", Integer),
    Column("frequency", String(10), nullable=False, server_default="daily"),
    Column("confirmed", UTCDateTime),
    # The address as every "same address, letter case aside" lookup compares it (migration
    # 0012): ``address_key(email)``, computed in Python because SQLite's lower() folds ASCII
    # only. The store writes it with the address; a Core insert that leaves it out gets it
    # from the default. Nullable only so that no table rebuild was needed on SQLite.
    Column("email_key", String(320), default=_email_key),
    # AUTOINCREMENT (migration 0006): SQLite never hands a deleted subscriber's id to another
    # one, so nothing keyed by an old id (a link, a log line) can reach a new person.
    sqlite_autoincrement=True,
)
# (status, id), not status alone (migration 0010): a send lists the active subscribers by id,
# 500 at a time, and without statistics PostgreSQL read every active one per batch.
Index("ix_subscribers_status_id", subscribers.c.status, subscribers.c.id)
Index("ix_subscribers_email_key", subscribers.c.email_key)

# Addresses erased with ``subscribers remove --forget``: only a keyed hash (HMAC with the
# secret key) and when, so the operator's CLI, an import or the config's ``subscribers:`` list
# cannot add the person back without a fresh confirmation from the address (migration 0006).
forgotten = Table(
    "forgotten",
    metadata,
    Column("hash", String(64), primary_key=True),
    Column("at", UTCDateTime, nullable=False),
)

# One row per counted request (subscribe by web, API or email), for rate limits shared by every
# process. ``key`` is "ip:<address>" or "addr:<keyed hash of the email address>".
rate_events = Table(
    "rate_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(120), nullable=False),
    Column("at", UTCDateTime, nullable=False),
)
Index("ix_rate_events_key_at", rate_events.c.key, rate_events.c.at)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column(
        "subscriber_id", Integer, ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True
    ),
    Column("topic", String(64), primary_key=True),
)

editions = Table(
    "editions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "subscriber_id", Integer, ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False
    ),
    Column("edition_date", Date, nullable=False),
    Column("status", String(20), nullable=False),
    Column("message_id", String(255), nullable=False),
    Column("claimed", UTCDateTime, nullable=False),
    Column("owner", String(100), nullable=False, default=""),
    Column("finished", UTCDateTime),
    Column("attempts", Integer, nullable=False, default=0),
    Column("item_count", Integer, nullable=False, default=0),
    Column("last_error", Text),
    Column("forced", Boolean, nullable=False, default=False),
    # The papers a delivered edition carried, in digest order ("12,7,40"; migration 0011): a
    # reader never gets a paper twice, and the archive shows the digest again. One row per
    # digest, where a ``sent_papers`` row per paper cost the database most of its work.
    Column("paper_ids", Text),
    # What the mail showed besides its papers, written with them (migration 0015): sections,
    # reasons, the cards' signals, as short JSON (newsletter/edition/layout.py). "View in
    # browser" renders it again; re-ranking the papers later gave another digest (issue 43).
    Column("layout", Text),
    UniqueConstraint("subscriber_id", "edition_date", name="uq_editions_subscriber_date"),
)
Index("ix_editions_date_status", editions.c.edition_date, editions.c.status)


def paper_list(paper_ids: Sequence[int]) -> str | None:
    """``editions.paper_ids`` for these papers, in digest order (``None`` for none)."""
    return ",".join(map(str, paper_ids)) or None


def parse_paper_list(value: str | None) -> list[int]:
    """The paper ids an ``editions.paper_ids`` value holds, in digest order."""
    return [int(p) for p in value.split(",")] if value else []


# A reader's "more like this" (+1) / "less like this" (-1) on one paper; a new vote replaces the
# old one. ``topic`` is the digest section the paper was in, when known. Erased with the reader.
votes = Table(
    "votes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "subscriber_id", Integer, ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False
    ),
    Column("paper_id", Integer, ForeignKey("papers.id", ondelete="CASCADE"), nullable=False),
    Column("value", Integer, nullable=False),
    Column("topic", String(64)),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("subscriber_id", "paper_id", name="uq_votes_subscriber_paper"),
    CheckConstraint("value IN (1, -1)", name="ck_votes_value"),
)

source_state = Table(
    "source_state",
    metadata,
    Column("source", String(100), primary_key=True),
    Column("etag", Text),
    Column("last_modified", Text),
    Column("last_fetch", UTCDateTime),
    Column("last_success", UTCDateTime),
    Column("last_error", Text),
    Column("last_count", Integer),
    Column("consecutive_failures", Integer, nullable=False, default=0),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(20), nullable=False),
    Column("started", UTCDateTime, nullable=False),
    Column("finished", UTCDateTime),
    Column("status", String(20), nullable=False),
    Column("counts", JSON),
    Column("error", Text),
    Column("duration", Float),
)

embeddings = Table(
    "embeddings",
    metadata,
    Column("model", String(200), primary_key=True),
    Column("text_hash", String(64), primary_key=True),
    Column("vector", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)
"""Sentence-embedding vectors (float32, little-endian) by model and the hash of the text they
embed: a paper's title and abstract, a topic's query. A paper whose text changes gets a new
hash and so a new vector; old rows are pruned by age (:meth:`VectorStore.prune_vectors`)."""

# A reader's own topics (issue 45, migration 0016): their sentence, its hash (what its vector is
# stored under in ``embeddings``), example papers as versionless arXiv ids ("2401.04088,...").
# Erased with the reader; never read by the public archive.
own_topics = Table(
    "own_topics",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "subscriber_id", Integer, ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False
    ),
    Column("position", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("text_hash", String(64), nullable=False),
    Column("examples", Text, nullable=False, default=""),
    Column("created", UTCDateTime, nullable=False),
    Column("updated", UTCDateTime, nullable=False),
    sqlite_autoincrement=True,
)
Index("ix_own_topics_subscriber_id", own_topics.c.subscriber_id, own_topics.c.position)
