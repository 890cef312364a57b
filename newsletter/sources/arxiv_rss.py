"""arXiv listing feeds (RSS 2.0, the format served since the 2024 feed update).

Each item's description is ``arXiv:IDvN Announce Type: TYPE`` + newline + ``Abstract: ...``;
``arxiv:announce_type`` is new, cross, replace or replace-cross.
"""

from __future__ import annotations

import re
from typing import Any

import feedparser

from newsletter.identity import arxiv_urls, parse_arxiv_id
from newsletter.models import AnnounceType, PaperData
from newsletter.sources.base import (
    ParseResult,
    Skipped,
    clean_text,
    split_authors,
    struct_to_datetime,
)
from newsletter.sources.feed import bozo_problem

_HEAD = re.compile(r"^\s*arXiv:(?P<id>\S+)\s+Announce Type:\s*(?P<type>[\w-]+)\s*", re.IGNORECASE)


def parse(body: bytes, url: str) -> ParseResult:
    parsed = feedparser.parse(body, sanitize_html=False, resolve_relative_uris=False)
    papers: list[PaperData] = []
    skipped: list[Skipped] = []
    for entry in parsed.entries:
        paper, why = _entry(entry)
        if paper is None:
            skipped.append(Skipped(clean_text(entry.get("title")) or "(untitled entry)", why))
        else:
            papers.append(paper)
    problems = bozo_problem(parsed, url, body)
    return ParseResult(tuple(papers), tuple(skipped), problems, len(parsed.entries))


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
