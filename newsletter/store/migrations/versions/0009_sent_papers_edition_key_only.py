"""sent_papers: keep the edition's foreign key, drop the subscriber's and the paper's

A sent digest writes about 20 ``sent_papers`` rows, and PostgreSQL checked each against three
foreign keys: one ``SELECT … FOR KEY SHARE`` per key per row. Every concurrent commit locked the
same day's paper rows, so the checks cost more than the rows: 0.35 ms of server CPU per digest
out of 0.91 (``bench/bench_send.py``, 10,000 subscribers). Both keys are redundant:

- the subscriber: ``edition_id`` names an edition, the edition names its subscriber, and both
  cascade (deleting a subscriber deletes their editions, which deletes their sent papers);
- the paper: a sent paper's id comes from the stored papers the digest was ranked from, and
  papers are never deleted.

The edition's key stays, with its cascade, so deleting an edition or a subscriber still
removes their sent papers in the database itself.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sent_papers", schema=None) as batch_op:
        batch_op.drop_constraint("fk_sent_papers_subscriber_id_subscribers", type_="foreignkey")
        batch_op.drop_constraint("fk_sent_papers_paper_id_papers", type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("sent_papers", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_sent_papers_subscriber_id_subscribers",
            "subscribers",
            ["subscriber_id"],
            ["id"],
            ondelete="CASCADE",
        )
        batch_op.create_foreign_key(
            "fk_sent_papers_paper_id_papers", "papers", ["paper_id"], ["id"], ondelete="CASCADE"
        )
