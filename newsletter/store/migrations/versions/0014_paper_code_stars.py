"""``papers.code_stars``: the code repository's stars, when a source gives them

Hugging Face Daily Papers gives, for many papers, a GitHub repository and its star count. The
digest shows the stars beside the upvotes (issue 29); they are stored like the upvotes (the
latest value a source gave) and never fetched from GitHub. A nullable column: existing rows have
no stars until a source gives them again.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("papers", sa.Column("code_stars", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("papers", schema=None) as batch_op:
        batch_op.drop_column("code_stars")
