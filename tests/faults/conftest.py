"""Every test in ``tests/faults/`` runs a real ``newsletter`` process and kills, stops or starves
it (or its relay, or its database): all are marked ``slow``, so ``make test-fast`` leaves this
directory out and ``make test`` runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests collected from this directory (the hook sees the whole session)."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
