"""The Store: every query newsletter runs, on SQLite and PostgreSQL alike.

This module only composes :class:`Store` from one mixin per domain and keeps the names other
modules import from here. Where each domain lives:

- :mod:`.base`: the engine, connection retries, errors as :class:`StoreError`, migrations;
- :mod:`.guard`: every public method's database errors raised as :class:`StoreError`;
- :mod:`newsletter.models`: the record types (``PaperWrite``, ``EditionClaim``, ``LedgerOp``, …),
  re-exported here for older imports;
- :mod:`.papers`: papers, their sources and signals, votes;
- :mod:`.subscribers`: subscribers, topics, forgotten addresses, imports;
- :mod:`.consent`: confirmation, preferences, unsubscribing, rate limits;
- :mod:`.ledger` and :mod:`.ledger_sql`: claims, sends and marks (the edition ledger);
- :mod:`.ops`: the ledger read by operators: statuses, settlement, the dashboard;
- :mod:`.runs`: run records and leases; :mod:`.sources`: each source's fetch state;
- :mod:`.bounces`: bounce and complaint events and suppression;
- :mod:`.vectors`: embedding vectors for semantic ranking;
- :mod:`.own_topics`: readers' own topics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from newsletter.models import (
    EditionClaim,
    EditionRecord,
    LedgerOp,
    PaperWrite,
    RunRecord,
    SourceState,
)
from newsletter.store.base import (
    MIGRATIONS,
    SUPPORTED,
    StoreBase,
    StoreErrors,
    database_error,
    normalize_url,
    safe_url,
)
from newsletter.store.bounces import BounceStore
from newsletter.store.consent import ConsentStore
from newsletter.store.guard import guard_errors
from newsletter.store.ledger import LedgerStore
from newsletter.store.ops import OpsStore
from newsletter.store.own_topics import OwnTopicStore
from newsletter.store.papers import (
    VELOCITY_WINDOW,
    PaperStore,
    upvote_velocity,
)
from newsletter.store.run_records import RunStore
from newsletter.store.sources import SourceStore
from newsletter.store.subscribers import SubscriberStore
from newsletter.store.vectors import VectorStore

__all__ = [
    "MIGRATIONS",
    "SUPPORTED",
    "VELOCITY_WINDOW",
    "EditionClaim",
    "EditionRecord",
    "LedgerOp",
    "PaperWrite",
    "RunRecord",
    "SourceState",
    "Store",
    "StoreErrors",
    "database_error",
    "normalize_url",
    "safe_url",
    "upvote_velocity",
]


@guard_errors
class Store(
    PaperStore,
    SubscriberStore,
    OwnTopicStore,
    ConsentStore,
    LedgerStore,
    OpsStore,
    RunStore,
    SourceStore,
    VectorStore,
    StoreBase,
    BounceStore,
):
    """All persistence. Construct with a SQLAlchemy URL; call :meth:`upgrade` once to migrate.

    Every public method raises a database failure as a :class:`~newsletter.errors.StoreError`
    subclass, never a SQLAlchemy or driver exception (:mod:`.guard`, and the ledger writer's
    session maps its own); the raw :attr:`engine` is the exception to that rule. Callers
    should depend on :class:`~newsletter.store.protocol.StoreProtocol` (or one of its domain
    protocols), not on this class.
    """


if TYPE_CHECKING:  # mypy: the concrete Store is a StoreProtocol (and so each part of it)
    from newsletter.store.protocol import SendStore, StoreProtocol

    def _store_is_a_store_protocol(store: Store) -> StoreProtocol:
        return store

    def _store_is_a_send_store(store: Store) -> SendStore:
        return store
