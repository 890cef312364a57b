"""embeddings: sentence-embedding vectors by model and text hash (semantic ranking)

Each paper's title and abstract, and each topic's query, is embedded once and kept here under
the model's name and the SHA-256 of the text, so a send finds every vector it needs without
loading the model, and a revised paper (new text, new hash) is embedded again.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "embeddings",
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("text_hash", sa.String(64), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("model", "text_hash", name="pk_embeddings"),
    )


def downgrade() -> None:
    op.drop_table("embeddings")
