"""The ``fetch:`` section and the arXiv API source keys: defaults, and errors naming the line."""

from __future__ import annotations

from datetime import date

import pytest

from newsletter.config import parse_config
from newsletter.errors import ConfigError
from newsletter.sources.fetch import Fetcher


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "n.yaml")
    return str(info.value)


def test_defaults_are_polite() -> None:
    settings, _ = parse_config("sources: []\n")
    f = settings.fetch
    assert (f.timeout, f.host_delay, f.retries, f.max_bytes) == (30.0, 1.0, 3, 20 * 1024 * 1024)
    assert f.proxy is None


def test_fetch_settings_reach_the_fetcher() -> None:
    settings, _ = parse_config(
        "fetch:\n  timeout: 5\n  max_bytes: 2048\n  retries: 1\n  host_delay: 0.5\n"
        "  proxy: http://proxy.internal:3128\n"
    )
    with Fetcher.from_settings(settings.fetch, contact="ops@example.org") as f:
        assert (f.max_bytes, f.retries, f.host_delay, f.proxy) == (
            2048,
            1,
            0.5,
            "http://proxy.internal:3128",
        )


def test_arxiv_api_source() -> None:
    settings, _ = parse_config(
        "sources:\n"
        "  - name: backfill\n"
        "    kind: arxiv_api\n"
        "    url: https://export.arxiv.org/api/query\n"
        "    categories: [cs.DC, cs.LG]\n"
        "    date_from: 2026-11-01\n"
        "    page_size: 200\n"
    )
    s = settings.sources[0]
    assert s.categories == ["cs.DC", "cs.LG"] and s.date_from == date(2026, 11, 1)
    assert (s.page_size, s.max_pages, s.page_delay) == (200, 10, 3.0)


def test_errors_name_the_line_and_the_fix() -> None:
    assert "n.yaml:2: fetch.proxy: 'proxy:3128' is not a proxy URL" in problems(
        "fetch:\n  proxy: proxy:3128\n"
    )
    assert "n.yaml:3: fetch.retries" in problems("fetch:\n  timeout: 3\n  retries: 99\n")
    text = "sources:\n  - name: blog\n    kind: feed\n    url: x.xml\n    categories: [cs.DC]\n"
    assert "n.yaml:5: sources[0].categories: only arxiv_api sources take 'categories'" in problems(
        text
    )
    text = (
        "sources:\n  - name: api\n    kind: arxiv_api\n    url: https://export.arxiv.org/api/query\n"
        "    date_from: 2026-11-10\n    date_to: 2026-11-01\n"
    )
    assert "n.yaml:6: sources[0].date_to: date_to is before date_from" in problems(text)
    text = "sources:\n  - name: api\n    kind: arxiv_api\n    url: x\n    page_size: 5000\n"
    assert "n.yaml:5: sources[0].page_size" in problems(text)
    text = "sources:\n  - name: api\n    kind: arxiv_api\n    url: x\n    categories: [CS DC]\n"
    assert "is not an arXiv category" in problems(text)
