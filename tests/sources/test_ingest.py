"""Ingest end to end on SQLite and the real PostgreSQL: merging, versions, signals, nothing lost,
zero writes on re-ingest, and one bad source never stopping the rest."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select

from bench.bench_ingest import WriteCounter, synthetic_rss
from newsletter.config import Config
from newsletter.sources.fetch import Fetcher
from newsletter.sources.ingest import FetchReport, SourceReport, run_fetch
from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import FEEDS, base_config
from tests.feedserver import Answer, FeedServer, Seen, feed_server

MONDAY = datetime(2026, 11, 16, 6, 0, tzinfo=UTC)
TUESDAY = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


def src(name: str, kind: str, file: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "url": str(FEEDS / file), **kw}


@pytest.fixture
def configure(db_url: str, make_config: Callable[..., Config]) -> Callable[..., Config]:
    def make(*sources: dict[str, Any], **overrides: Any) -> Config:
        return make_config(base_config(db_url, sources=list(sources), **overrides))

    return make


def by_name(report: FetchReport) -> dict[str, SourceReport]:
    return {s.source: s for s in report.sources}


def accounted(s: SourceReport) -> bool:
    """Every entry the source listed is stored (new/updated/unchanged/unannounced), merged or
    skipped."""
    return s.entries == s.stored + s.merged + len(s.skipped)


GOOD = [
    src("cs-dc", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-16.xml"),
    src("cs-lg", "arxiv_rss", "arxiv-rss-cs.LG-2026-11-16.xml"),
    src("api", "arxiv_api", "arxiv-api-cat-cs.DC.atom"),
    src("hf", "hf_daily", "hf-daily-papers-2026-11-17-morning.json"),
    src("blog", "feed", "lab-blog.atom"),
]


def test_one_paper_from_rss_api_hf_and_a_blog_is_one_record(
    configure: Callable[..., Config], store: Store
) -> None:
    report = run_fetch(configure(*GOOD), store, MONDAY)
    assert not report.failed
    assert all(accounted(s) for s in report.sources)
    p = store.papers_by_keys(["2611.00001"])["2611.00001"]
    assert set(p.sources) == {"cs-dc", "cs-lg", "api", "hf", "blog"}
    assert {"cs.DC", "cs.LG"} <= set(p.categories)
    assert p.upvotes is not None  # the Hugging Face signal merged onto the arXiv record
    with store.engine.connect() as conn:
        rows = conn.execute(select(t.papers.c.key).where(t.papers.c.key == "2611.00001")).all()
    assert len(rows) == 1
    for key in ("2611.00004", "2611.00016", "2611.00017"):
        assert len(store.papers_by_keys([key])[key].sources) >= 3, key


def test_all_good_files_hold_47_distinct_arxiv_papers(
    configure: Callable[..., Config], store: Store
) -> None:
    files = [
        src("dc16", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-16.xml"),
        src("lg16", "arxiv_rss", "arxiv-rss-cs.LG-2026-11-16.xml"),
        src("dc17", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-17.xml"),
        src("dc21", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-21-saturday.xml"),
        src("api", "arxiv_api", "arxiv-api-cat-cs.DC.atom"),
        src("hf-am", "hf_daily", "hf-daily-papers-2026-11-17-morning.json"),
        src("hf-pm", "hf_daily", "hf-daily-papers-2026-11-17-evening.json"),
    ]
    report = run_fetch(configure(*files), store, MONDAY)
    assert not report.failed, [s.errors for s in report.failed]
    assert store.count_papers() == 47
    assert by_name(report)["dc21"].entries == 0  # a Saturday: not an error


def test_cross_list_merges_and_replace_never_reannounces(
    configure: Callable[..., Config], store: Store
) -> None:
    monday = configure(
        src("cs-dc", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-16.xml"),
        src("cs-lg", "arxiv_rss", "arxiv-rss-cs.LG-2026-11-16.xml"),
    )
    run_fetch(monday, store, MONDAY)
    cross = store.papers_by_keys(["2611.00015"])["2611.00015"]
    assert set(cross.sources) == {"cs-dc", "cs-lg"}
    # A replacement of a paper we never saw is stored, but never announced as new.
    announced = {p.key for p in store.recent_papers(MONDAY - timedelta(days=1))}
    assert "2610.04417" not in announced and "2609.11873" not in announced
    assert store.papers_by_keys(["2610.04417"])["2610.04417"].version == 2
    assert "2611.00003" in announced

    tuesday = configure(src("cs-dc", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-17.xml"))
    report = run_fetch(tuesday, store, TUESDAY)
    s = by_name(report)["cs-dc"]
    assert (s.new, s.updated) == (12, 1)
    replaced = store.papers_by_keys(["2611.00003"])["2611.00003"]
    assert replaced.version == 2
    assert replaced.abstract.endswith("corrects Table 3.)")
    assert replaced.first_seen == MONDAY  # still Monday's paper
    new_today = {p.key for p in store.recent_papers(TUESDAY)}
    assert "2611.00003" not in new_today and len(new_today) == 12


def test_hf_signals_refresh_and_give_a_velocity(
    configure: Callable[..., Config], store: Store
) -> None:
    morning = configure(src("hf", "hf_daily", "hf-daily-papers-2026-11-17-morning.json"))
    evening = configure(src("hf", "hf_daily", "hf-daily-papers-2026-11-17-evening.json"))
    run_fetch(morning, store, TUESDAY.replace(hour=8))
    report = run_fetch(evening, store, TUESDAY.replace(hour=20))
    assert by_name(report)["hf"].new == 2 and by_name(report)["hf"].updated == 13
    papers = {p.key: p for p in store.recent_papers(TUESDAY)}
    top = papers["2611.00004"]
    assert (top.upvotes, top.comments) == (289, 15)
    assert top.upvote_velocity == pytest.approx((289 - 140) / 12)
    assert papers["2611.10046"].upvote_velocity is None  # one snapshot says nothing about speed
    with store.engine.connect() as conn:
        history = conn.execute(
            select(t.paper_signals.c.upvotes)
            .where(t.paper_signals.c.paper_id == top.id)
            .order_by(t.paper_signals.c.observed)
        ).all()
    assert [h[0] for h in history] == [140, 289]


def test_reingesting_an_unchanged_feed_writes_nothing(
    configure: Callable[..., Config], store: Store
) -> None:
    config = configure(*GOOD)
    first = run_fetch(config, store, MONDAY)
    counter = WriteCounter(store)
    again = run_fetch(config, store, MONDAY + timedelta(hours=1))
    assert counter.statements == 0
    assert again.new == 0 and again.updated == 0
    assert sum(s.unchanged for s in again.sources) == sum(s.stored for s in first.sources)
    # ... and the counter does see writes when there are some.
    run_fetch(
        configure(src("hf", "hf_daily", "hf-daily-papers-2026-11-17-evening.json")),
        store,
        MONDAY + timedelta(hours=2),
    )
    assert counter.statements > 0


def test_bad_sources_are_recorded_and_never_stop_the_rest(
    configure: Callable[..., Config], store: Store, tmp_path: Path
) -> None:
    big = tmp_path / "big.xml"
    big.write_bytes(synthetic_rss(5000))
    config = configure(
        src("truncated", "arxiv_rss", "bad/truncated.xml"),
        src("empty", "arxiv_rss", "bad/empty.xml"),
        src("html", "feed", "bad/html-instead.xml"),
        src("hostile", "arxiv_rss", "bad/hostile-entry.xml"),
        src("no-ids", "feed", "bad/no-ids.xml"),
        src("hf-bad", "hf_daily", "bad/hf-daily-papers-malformed.json"),
        src("hf-502", "hf_daily", "bad/hf-daily-papers-not-json.json"),
        src("missing", "feed", "does-not-exist.xml"),
        {"name": "big", "kind": "arxiv_rss", "url": str(big)},
        {
            "name": "refused",
            "kind": "feed",
            "url": "http://127.0.0.1:9/feed",
            "allow_private": True,
        },
        src("good", "arxiv_rss", "arxiv-rss-cs.LG-2026-11-16.xml"),
        fetch={"max_bytes": 1_000_000, "retries": 0},
    )
    report = by_name(run_fetch(config, store, MONDAY))
    assert all(accounted(s) for s in report.values())
    assert report["good"].ok and report["good"].new + report["good"].unchanged == 16
    assert report["truncated"].new == 10 and "malformed feed" in report["truncated"].errors[0]
    assert report["empty"].errors == ("empty response (0 bytes of feed)",)
    assert "HTML page" in report["html"].errors[0]
    assert "not JSON" in report["hf-502"].errors[0]
    assert "cannot read" in report["missing"].errors[0]
    assert "1000000-byte cap" in report["big"].errors[0]
    assert report["refused"].errors[0].startswith("cannot connect to 127.0.0.1:9")
    hf_bad = report["hf-bad"]
    assert hf_bad.ok and hf_bad.new + hf_bad.updated + hf_bad.unchanged == 2
    assert len(hf_bad.skipped) == 3
    assert report["no-ids"].new == 1 and len(report["no-ids"].skipped) == 2
    for name in ("truncated", "empty", "html", "hf-502", "missing", "big", "refused"):
        state = store.source_state(name)
        assert state.last_error == "; ".join(report[name].errors), name
        assert state.consecutive_failures == 1
        assert state.last_success is None
    assert store.source_state("good").last_error is None
    hostile = store.papers_by_keys(["2611.09999"])["2611.09999"]
    assert hostile.title.startswith("<script>") and "\n" not in hostile.title


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with feed_server() as s:
        yield s


@pytest.fixture
def quiet_fetcher() -> Iterator[Callable[[list[float]], Fetcher]]:
    """Fetchers that record their waits instead of sleeping; closed after the test."""
    made: list[Fetcher] = []

    def make(sleeps: list[float]) -> Fetcher:
        made.append(Fetcher(host_delay=0, sleep=sleeps.append, rng=random.Random(0)))
        return made[-1]

    yield make
    for f in made:
        f.close()


def test_conditional_get_304_writes_no_papers(
    configure: Callable[..., Config],
    store: Store,
    server: FeedServer,
    quiet_fetcher: Callable[[list[float]], Fetcher],
) -> None:
    body = (FEEDS / "arxiv-rss-cs.DC-2026-11-16.xml").read_bytes()
    server.script("/rss", Answer(200, body, {"ETag": '"abc"'}), Answer(304))
    config = configure(
        {"name": "cs-dc", "kind": "arxiv_rss", "url": server.url("/rss"), "allow_private": True}
    )
    first = run_fetch(config, store, MONDAY, fetcher=quiet_fetcher([]))
    # 2 of the 20 are revisions of papers not seen before: stored, not announced as new
    assert first.new == 18 and first.unannounced == 2
    assert store.source_state("cs-dc").etag == '"abc"'
    counter = WriteCounter(store)
    second = run_fetch(config, store, TUESDAY, fetcher=quiet_fetcher([]))
    s = second.sources[0]
    assert s.not_modified and s.entries == 0 and s.ok
    assert counter.statements == 0
    assert server.seen("/rss")[1].headers["If-None-Match"] == '"abc"'
    assert store.source_state("cs-dc").last_success == TUESDAY


def test_429_with_retry_after_then_success(
    configure: Callable[..., Config],
    store: Store,
    server: FeedServer,
    quiet_fetcher: Callable[[list[float]], Fetcher],
) -> None:
    body = (FEEDS / "hf-daily-papers-2026-11-17-evening.json").read_bytes()
    server.script("/hf", Answer(429, b"", {"Retry-After": "12"}), Answer(200, body))
    config = configure(
        {"name": "hf", "kind": "hf_daily", "url": server.url("/hf"), "allow_private": True}
    )
    sleeps: list[float] = []
    report = run_fetch(config, store, MONDAY, fetcher=quiet_fetcher(sleeps))
    assert report.sources[0].ok and report.new == 15
    assert 12.0 in sleeps


def test_private_address_refused_unless_allowed(
    configure: Callable[..., Config],
    store: Store,
    server: FeedServer,
    quiet_fetcher: Callable[[list[float]], Fetcher],
) -> None:
    server.script("/rss", Answer(200, (FEEDS / "lab-blog.atom").read_bytes()))
    config = configure({"name": "blog", "kind": "feed", "url": server.url("/rss")})
    report = run_fetch(config, store, MONDAY, fetcher=quiet_fetcher([]))
    assert "loopback" in report.sources[0].errors[0] and server.seen("/rss") == []
    assert "allow_private" in store.source_state("blog").last_error  # type: ignore[operator]


def _api_pages(total: int, page_size: int) -> Callable[[Seen], Answer]:
    """An arXiv API stand-in: pages cut from the real page's entries, ids renumbered."""
    real = (FEEDS / "arxiv-api-cat-cs.DC.atom").read_text()
    head, _, rest = real.partition("<entry>")
    entry = "<entry>" + rest.split("</entry>")[0] + "</entry>\n"
    empty = (FEEDS / "arxiv-api-empty-page.atom").read_bytes()

    def route(seen: Seen) -> Answer:
        q = parse_qs(urlsplit(seen.path).query)
        start, size = int(q["start"][0]), int(q["max_results"][0])
        assert size == page_size
        if start >= total:
            return Answer(200, empty)
        entries = "".join(
            entry.replace("2611.00001", f"2610.{n:05d}")
            for n in range(start, min(total, start + size))
        )
        page = head.replace("41873", str(total)) + entries + "</feed>\n"
        return Answer(200, page.encode(), {"Content-Type": "application/atom+xml"})

    return route


def test_arxiv_api_backfill_paginates_politely(
    configure: Callable[..., Config],
    store: Store,
    server: FeedServer,
    quiet_fetcher: Callable[[list[float]], Fetcher],
) -> None:
    server.routes["/api/query"] = _api_pages(total=7, page_size=3)
    config = configure(
        {
            "name": "backfill",
            "kind": "arxiv_api",
            "url": server.url("/api/query"),
            "allow_private": True,
            "categories": ["cs.DC"],
            "date_from": "2026-10-01",
            "date_to": "2026-10-31",
            "page_size": 3,
            "page_delay": 3.0,
        }
    )
    sleeps: list[float] = []
    report = run_fetch(config, store, MONDAY, fetcher=quiet_fetcher(sleeps))
    s = report.sources[0]
    assert s.ok and s.entries == 7 and s.new == 0 and s.unannounced == 7  # backfill: not new
    starts = [parse_qs(urlsplit(r.path).query)["start"][0] for r in server.requests]
    assert starts == ["0", "3", "6"]  # stops at totalResults without asking for more
    query = parse_qs(urlsplit(server.requests[0].path).query)["search_query"][0]
    assert query == "cat:cs.DC AND submittedDate:[202610010000 TO 202610312359]"
    assert len(sleeps) == 2 and all(2.5 < w <= 3.0 for w in sleeps)  # one request per 3 s
    # A backfill stores papers but does not announce them as today's news.
    assert store.recent_papers(MONDAY - timedelta(days=1)) == []
    assert store.count_papers() == 7


def test_arxiv_api_stops_at_an_empty_page_and_at_max_pages(
    configure: Callable[..., Config],
    store: Store,
    server: FeedServer,
    quiet_fetcher: Callable[[list[float]], Fetcher],
) -> None:
    server.routes["/api/query"] = _api_pages(total=4, page_size=2)
    base = {
        "name": "backfill",
        "kind": "arxiv_api",
        "url": server.url("/api/query"),
        "allow_private": True,
        "query": "cat:cs.DC",
        "page_size": 2,
        "page_delay": 0,
    }
    run_fetch(configure({**base, "max_pages": 1}), store, MONDAY, fetcher=quiet_fetcher([]))
    assert len(server.requests) == 1 and store.count_papers() == 2
    server.requests.clear()
    run_fetch(configure(base), store, MONDAY, fetcher=quiet_fetcher([]))
    assert len(server.requests) == 2 and store.count_papers() == 4


def test_arxiv_api_without_a_query_says_what_to_set(
    configure: Callable[..., Config], store: Store
) -> None:
    config = configure(
        {"name": "api", "kind": "arxiv_api", "url": "https://export.arxiv.org/api/query"}
    )
    report = run_fetch(config, store, MONDAY)
    assert "set query, categories or date_from" in report.sources[0].errors[0]


def test_a_backfilled_paper_is_announced_once_when_a_listing_announces_it(
    configure: Callable[..., Config], store: Store
) -> None:
    run_fetch(configure(src("api", "arxiv_api", "arxiv-api-cat-cs.DC.atom")), store, MONDAY)
    assert store.recent_papers(MONDAY - timedelta(days=1)) == []  # backfill: stored, not news
    listing = configure(src("cs-dc", "arxiv_rss", "arxiv-rss-cs.DC-2026-11-16.xml"))
    report = run_fetch(listing, store, TUESDAY)
    assert by_name(report)["cs-dc"].new == 18  # 2611.00001 and 2611.00016 were backfilled
    today = {p.key: p for p in store.recent_papers(TUESDAY)}
    assert {"2611.00001", "2611.00016"} <= set(today)
    assert today["2611.00001"].first_seen == TUESDAY
    assert "2609.30112" not in today  # only in the backfill: still not news
    counter = WriteCounter(store)
    run_fetch(listing, store, TUESDAY + timedelta(hours=1))
    assert counter.statements == 0  # promoted once, not again


def test_velocity_uses_the_latest_day_of_snapshots() -> None:
    from newsletter.store.db import upvote_velocity

    t0 = datetime(2026, 11, 17, tzinfo=UTC)
    assert upvote_velocity([(t0, 10)]) is None
    assert upvote_velocity([(t0, 10), (t0 + timedelta(minutes=2), 50)]) is None  # too close
    assert upvote_velocity([(t0, 10), (t0 + timedelta(hours=4), 50)]) == 10.0
    old_then_recent = [
        (t0 - timedelta(days=3), 0),
        (t0, 100),
        (t0 + timedelta(hours=10), 150),
    ]
    assert upvote_velocity(old_then_recent) == 5.0


def test_arxiv_api_empty_page_inside_the_results_is_asked_again(
    configure: Callable[..., Config],
    store: Store,
    server: FeedServer,
    quiet_fetcher: Callable[[list[float]], Fetcher],
) -> None:
    pages = _api_pages(total=4, page_size=2)
    flaky = (FEEDS / "arxiv-api-empty-page.atom").read_bytes().replace(b"41873", b"4")
    hiccups = {"2": 1}

    def route(seen: Seen) -> Answer:
        start = parse_qs(urlsplit(seen.path).query)["start"][0]
        if hiccups.get(start, 0) > 0:
            hiccups[start] -= 1
            return Answer(200, flaky)
        return pages(seen)

    server.routes["/api/query"] = route
    config = configure(
        {
            "name": "backfill",
            "kind": "arxiv_api",
            "url": server.url("/api/query"),
            "allow_private": True,
            "query": "cat:cs.DC",
            "page_size": 2,
            "page_delay": 0,
        }
    )
    report = run_fetch(config, store, MONDAY, fetcher=quiet_fetcher([]))
    assert report.sources[0].ok and store.count_papers() == 4
    starts = [parse_qs(urlsplit(r.path).query)["start"][0] for r in server.requests]
    assert starts == ["0", "2", "2"]
    # Twice empty: reported, and what came before is kept.
    hiccups["2"] = 2
    server.requests.clear()
    report = run_fetch(config, store, MONDAY, fetcher=quiet_fetcher([]))
    assert "empty page at 2 of 4 results twice" in report.sources[0].errors[0]
    assert report.sources[0].unchanged == 2
