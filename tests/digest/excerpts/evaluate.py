"""How often the digest excerpt shows what a paper did (judged.json beside this file).

    python -m tests.digest.excerpts.evaluate          # one line per paper, then the rates
    python -m tests.digest.excerpts.evaluate --json   # the rates only, machine-readable

Papers come from the feed fixtures through the real parsers; the excerpt is what the digest
shows: :func:`newsletter.digest.render.excerpt` of the parsed abstract as text
(:func:`newsletter.digest.latex.to_text`). A paper counts as "contribution shown" when its judged
``want`` phrase is in the excerpt, and "result shown" when its judged ``result`` is (over the
papers that have one); the judged phrases are read the same way, ignoring case (an excerpt
that starts at its claim says "We propose" where the abstract said "..., we propose", and
shows "179times" as "179×"). ``--plain`` measures the old excerpt (the abstract's first
sentences), for the before/after figures in docs/digest.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsletter.digest.excerpts import excerpt, lead_excerpt
from newsletter.digest.latex import to_text
from newsletter.models import PaperData
from newsletter.sources import arxiv_rss, hf_daily

HERE = Path(__file__).resolve().parent
FEEDS = HERE.parent.parent / "fixtures" / "feeds"
JUDGED = HERE / "judged.json"


@dataclass(frozen=True)
class Rates:
    papers: int
    wanted: int
    """Excerpts holding the judged contribution phrase."""
    with_result: int
    """Papers whose abstract has a judged headline result."""
    results: int
    """Of those, excerpts holding it."""
    longest: int


def _papers(feed: str) -> dict[str, PaperData]:
    parser = hf_daily if feed.endswith(".json") else arxiv_rss
    parsed = parser.parse((FEEDS / feed).read_bytes(), f"https://example.org/{feed}")
    return {p.key: p for p in parsed.papers}


def judged() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(JUDGED.read_text(encoding="utf-8"))["papers"]
    return rows


def measure(*, plain: bool = False, show: bool = False) -> Rates:
    """The rates over the judged sample, with the old excerpt when ``plain``."""
    feeds: dict[str, dict[str, PaperData]] = {}
    wanted = results = with_result = longest = 0
    rows = judged()
    for row in rows:
        papers = feeds.setdefault(row["feed"], _papers(row["feed"]))
        abstract = to_text(papers[row["key"]].abstract)
        text = lead_excerpt(abstract) if plain else excerpt(abstract)
        longest = max(longest, len(text))
        hit = _found(row["want"], text)
        wanted += hit
        if row["result"]:
            with_result += 1
            results += _found(row["result"], text)
        if show:
            mark = ("+" if hit else "-") + (
                "" if not row["result"] else "r" if _found(row["result"], text) else "_"
            )
            print(f"{mark:3} {row['key']} ({len(text)}) {text}")
    return Rates(len(rows), wanted, with_result, results, longest)


def _found(judged: str, text: str) -> bool:
    """Whether the judged phrase, read as the digest shows text, is in ``text`` (any case)."""
    return to_text(judged).casefold() in text.casefold()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plain", action="store_true", help="the old excerpt (first sentences)")
    args = parser.parse_args()
    rates = measure(plain=args.plain, show=not args.json)
    if args.json:
        print(json.dumps(rates.__dict__))
        return
    print(
        f"contribution shown: {rates.wanted}/{rates.papers}; headline result shown: "
        f"{rates.results}/{rates.with_result}; longest excerpt: {rates.longest} characters"
    )


if __name__ == "__main__":
    main()
