"""The digest at a glance (issue 29): a readable text part, code and stars, under Gmail's clip."""

from __future__ import annotations

import dataclasses
import re

import lxml.html

from newsletter.digest.render import Renderer
from newsletter.models import Paper
from tests import digests as D

GMAIL_CLIP = 102 * 1024
"""Gmail clips a message whose HTML is larger than about 102 KB ("[Message clipped]")."""
URL = re.compile(r"https?://\S+")


def long_papers(n: int = 30) -> list[Paper]:
    """``n`` fixture papers made as long as real ones get: long titles, abstracts, author lists,
    every signal and link, and stars."""
    out = []
    for i, p in enumerate(D.papers()[:n]):
        out.append(
            dataclasses.replace(
                p,
                id=1000 + i,
                key=f"2611.9{i:04d}",
                # as long as the longest arXiv titles (about 200 characters)
                title=(p.title + ": Scaling Heterogeneous Mixture-of-Experts Inference " * 4)[:200],
                abstract=(p.abstract + " ") * 3,
                authors=tuple(f"Firstname{j} Double-Barrelled Lastname{j}" for j in range(60)),
                categories=("cs.DC", "cs.LG", "cs.AR", "cs.PF"),
                code_url=f"https://github.com/some-long-organisation-name/repository-{i}",
                code_stars=12_345 + i,
                upvotes=1_234 + i,
                comments=56 + i,
            )
        )
    assert len(out) == n
    return out


def test_thirty_long_papers_stay_under_gmails_clipping_limit() -> None:
    renderer = Renderer(D.settings())
    digest = D.digest(long_papers(), per_topic=10)
    assert len(digest.items) == 30
    html = renderer.render(digest, D.links()).html
    size = len(html.encode("utf-8"))
    assert size < GMAIL_CLIP, f"{size} bytes: Gmail would clip this digest"
    tree = lxml.html.document_fromstring(html)
    assert len(tree.find_class("card")) == 30


def test_code_link_and_stars_beside_the_upvotes() -> None:
    papers = D.papers()
    with_stars = [p for p in papers if p.code_stars]
    assert with_stars, "the Hugging Face fixtures give stars for some repositories"
    p = with_stars[0]
    no_repo = dataclasses.replace(next(q for q in papers if not q.code_url), code_stars=99)
    digest = D.digest([p, no_repo], per_topic=2, topics=D.TOPICS[:1])
    html = Renderer(D.settings()).render(digest, D.links()).html
    cards = lxml.html.document_fromstring(html).find_class("card")
    signals = " ".join(cards[0].find_class("signals")[0].text_content().split())
    assert f"▲ {p.upvotes:,} upvotes" in signals
    assert f"★ {p.code_stars:,} GitHub stars" in signals
    links = {a.text_content(): a.get("href") for a in cards[0].find_class("btn")}
    assert links["Code"] == p.code_url
    # Stars without a repository link are not shown (nothing to star).
    assert "GitHub star" not in cards[1].text_content()


def test_the_text_part_is_title_authors_excerpt_and_one_link_per_paper() -> None:
    digest = D.digest(long_papers(), per_topic=10)
    links = D.links()
    text = Renderer(D.settings()).render(digest, links).text
    urls = URL.findall(text)
    # one link per paper, one "rate these papers" link, manage and unsubscribe
    assert len(urls) == 30 + 3, urls
    assert urls.count(links.view) == 1 and links.manage in urls and links.unsubscribe in urls
    assert not any("/feedback/" in u for u in urls)
    lines = text.splitlines()
    at = lines.index("Rate these papers (more or less like this):")
    assert lines[at + 1] == links.view
    for item in digest.items:
        assert f"    {item.paper.url}" in lines
        assert item.paper.pdf_url is None or item.paper.pdf_url not in text
        assert item.paper.code_url not in text  # the HTML part has it
    # Per paper: a title of up to 3 lines, authors, a blank line, an excerpt (320 characters at
    # most: 6 lines), the link, a blank line.
    assert len(text.encode()) < 30 * 900 + 1500, len(text.encode())
    assert max(len(line) for line in lines if not URL.search(line)) <= 76


def test_without_a_view_page_each_paper_keeps_its_feedback_links() -> None:
    digest = D.digest(D.papers(), per_topic=2, topics=D.TOPICS[:1])
    links = dataclasses.replace(D.links(), view=None)
    text = Renderer(D.settings()).render(digest, links).text
    assert text.count("More like this") == 2 and "Rate these papers" not in text
