"""consent: subscriber ids are never reused on SQLite; erased addresses leave a keyed hash

``subscribers`` is rebuilt on SQLite with ``AUTOINCREMENT`` (PostgreSQL's serial never reuses
ids), and ``forgotten`` keeps a keyed hash of each erased address, so nothing but a fresh
confirmation by email makes it a subscriber again. ``Store.upgrade`` turns SQLite's foreign
keys off around migrations: dropping the old table must not cascade to its children.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import newsletter.store.tables

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table(
            "subscribers", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
    op.create_table(
        "forgotten",
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("at", newsletter.store.tables.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_forgotten")),
    )


def downgrade() -> None:
    op.drop_table("forgotten")
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table(
            "subscribers", recreate="always", table_kwargs={"sqlite_autoincrement": False}
        ):
            pass
