"""bounces: bounce/complaint events and each subscriber's bounce score

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import newsletter.store.tables

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bounce_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=True),
        sa.Column("diagnostic", sa.Text(), nullable=False),
        sa.Column("edition", sa.Date(), nullable=True),
        sa.Column("message_id", sa.String(length=255), nullable=True),
        sa.Column("provider_id", sa.String(length=255), nullable=True),
        sa.Column("event_key", sa.String(length=64), nullable=False),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("counted", sa.Float(), nullable=False),
        sa.Column("received_at", newsletter.store.tables.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["subscriber_id"],
            ["subscribers.id"],
            name=op.f("fk_bounce_events_subscriber_id_subscribers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bounce_events")),
        sa.UniqueConstraint("event_key", name=op.f("uq_bounce_events_event_key")),
    )
    op.create_index("ix_bounce_events_subscriber", "bounce_events", ["subscriber_id"])
    op.create_index("ix_bounce_events_edition_kind", "bounce_events", ["edition", "kind"])
    op.create_index("ix_bounce_events_received_at", "bounce_events", ["received_at"])
    op.create_table(
        "bounce_scores",
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("last_bounce", sa.Date(), nullable=True),
        sa.Column("suppressed_reason", sa.Text(), nullable=True),
        sa.Column("suppressed_at", newsletter.store.tables.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["subscriber_id"],
            ["subscribers.id"],
            name=op.f("fk_bounce_scores_subscriber_id_subscribers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("subscriber_id", name=op.f("pk_bounce_scores")),
    )
    op.create_index("ix_editions_message_id", "editions", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_editions_message_id", table_name="editions")
    op.drop_table("bounce_scores")
    op.drop_table("bounce_events")
