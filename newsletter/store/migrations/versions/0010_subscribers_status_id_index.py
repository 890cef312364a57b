"""index subscribers by (status, id): a send lists its readers by key, on a fresh database too

A send lists the active subscribers in id order, 500 at a time (``WHERE status = 'active' AND
id > :last ORDER BY id LIMIT 500``). With an index on ``status`` alone and no statistics yet
(a new or freshly imported database), PostgreSQL took the status index, read every active
subscriber and sorted them, for each batch of 500: 5.1 million index entries for a
50,000-subscriber send, a billion and more for a million. On ``(status, id)`` each batch reads
its 500 entries. The same index serves everything the old one did (lookups by status).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscribers", schema=None) as batch_op:
        batch_op.create_index("ix_subscribers_status_id", ["status", "id"], unique=False)
        batch_op.drop_index("ix_subscribers_status")


def downgrade() -> None:
    with op.batch_alter_table("subscribers", schema=None) as batch_op:
        batch_op.create_index("ix_subscribers_status", ["status"], unique=False)
        batch_op.drop_index("ix_subscribers_status_id")
