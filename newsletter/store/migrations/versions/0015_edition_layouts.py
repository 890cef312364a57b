"""``editions.layout``: what a mailed digest showed besides its papers

"View in browser" ranked a sent edition's papers again, with that day's signals, topics and
votes, and showed another digest than the one mailed (issue 43): another header, other section
counts, papers moved to "Also in this edition", other reasons. The sent mark now records, with
the papers (``paper_ids``), the sections, each item's reason and the signals its card showed,
as short JSON (:mod:`newsletter.edition.layout`). A nullable column: editions sent before it
have none, and their page says it ranked them again.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("editions", sa.Column("layout", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("editions", schema=None) as batch_op:
        batch_op.drop_column("layout")
