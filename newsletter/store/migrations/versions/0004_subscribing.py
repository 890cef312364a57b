"""subscribing: preferred hour, frequency, confirmation time; shared rate-limit events

Revision ID: 0004
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import newsletter.store.tables

revision = "0004"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscribers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("send_hour", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("frequency", sa.String(length=10), nullable=False, server_default="daily")
        )
        batch_op.add_column(
            sa.Column("confirmed", newsletter.store.tables.UTCDateTime(), nullable=True)
        )
    op.create_table(
        "rate_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=120), nullable=False),
        sa.Column("at", newsletter.store.tables.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rate_events")),
    )
    with op.batch_alter_table("rate_events", schema=None) as batch_op:
        batch_op.create_index("ix_rate_events_key_at", ["key", "at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rate_events", schema=None) as batch_op:
        batch_op.drop_index("ix_rate_events_key_at")
    op.drop_table("rate_events")
    with op.batch_alter_table("subscribers", schema=None) as batch_op:
        batch_op.drop_column("confirmed")
        batch_op.drop_column("frequency")
        batch_op.drop_column("send_hour")
