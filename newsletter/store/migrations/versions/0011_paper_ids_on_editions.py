"""editions carry their papers: ``editions.paper_ids`` replaces the ``sent_papers`` table

A sent digest wrote one ``sent_papers`` row per paper, about 20, each with its primary key, its
edition index and a foreign-key check (a locking read of the edition) on PostgreSQL: most of
the database server's work per digest. Now the sent mark writes the papers, in digest order,
into the edition's own row (``"12,7,40"``): one row per digest, deleted with its edition.

A send reads a reader's recent editions to leave out what they already got (through the
``(subscriber_id, edition_date)`` unique index), and the archive reads one edition's list.
An edition keeps the papers it carried even when an earlier edition carried one of them too
(``sent_papers`` kept only the first).

The upgrade copies every ``sent_papers`` row (in paper id order: the table kept no digest
order); the downgrade writes them back.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("editions", sa.Column("paper_ids", sa.Text(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "UPDATE editions AS e SET paper_ids = s.ids FROM (SELECT edition_id, "
            "string_agg(paper_id::text, ',' ORDER BY paper_id) AS ids FROM sent_papers "
            "GROUP BY edition_id) AS s WHERE e.id = s.edition_id"
        )
    else:
        op.execute(
            "UPDATE editions SET paper_ids = (SELECT group_concat(paper_id, ',') FROM "
            "(SELECT paper_id FROM sent_papers AS sp WHERE sp.edition_id = editions.id "
            "ORDER BY paper_id)) WHERE id IN (SELECT edition_id FROM sent_papers)"
        )
    op.drop_index("ix_sent_papers_edition", table_name="sent_papers")
    op.drop_table("sent_papers")


def downgrade() -> None:
    op.create_table(
        "sent_papers",
        sa.Column("subscriber_id", sa.Integer(), nullable=False),
        sa.Column("paper_id", sa.Integer(), nullable=False),
        sa.Column("edition_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["edition_id"],
            ["editions.id"],
            name="fk_sent_papers_edition_id_editions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("subscriber_id", "paper_id", name="pk_sent_papers"),
    )
    op.create_index("ix_sent_papers_edition", "sent_papers", ["edition_id"], unique=False)
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, subscriber_id, paper_ids FROM editions WHERE paper_ids IS NOT NULL "
            "ORDER BY id"
        )
    ).all()
    seen: set[tuple[int, int]] = set()  # the table keeps a paper's first edition per reader
    out = []
    for eid, sid, ids in rows:
        for pid in (int(p) for p in ids.split(",") if p):
            if (sid, pid) not in seen:
                seen.add((sid, pid))
                out.append({"s": sid, "p": pid, "e": eid})
    if out:
        bind.execute(
            sa.text("INSERT INTO sent_papers (subscriber_id, paper_id, edition_id) VALUES (:s, :p, :e)"),
            out,
        )
    with op.batch_alter_table("editions", schema=None) as batch_op:
        batch_op.drop_column("paper_ids")
