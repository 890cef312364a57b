"""arXiv listing feeds (RSS 2.0, the format served since the 2024 feed update).

Each item's description is ``arXiv:IDvN Announce Type: TYPE`` + newline + ``Abstract: ...``;
``arxiv:announce_type`` is new, cross, replace or replace-cross.
"""

from __future__ import annotations

import re
from typing import Any

from newsletter.identity import arxiv_urls, parse_arxiv_id
from newsletter.models import AnnounceType, PaperData
from newsletter.sources.base import (
    ParseResult,
    Skipped,
    clean_text,
    parse_xml_feed,
    split_authors,
    struct_to_datetime,
)
from newsletter.sources.feed import bozo_problem

_HEAD = re.compile(r"^\s*arXiv:(?P<id>\S+)\s+Announce Type:\s*(?P<type>[\w-]+)\s*", re.IGNORECASE)


def parse(body: bytes, url: str) -> ParseResult:
    """The papers in one arXiv listing feed, with their announce type."""
    parsed = parse_xml_feed(body)
    papers: list[PaperData] = []
    skipped: list[Skipped] = []
    for entry in parsed.entries:
        paper, why = _entry(entry)
        if paper is None:
            skipped.append(Skipped(clean_text(entry.get("title")) or "(untitled entry)", why))
        else:
            papers.append(paper)
    problems = bozo_problem(parsed, url, body)
    if not parsed.entries and not problems:
        problems = _unexpectedly_empty(parsed, body)
    return ParseResult(tuple(papers), tuple(skipped), problems, len(parsed.entries))


_SKIP_DAYS = re.compile(rb"<skipDays>(.*?)</skipDays>", re.DOTALL | re.IGNORECASE)
_DAY = re.compile(rb"<day>\s*(\w+)\s*</day>", re.IGNORECASE)


def _unexpectedly_empty(parsed: Any, body: bytes) -> tuple[str, ...]:
    """A listing with no items on a day it does not declare in ``skipDays`` is a problem.

    arXiv announces nothing on weekends, and its feeds say so (``skipDays`` Saturday, Sunday):
    an empty feed then is normal. An empty feed on another day means an outage upstream (or an
    arXiv holiday), which the operator should see.
    """
    block = _SKIP_DAYS.search(body)
    when = parsed.feed.get("published_parsed") or parsed.feed.get("updated_parsed")
    if block is None or when is None:
        return ()
    skip = {d.decode("ascii", "replace").capitalize() for d in _DAY.findall(block.group(1))}
    published = parsed.feed.get("published", "") or parsed.feed.get("updated", "")
    day = published[:3].capitalize() if published[:3].isalpha() else None
    weekday = {
        "Mon": "Monday",
        "Tue": "Tuesday",
        "Wed": "Wednesday",
        "Thu": "Thursday",
        "Fri": "Friday",
        "Sat": "Saturday",
        "Sun": "Sunday",
    }.get(day or "") or struct_to_datetime(when).strftime("%A")  # type: ignore[union-attr]
    if weekday in skip:
        return ()
    return (
        f"no entries on {weekday}, a day this feed does not skip (an outage upstream, or an "
        "arXiv holiday?)",
    )


def _entry(entry: Any) -> tuple[PaperData | None, str]:
    description = entry.get("description", "") or ""
    head = _HEAD.match(description)
    found = None
    for candidate in (entry.get("id", ""), entry.get("link", ""), head.group("id") if head else ""):
        found = parse_arxiv_id(candidate) if candidate else None
        if found:
            break
    if found is None:
        return None, "no arXiv identifier in guid, link or description"
    arxiv_id, version = found
    announce = None
    raw_type = entry.get("arxiv_announce_type") or (head.group("type") if head else None)
    if raw_type:
        try:
            announce = AnnounceType(raw_type.strip().lower())
        except ValueError:
            announce = None
    abstract = description[head.end() :] if head else description
    abstract = clean_text(re.sub(r"^\s*Abstract:\s*", "", abstract))
    title = clean_text(entry.get("title"))
    if not title:
        return None, f"{arxiv_id}: no title"
    abs_url, pdf_url = arxiv_urls(arxiv_id)
    return (
        PaperData(
            key=arxiv_id,
            title=title,
            abstract=abstract,
            authors=split_authors(entry.get("author", "") or entry.get("dc_creator", "")),
            categories=tuple(
                dict.fromkeys(t["term"] for t in entry.get("tags", []) if t.get("term"))
            ),
            url=abs_url,
            pdf_url=pdf_url,
            version=version,
            announce_type=announce,
            published=struct_to_datetime(entry.get("published_parsed")),
        ),
        "",
    )
