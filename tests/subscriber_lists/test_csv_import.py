"""``subscribers import`` in batches: a handful of statements per batch, not several per row,
and the same decisions a one-by-one add makes, across batch boundaries too. SQLite and
PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.models import SubscriberStatus
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscriber_lists.csv_import import import_csv
from tests.conftest import base_config, write_config


def _config(tmp_path: Path, db_url: str) -> Config:
    from newsletter.config import load_config

    data = base_config(db_url, web={"secret_key": "import-test-secret-0123456789abcdefgh"})
    return load_config(write_config(tmp_path, data))


def _statements(store: Store) -> list[str]:
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    return seen


def test_an_import_costs_a_few_statements_per_batch(
    tmp_path: Path, db_url: str, store: Store
) -> None:
    config = _config(tmp_path, db_url)
    rows = 3000
    path = tmp_path / "people.csv"
    lines = ["email,name,topics"] + [
        f"reader{i}@lab{i % 50}.example.org,Reader {i},{'rendering' if i % 2 else 'gpu-kernels'}"
        for i in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    statements = _statements(store)

    report = import_csv(Services(config, store), path, utcnow())

    assert report.added == rows and not report.problems
    assert store.count_subscribers(SubscriberStatus.ACTIVE) == rows
    sub = store.get_subscriber("reader7@lab7.example.org")
    assert sub is not None and sub.topics == ("rendering",) and sub.name == "Reader 7"
    # Two batches of 2,000 rows; each: look up present, look up said-no, (erased: only when
    # someone was ever erased), insert subscribers, find or return their ids, insert topics.
    # A row-by-row import made about 5 statements per row (15,000 here).
    writes = [s for s in statements if not s.lstrip().upper().startswith(("BEGIN", "COMMIT"))]
    assert len(writes) <= 2 * 6 + 2, writes[:20]


def test_batches_decide_as_one_by_one_adds_do(tmp_path: Path, db_url: str, store: Store) -> None:
    """A repeated address, a said-no address in another letter case, and a row that follows
    an unsubscribed row of the same address in another batch."""
    config = _config(tmp_path, db_url)
    now = utcnow()
    store.add_subscriber("Gone@example.org", topics=["rendering"], now=now)
    store.set_status("Gone@example.org", SubscriberStatus.UNSUBSCRIBED, now)
    path = tmp_path / "people.csv"
    path.write_text(
        "email,status,topics\n"
        "ada@example.org,,rendering\n"  # line 2
        "ada@example.org,,rendering\n"  # 3: the same again: already present
        "GONE@example.org,,rendering\n"  # 4: said no, in another letter case: refused
        "bob@example.org,unsubscribed,rendering\n"  # 5: kept unsubscribed
        "Bob@example.org,,rendering\n",  # 6: next batch: bob said no (any case): refused
        encoding="utf-8",
    )
    import newsletter.subscriber_lists.csv_import as importer

    old, importer.BATCH = importer.BATCH, 4  # rows 2-5 in one batch, row 6 in the next
    try:
        report = import_csv(Services(config, store), path, now)
    finally:
        importer.BATCH = old

    assert report.added == 2 and report.kept == 1 and report.present == 1
    assert [p.split(": ", 1)[0] for p in report.problems] == [f"{path}:4", f"{path}:6"]
    assert "Gone@example.org: unsubscribed" in report.problems[0]
    assert "bob@example.org: unsubscribed" in report.problems[1]
    assert store.get_subscriber("Bob@example.org") is None
    gone = store.get_subscriber("Gone@example.org")
    assert gone is not None and gone.status is SubscriberStatus.UNSUBSCRIBED
