"""Alembic environment: runs on the connection the Store hands over (or a URL from alembic.ini)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from newsletter.store.tables import metadata

config = context.config
connection = config.attributes.get("connection")


def _run(conn: object) -> None:
    context.configure(
        connection=conn,  # type: ignore[arg-type]
        target_metadata=metadata,
        render_as_batch=True,  # SQLite needs batch mode for ALTER TABLE
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    _run(connection)
else:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set sqlalchemy.url, or run migrations with 'newsletter db upgrade'")
    with create_engine(url).connect() as conn:
        _run(conn)
        conn.commit()
