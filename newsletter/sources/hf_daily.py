"""Hugging Face Daily Papers (``GET /api/daily_papers``): a JSON list of featured papers.

Each entry's ``paper.id`` is the arXiv id; upvotes and comment counts are the trending signals.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from newsletter.identity import arxiv_urls, parse_arxiv_id
from newsletter.models import PaperData
from newsletter.sources.base import ParseResult, Skipped, clean_text, response_excerpt


def parse(body: bytes, url: str) -> ParseResult:
    """The papers in one Daily Papers answer (a JSON list)."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        return ParseResult((), (), (f"not JSON ({why}){response_excerpt(body, url)}",), 0)
    if not isinstance(data, list):
        return ParseResult(
            (), (), (f"expected a JSON list of papers, got {type(data).__name__}",), 0
        )
    papers: list[PaperData] = []
    skipped: list[Skipped] = []
    for i, entry in enumerate(data):
        paper, why = _entry(entry)
        if paper is None:
            skipped.append(Skipped(f"entry {i}", why))
        else:
            papers.append(paper)
    return ParseResult(tuple(papers), tuple(skipped), (), len(data))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(",", "")
        try:
            if text.endswith("k"):
                return round(float(text[:-1]) * 1000)
            return int(text)
        except ValueError:
            return None
    return None


def _entry(entry: Any) -> tuple[PaperData | None, str]:
    if not isinstance(entry, dict):
        return None, "entry is not an object"
    paper = entry.get("paper")
    if not isinstance(paper, dict):
        return None, "no 'paper' object"
    raw_id = paper.get("id")
    found = parse_arxiv_id(str(raw_id)) if raw_id else None
    if found is None:
        return None, f"no arXiv id (got {raw_id!r})"
    arxiv_id, version = found
    title = clean_text(paper.get("title") or entry.get("title"))
    if not title:
        return None, f"{arxiv_id}: no title"
    authors_raw = paper.get("authors")
    authors = tuple(
        clean_text(a.get("name"))
        for a in (authors_raw if isinstance(authors_raw, list) else [])
        if isinstance(a, dict) and a.get("name")
    )
    published = None
    for k in ("publishedAt", "submittedOnDailyAt"):
        if isinstance(paper.get(k), str):
            try:
                published = datetime.fromisoformat(paper[k].replace("Z", "+00:00"))
                break
            except ValueError:
                pass
    abs_url, pdf_url = arxiv_urls(arxiv_id)
    repo = paper.get("githubRepo")
    stars = _int(paper.get("githubStars"))
    code_url = repo if isinstance(repo, str) and repo.startswith(("https://", "http://")) else None
    return (
        PaperData(
            key=arxiv_id,
            title=title,
            abstract=clean_text(paper.get("summary")),
            authors=authors,
            url=abs_url,
            pdf_url=pdf_url,
            code_url=code_url,
            version=version,
            published=published,
            upvotes=_int(paper.get("upvotes")),
            comments=_int(entry.get("numComments")),
            # The stars Hugging Face shows beside the repository; never fetched from GitHub.
            code_stars=stars if code_url and stars is not None and stars >= 0 else None,
        ),
        "",
    )
