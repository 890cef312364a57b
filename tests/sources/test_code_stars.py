"""Code repositories' stars from Hugging Face Daily Papers (issue 29, item 5): parsed, stored
(migration 0014), updated like the upvotes, shown in the digest; never fetched from GitHub."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from newsletter.config import Config
from newsletter.digest.render import Renderer
from newsletter.sources import hf_daily
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests import digests as D
from tests.conftest import FEEDS, base_config
from tests.sources.test_ingest import MONDAY


def _hf(file: str) -> dict[str, str]:
    return {"name": "hf", "kind": "hf_daily", "url": str(FEEDS / file)}


def _fetch_hf(
    db_url: str, make_config: Callable[..., Config], store: Store, edition: str, now: datetime
) -> None:
    """Fetch the Hugging Face Daily Papers file of 2026-11-17's ``edition`` (morning, evening)."""
    config = make_config(
        base_config(db_url, sources=[_hf(f"hf-daily-papers-2026-11-17-{edition}.json")])
    )
    run_fetch(config, store, now)


def test_stars_are_parsed_only_with_a_repository() -> None:
    body = (FEEDS / "hf-daily-papers-2026-11-17-morning.json").read_bytes()
    papers = {p.key: p for p in hf_daily.parse(body, "https://example.org").papers}
    assert papers["2611.00017"].code_stars == 332
    assert papers["2611.00017"].code_url == "https://github.com/example-lab/2611-00017"
    assert papers["2611.00004"].code_stars is None and papers["2611.00004"].code_url is None
    bad = b'[{"paper": {"id": "2611.00017", "title": "T", "githubStars": 5}}]'
    assert hf_daily.parse(bad, "https://example.org").papers[0].code_stars is None  # no repo


def test_stars_are_stored_and_follow_the_source(
    db_url: str, make_config: Callable[..., Config], store: Store
) -> None:
    _fetch_hf(db_url, make_config, store, "morning", MONDAY)
    assert store.papers_by_keys(["2611.00017"])["2611.00017"].code_stars == 332
    later = MONDAY + timedelta(hours=12)
    _fetch_hf(db_url, make_config, store, "evening", later)
    stored = store.papers_by_keys(["2611.00017", "2611.00004"])
    assert stored["2611.00017"].code_stars == 468
    assert stored["2611.00004"].code_stars is None


def test_the_digest_shows_stored_stars(
    db_url: str, make_config: Callable[..., Config], store: Store
) -> None:
    _fetch_hf(db_url, make_config, store, "morning", MONDAY)
    paper = store.papers_by_keys(["2611.10044"])["2611.10044"]
    html = (
        Renderer(D.settings())
        .render(D.digest([paper], per_topic=1, topics=D.TOPICS[:1]), D.links())
        .html
    )
    assert "&#9733; 786 GitHub stars" in html
    assert 'href="https://github.com/example-lab/2611-10044"' in html
