"""Golden tests: each real-format fixture file → the normalized papers it must parse into.

The expected output lives beside the fixtures in ``tests/fixtures/golden/<file>.json``. After an
intended change to a parser, regenerate with
``UPDATE_GOLDEN=1 pytest tests/sources/test_parsers.py`` and review the diff like code.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from datetime import date, datetime
from typing import Any

import pytest

from newsletter.models import AnnounceType
from newsletter.sources import PARSERS, ParseResult
from newsletter.sources.arxiv_api import page_url, search_query
from tests.conftest import FEEDS, FIXTURES

GOLDEN = FIXTURES / "golden"

CASES = [
    ("arxiv-rss-cs.DC-2026-11-16.xml", "arxiv_rss"),
    ("arxiv-rss-cs.LG-2026-11-16.xml", "arxiv_rss"),
    ("arxiv-rss-cs.DC-2026-11-17.xml", "arxiv_rss"),
    ("arxiv-rss-cs.DC-2026-11-21-saturday.xml", "arxiv_rss"),
    ("arxiv-api-cat-cs.DC.atom", "arxiv_api"),
    ("arxiv-api-empty-page.atom", "arxiv_api"),
    ("hf-daily-papers-2026-11-17-morning.json", "hf_daily"),
    ("hf-daily-papers-2026-11-17-evening.json", "hf_daily"),
    ("hf-daily-papers-empty.json", "hf_daily"),
    ("lab-blog.atom", "feed"),
    ("conference.rss", "feed"),
    ("bad/truncated.xml", "arxiv_rss"),
    ("bad/empty.xml", "arxiv_rss"),
    ("bad/html-instead.xml", "feed"),
    ("bad/hostile-entry.xml", "arxiv_rss"),
    ("bad/billion-laughs.xml", "feed"),
    ("bad/xxe.xml", "feed"),
    ("bad/wrong-encoding.xml", "feed"),
    ("bad/no-ids.xml", "feed"),
    ("bad/hf-daily-papers-malformed.json", "hf_daily"),
    ("bad/hf-daily-papers-not-json.json", "hf_daily"),
]


def parse(name: str, kind: str) -> ParseResult:
    return PARSERS[kind]((FEEDS / name).read_bytes(), str(FEEDS / name))


def as_json(result: ParseResult) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {
        "entries": result.entries,
        "total": result.total,
        "problems": list(result.problems),
        "skipped": [asdict(s) for s in result.skipped],
        "papers": [plain(asdict(p)) for p in result.papers],
    }


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[c[0] for c in CASES])
def test_golden(name: str, kind: str) -> None:
    got = as_json(parse(name, kind))
    path = GOLDEN / (name.replace("/", "--") + ".json")
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert got == expected


# The facts SOURCES.md states about each file, asserted directly (so the golden files cannot
# silently drift into accepting a wrong parse).


def test_arxiv_rss_announce_types() -> None:
    r = parse("arxiv-rss-cs.DC-2026-11-16.xml", "arxiv_rss")
    types = [p.announce_type for p in r.papers]
    assert len(r.papers) == 20 and r.problems == ()
    assert types.count(AnnounceType.NEW) == 14
    cross = {p.key for p in r.papers if p.announce_type is AnnounceType.CROSS}
    assert cross == {"2611.00015", "2611.00016", "2611.00017", "2611.00018"}
    by_key = {p.key: p for p in r.papers}
    assert by_key["2610.04417"].announce_type is AnnounceType.REPLACE
    assert by_key["2610.04417"].version == 2
    assert by_key["2609.11873"].announce_type is AnnounceType.REPLACE_CROSS
    assert by_key["2609.11873"].version == 3
    assert by_key["2611.00006"].authors.count("李明") == 1
    assert "<" in by_key["2611.00008"].abstract and "&" in by_key["2611.00008"].abstract
    assert by_key["2611.00007"].title.startswith("Sub-$O(n^2)$")


def test_arxiv_rss_replace_carries_the_revised_abstract() -> None:
    r = parse("arxiv-rss-cs.DC-2026-11-17.xml", "arxiv_rss")
    replaced = [p for p in r.papers if p.announce_type is AnnounceType.REPLACE]
    assert [(p.key, p.version) for p in replaced] == [("2611.00003", 2)]
    assert replaced[0].abstract.endswith("corrects Table 3.)")


def test_saturday_feed_is_valid_and_empty() -> None:
    r = parse("arxiv-rss-cs.DC-2026-11-21-saturday.xml", "arxiv_rss")
    assert r.papers == () and r.problems == () and r.entries == 0


def test_empty_listing_on_a_weekday_is_reported() -> None:
    saturday = (FEEDS / "arxiv-rss-cs.DC-2026-11-21-saturday.xml").read_bytes()
    monday = saturday.replace(b"Sat, 21 Nov 2026", b"Mon, 23 Nov 2026")
    r = PARSERS["arxiv_rss"](monday, "https://rss.arxiv.org/rss/cs.DC")
    assert r.problems == (
        "no entries on Monday, a day this feed does not skip (an outage upstream, or an "
        "arXiv holiday?)",
    )


def test_arxiv_api_error_answer() -> None:
    body = b"""<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>ArXiv Query: search_query=&amp;id_list=1234.1234</title>
  <entry>
    <id>http://arxiv.org/api/errors#incorrect_id_format_for_1234.1234</id>
    <title>Error</title>
    <summary>incorrect id format for 1234.1234</summary>
  </entry>
</feed>"""
    r = PARSERS["arxiv_api"](body, "https://export.arxiv.org/api/query")
    assert r.papers == () and r.skipped == ()
    assert r.problems == ("arXiv API error: incorrect id format for 1234.1234",)


def test_arxiv_api_page() -> None:
    r = parse("arxiv-api-cat-cs.DC.atom", "arxiv_api")
    assert [(p.key, p.version) for p in r.papers] == [
        ("2611.00001", 1),
        ("2611.00016", 1),
        ("2609.30112", 2),
    ]
    assert r.total == 41873 and r.problems == ()
    assert r.papers[0].categories[0] == "cs.DC"  # the primary category first
    empty = parse("arxiv-api-empty-page.atom", "arxiv_api")
    assert empty.entries == 0 and empty.problems == ()


def test_arxiv_api_query_building() -> None:
    q = search_query(None, ["cs.DC", "cs.LG"], date(2026, 11, 1), date(2026, 11, 15))
    assert q == "(cat:cs.DC OR cat:cs.LG) AND submittedDate:[202611010000 TO 202611152359]"
    assert search_query("abs:cache", ["cs.DC"]) == "(abs:cache) AND cat:cs.DC"
    url = page_url("https://export.arxiv.org/api/query", "cat:cs.DC", 200, 100)
    assert url == (
        "https://export.arxiv.org/api/query?search_query=cat%3Acs.DC&sortBy=submittedDate"
        "&sortOrder=descending&start=200&max_results=100"
    )


def test_hf_daily_signals() -> None:
    morning = {
        p.key: p for p in parse("hf-daily-papers-2026-11-17-morning.json", "hf_daily").papers
    }
    evening = {
        p.key: p for p in parse("hf-daily-papers-2026-11-17-evening.json", "hf_daily").papers
    }
    assert len(morning) == 13 and len(evening) == 15
    assert max(p.upvotes or 0 for p in morning.values()) == 140
    assert max(p.upvotes or 0 for p in evening.values()) == 289
    assert set(evening) - set(morning) == {"2611.10046", "2611.10047"}


def test_hf_malformed_keeps_the_good_and_says_why_for_the_rest() -> None:
    r = parse("bad/hf-daily-papers-malformed.json", "hf_daily")
    assert r.entries == 5
    assert len(r.papers) + len(r.skipped) == 5
    assert {p.key for p in r.papers} == {"2611.00004", "2611.00002"}
    repaired = next(p for p in r.papers if p.key == "2611.00002")
    assert repaired.upvotes == 1200 and repaired.authors == ()  # "1.2k", authors null
    assert all(s.reason for s in r.skipped)


def test_hf_not_json_is_a_clear_error() -> None:
    body = (FEEDS / "bad/hf-daily-papers-not-json.json").read_bytes()
    r = PARSERS["hf_daily"](body, "https://huggingface.co/api/daily_papers")
    assert r.papers == () and "not JSON" in r.problems[0] and "502 Bad Gateway" in r.problems[0]
    # A local file's bytes are never quoted (it could be /proc/self/environ).
    local = parse("bad/hf-daily-papers-not-json.json", "hf_daily")
    assert local.problems == ("not JSON (Expecting value)",)


def test_generic_feed_identity() -> None:
    blog = parse("lab-blog.atom", "feed")
    assert [p.key for p in blog.papers] == [
        "2611.00001",
        "doi:10.1145/3712285.3759811",
        "url:https://example-lab.org/blog/2026/11/kv-cache-notes",
    ]
    assert "utm_" not in blog.papers[2].url
    conf = parse("conference.rss", "feed")
    assert [p.url for p in conf.papers] == [
        f"https://conf.example.org/accepted/{n}" for n in (101, 102, 103, 104)
    ]


def test_bad_feeds_are_reported_and_keep_what_parsed() -> None:
    truncated = parse("bad/truncated.xml", "arxiv_rss")
    assert len(truncated.papers) == 10 and "malformed feed" in truncated.problems[0]
    assert parse("bad/empty.xml", "arxiv_rss").problems == ("empty response (0 bytes of feed)",)
    assert "HTML page instead of a feed" in parse("bad/html-instead.xml", "feed").problems[0]
    assert "encoding" in parse("bad/wrong-encoding.xml", "feed").problems[0]
    for name in ("bad/billion-laughs.xml", "bad/xxe.xml"):
        r = parse(name, "feed")
        assert r.problems, name
        text = json.dumps(as_json(r))
        assert "root:" not in text and "lol" * 10 not in text  # nothing expanded or read
    no_ids = parse("bad/no-ids.xml", "feed")
    assert len(no_ids.papers) == 1 and len(no_ids.skipped) == 2
    assert "no link, guid or identifier" in no_ids.skipped[0].reason
    assert "duplicate" in no_ids.skipped[1].reason


def test_hostile_entry_stays_text() -> None:
    r = parse("bad/hostile-entry.xml", "arxiv_rss")
    hostile = next(p for p in r.papers if "<script>" in p.title)
    assert hostile.title.startswith('<script>alert("x")</script>')
    assert "\r" not in hostile.title and "\n" not in hostile.title  # whitespace collapsed
    assert "\n" not in hostile.abstract and "\r" not in hostile.abstract
    assert len(r.papers) == 2


def test_parsers_never_take_a_url_or_path() -> None:
    for kind in ("arxiv_rss", "arxiv_api", "feed"):
        with pytest.raises(TypeError, match="bytes the fetcher downloaded"):
            PARSERS[kind]("/etc/passwd", "/etc/passwd")  # type: ignore[arg-type]
