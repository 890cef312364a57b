"""index sent_papers.edition_id: deleting an edition (a forgotten subscriber) is an index probe

Without it, every edition deleted (``subscribers remove --forget`` cascades through a
subscriber's editions to their sent papers) scans the whole ``sent_papers`` table once.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sent_papers", schema=None) as batch_op:
        batch_op.create_index("ix_sent_papers_edition", ["edition_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sent_papers", schema=None) as batch_op:
        batch_op.drop_index("ix_sent_papers_edition")
