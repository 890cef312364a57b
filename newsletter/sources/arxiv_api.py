"""The arXiv export API (Atom 1.0 with OpenSearch totals): backfill a date range or a category.

:func:`parse` reads one page; :func:`page_url` builds the request for a page. The ingest loop
asks for one page at a time, one request every ``page_delay`` seconds (arXiv asks for 3), and
stops at an empty page, at ``totalResults`` or after ``max_pages``.
"""

from __future__ import annotations

from datetime import date
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from newsletter.identity import arxiv_urls, parse_arxiv_id
from newsletter.models import PaperData
from newsletter.sources.base import (
    EXCERPT_CHARS,
    ParseResult,
    Skipped,
    clean_text,
    is_remote,
    parse_xml_feed,
    struct_to_datetime,
)
from newsletter.sources.feed import bozo_problem

DEFAULT_ENDPOINT = "https://export.arxiv.org/api/query"


def search_query(
    query: str | None,
    categories: list[str] | tuple[str, ...] = (),
    date_from: date | None = None,
    date_to: date | None = None,
) -> str | None:
    """The ``search_query`` for a backfill: the query, the categories OR-ed, a date range."""
    parts: list[str] = []
    if query:
        parts.append(f"({query})" if (categories or date_from or date_to) else query)
    if categories:
        cats = " OR ".join(f"cat:{c}" for c in categories)
        parts.append(
            f"({cats})" if len(categories) > 1 and (query or date_from or date_to) else cats
        )
    if date_from or date_to:
        start = f"{date_from:%Y%m%d}0000" if date_from else "199101010000"
        end = f"{date_to:%Y%m%d}2359" if date_to else "299912312359"
        parts.append(f"submittedDate:[{start} TO {end}]")
    return " AND ".join(parts) or None


def page_url(base: str, query: str | None, start: int, size: int) -> str:
    """The request for results ``start`` to ``start + size``, newest submissions first."""
    parts = urlsplit(base)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    if query:
        params["search_query"] = query
    params.setdefault("sortBy", "submittedDate")
    params.setdefault("sortOrder", "descending")
    params["start"] = str(start)
    params["max_results"] = str(size)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(params), ""))


def has_query(base: str) -> bool:
    """Whether the API URL ``base`` names what to search (``search_query`` or ``id_list``)."""
    params = dict(parse_qsl(urlsplit(base).query))
    return bool(params.get("search_query") or params.get("id_list"))


def parse(body: bytes, url: str) -> ParseResult:
    """The papers on one page of API results, with the query's total."""
    parsed = parse_xml_feed(body)
    papers: list[PaperData] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for entry in parsed.entries:
        paper, why = _entry(entry)
        if paper is None:
            skipped.append(Skipped(clean_text(entry.get("title")) or "(untitled entry)", why))
        elif paper.key in seen:
            skipped.append(Skipped(paper.key, "duplicate of an earlier entry on the same page"))
        else:
            seen.add(paper.key)
            papers.append(paper)
    problems = bozo_problem(parsed, url, body)
    if not parsed.entries and parsed.get("version") and not parsed.get("bozo"):
        problems = ()  # a page past the end: a valid, empty answer
    # The API reports errors as a feed with one entry titled "Error".
    if len(parsed.entries) == 1 and clean_text(parsed.entries[0].get("title")) == "Error":
        summary = clean_text(parsed.entries[0].get("summary"))
        # A local file's text is never quoted (see base.response_excerpt).
        said = f": {summary[:EXCERPT_CHARS]}" if is_remote(url) else " (in the file; not quoted)"
        problems = (f"arXiv API error{said}",)
        skipped = []
    total = _int(parsed.feed.get("opensearch_totalresults"))
    return ParseResult(tuple(papers), tuple(skipped), problems, len(parsed.entries), total)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _entry(entry: Any) -> tuple[PaperData | None, str]:
    found = None
    for candidate in (entry.get("id", ""), entry.get("link", "")):
        found = parse_arxiv_id(candidate) if candidate else None
        if found:
            break
    if found is None:
        return None, f"no arXiv identifier in id {entry.get('id', '')!r}"
    arxiv_id, version = found
    title = clean_text(entry.get("title"))
    if not title:
        return None, f"{arxiv_id}: no title"
    primary = (entry.get("arxiv_primary_category") or {}).get("term")
    categories = tuple(
        dict.fromkeys(
            [
                *([primary] if primary else []),
                *(t["term"] for t in entry.get("tags", []) if t.get("term")),
            ]
        )
    )
    abs_url, pdf_url = arxiv_urls(arxiv_id)
    return (
        PaperData(
            key=arxiv_id,
            title=title,
            abstract=clean_text(entry.get("summary")),
            authors=tuple(
                clean_text(a.get("name")) for a in entry.get("authors", []) if a.get("name")
            ),
            categories=categories,
            url=abs_url,
            pdf_url=pdf_url,
            version=version,
            published=struct_to_datetime(entry.get("published_parsed")),
        ),
        "",
    )
