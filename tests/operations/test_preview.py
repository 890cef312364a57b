"""What a subscriber would get today (:mod:`newsletter.operations.preview`), called directly on the
bundled demo feeds, on SQLite and the real PostgreSQL."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from newsletter.config import Config, load_config
from newsletter.edition.build import day_ranker
from newsletter.models import EditionStatus, Subscriber
from newsletter.operations.preview import rank_preview, render_preview
from newsletter.services import Services
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.subscriber_lists.from_config import seed_subscribers

ROOT = Path(__file__).resolve().parent.parent.parent
NOW = datetime(2026, 11, 17, 18, 0, tzinfo=UTC)


def _demo(tmp_path: Path, db_url: str, **digest: object) -> Config:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    path = tmp_path / "config" / "demo.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["database"]["url"] = db_url
    data["digest"].update(digest)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_config(path)


@pytest.fixture
def demo(tmp_path: Path, db_url: str) -> Iterator[tuple[Config, Store]]:
    config = _demo(tmp_path, db_url)
    store = Store(config.database_url)
    store.upgrade()
    seed_subscribers(config, store)
    run_fetch(config, store, NOW)
    yield config, store
    store.close()


def _sub(store: Store, email: str) -> Subscriber:
    sub = store.get_subscriber(email)
    assert sub is not None
    return sub


def test_the_ranking_has_each_topic_with_scores_reasons_and_explanations(
    demo: tuple[Config, Store],
) -> None:
    config, store = demo
    grace = _sub(store, "grace@example.org")
    ranking = rank_preview(Services(config, store, clock=lambda: NOW), grace, NOW)
    assert ranking.subscriber == grace
    assert ranking.papers == len(store.recent_papers(NOW - timedelta(days=7))) > 0
    assert (ranking.already_sent, ranking.votes, ranking.missing_topics) == (0, 0, ())
    assert [s.name for s in ranking.sections] == ["gpu-kernels", "llm-serving"]
    assert [s.title for s in ranking.sections] == ["GPU kernels", "LLM serving"]
    kernels = ranking.sections[0]
    assert kernels.papers[0].item.paper.key == "2611.00017"  # CUDA-L2
    assert "cuBLAS, matrix multiplication, CUDA" in kernels.papers[0].item.reason
    keys = [p.item.paper.key for s in ranking.sections for p in s.papers]
    assert len(keys) == len(set(keys)) > 0  # never twice across sections
    for section in ranking.sections:
        scores = [p.item.score for p in section.papers]
        assert scores == sorted(scores, reverse=True)
        for ranked in section.papers:
            ex = ranked.explanation
            assert ex.topic == ranked.item.topic == section.name
            assert ex.shown and ex.relevance > 0
            assert ex.lines()[0].startswith(f"relevance {ex.relevance:.3f}")
    # left out: the ranker's count for each topic
    _, ranker = day_ranker(config, store, NOW)  # the ranker rank_preview ranks with
    assert [s.left_out for s in ranking.sections] == [
        ranker.left_out["gpu-kernels"],
        ranker.left_out["llm-serving"],
    ]


def test_papers_already_sent_are_left_out_and_votes_counted(
    demo: tuple[Config, Store],
) -> None:
    config, store = demo
    ada = _sub(store, "ada@example.org")
    first = rank_preview(Services(config, store, clock=lambda: NOW), ada, NOW)
    top = first.sections[0].papers[0].item.paper
    claim = store.claim_edition(ada.id, date(2026, 11, 16), "<a@x>", NOW, owner="test")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=[top.id])
    second = store.papers_by_keys([first.sections[0].papers[1].item.paper.key])
    store.set_vote(ada.id, next(iter(second.values())).id, -1, "llm-serving", NOW)

    again = rank_preview(Services(config, store, clock=lambda: NOW), ada, NOW)
    assert (again.already_sent, again.votes) == (1, 1)
    assert top.key not in [p.item.paper.key for s in again.sections for p in s.papers]


def test_topics_gone_from_the_config_are_named(demo: tuple[Config, Store]) -> None:
    config, store = demo
    sub, _ = store.add_subscriber("old@example.org", topics=("moe", "gpu-kernels"), now=NOW)
    ranking = rank_preview(Services(config, store, clock=lambda: NOW), sub, NOW)
    assert ranking.missing_topics == ("moe",)
    assert [s.name for s in ranking.sections] == ["gpu-kernels"]


def test_the_rendered_digest_holds_the_ranked_papers(demo: tuple[Config, Store]) -> None:
    config, store = demo
    grace = _sub(store, "grace@example.org")
    shown = render_preview(Services(config, store, clock=lambda: NOW), grace, NOW)
    ranked = rank_preview(Services(config, store, clock=lambda: NOW), grace, NOW)
    assert shown.digest.subscriber == grace
    assert shown.digest.edition_date == date(2026, 11, 17)  # Europe/Berlin's date at NOW
    assert [i.paper.key for i in shown.digest.items] == [
        p.item.paper.key for s in ranked.sections for p in s.papers
    ]
    assert not shown.skipped
    assert "CUDA-L2" in shown.rendered.html and "CUDA-L2" in shown.rendered.text
    assert shown.rendered.subject
    assert store.sent_paper_ids([grace.id])[grace.id] == set()  # nothing recorded


@pytest.mark.parametrize("empty", ["skip", "send"])
def test_an_empty_digest_is_skipped_only_with_empty_skip(
    tmp_path: Path, db_url: str, empty: str
) -> None:
    config = _demo(tmp_path, db_url, empty=empty)
    store = Store(config.database_url)
    try:
        store.upgrade()
        seed_subscribers(config, store)  # no papers fetched: nothing new for anyone
        shown = render_preview(
            Services(config, store, clock=lambda: NOW), _sub(store, "ada@example.org"), NOW
        )
        assert shown.digest.is_empty and shown.skipped is (empty == "skip")
        assert shown.rendered.html
        run_fetch(config, store, NOW)  # now there is something new: sent either way
        shown = render_preview(
            Services(config, store, clock=lambda: NOW), _sub(store, "ada@example.org"), NOW
        )
        assert not shown.digest.is_empty and not shown.skipped
    finally:
        store.close()
