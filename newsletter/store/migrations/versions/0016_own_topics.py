"""own_topics: topics readers write themselves (issue 45)

A sentence of at most ``own_topics.max_chars`` and up to ``own_topics.max_examples`` example
papers per topic, in the reader's order; the sentence's vector lives in ``embeddings`` under
``text_hash``. Ids are never reused (SQLite AUTOINCREMENT), since an own topic's name in votes
and mailed layouts is ``own.<id>``.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import newsletter.store.tables

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "own_topics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("text_hash", sa.String(length=64), nullable=False),
        sa.Column("examples", sa.Text(), nullable=False),
        sa.Column("created", newsletter.store.tables.UTCDateTime(), nullable=False),
        sa.Column("updated", newsletter.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["subscriber_id"],
            ["subscribers.id"],
            name=op.f("fk_own_topics_subscriber_id_subscribers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_own_topics")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_own_topics_subscriber_id", "own_topics", ["subscriber_id", "position"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_own_topics_subscriber_id", table_name="own_topics")
    op.drop_table("own_topics")
