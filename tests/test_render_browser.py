"""The digest as a reader sees it: headless Chromium (Debian's package, driven by Playwright).

At desktop width (1200px) and phone width (375px): no horizontal scroll on the phone, every
card on screen with a real size, dark mode switching the palette. Screenshots are written to
the test's temporary folder; with ``NEWSLETTER_SCREENSHOTS=docs/screenshots`` they also go
there (that is how the PNGs in the README are made).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from newsletter.models import Digest, DigestItem, TopicSection
from newsletter.render import Renderer
from tests import digests as D
from tests.web.test_browser import ARGS, CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]


def showcase() -> Digest:
    """Three topics of real papers, plus a paper with an unbreakable 140-character title."""
    papers = D.papers()
    digest = D.digest(papers, per_topic=3)
    long = replace(
        papers[40],
        title="Supercalifragilistic" * 7,
        url="https://arxiv.org/abs/" + "9" * 120,
    )
    sections = list(digest.sections)
    last = sections[-1]
    sections[-1] = TopicSection(
        last.name, last.title, (*last.items, DigestItem(long, "gpu-kernels", 1.0, "title: *gpu*"))
    )
    return Digest(digest.subscriber, digest.edition_date, tuple(sections), digest.topic_titles)


@pytest.fixture(scope="module")
def html() -> str:
    return Renderer(D.settings()).render(showcase(), D.links()).html


def shots_dir(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path]
    if os.environ.get("NEWSLETTER_SCREENSHOTS"):
        dirs.append(Path(os.environ["NEWSLETTER_SCREENSHOTS"]))
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


CARDS = """() => Array.from(document.querySelectorAll('td.card')).map(e => {
  const r = e.getBoundingClientRect();
  return {x: r.x, y: r.y, w: r.width, h: r.height, right: r.right,
          visible: getComputedStyle(e).visibility === 'visible' && r.width > 0 && r.height > 0};
})"""


def test_the_digest_fits_desktop_and_phone_and_has_a_dark_mode(html: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    dirs = shots_dir(tmp_path)
    cards_expected = len(showcase().items)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            # Desktop: a 600px sheet, centred, every card inside it.
            page = browser.new_page(viewport={"width": 1200, "height": 1500})
            page.set_content(html)
            sheet = page.eval_on_selector("table.sheet", "e => e.getBoundingClientRect().width")
            assert sheet == pytest.approx(600, abs=2)
            cards = page.evaluate(CARDS)
            assert len(cards) == cards_expected
            assert all(c["visible"] and c["w"] == pytest.approx(598, abs=3) for c in cards)
            assert page.evaluate("document.documentElement.scrollWidth") <= 1200
            for d in dirs:
                page.screenshot(path=str(d / "digest-desktop.png"))
            page.close()

            # Phone: nothing wider than the screen, even the unbreakable title and URL.
            page = browser.new_page(viewport={"width": 375, "height": 1400}, is_mobile=True)
            page.set_content(html)
            width = page.evaluate("document.documentElement.scrollWidth")
            inner = page.evaluate("window.innerWidth")
            assert inner == 375 and width <= inner, f"horizontal scroll: {width}px on {inner}px"
            cards = page.evaluate(CARDS)
            assert len(cards) == cards_expected
            for c in cards:
                assert c["visible"] and c["x"] >= 0 and c["right"] <= 375 + 0.5, c
            titles = page.evaluate(
                "Array.from(document.querySelectorAll('td.card a.title'))"
                ".map(e => e.getBoundingClientRect().right)"
            )
            assert titles and max(titles) <= 375
            for d in dirs:
                page.screenshot(path=str(d / "digest-phone.png"))
            page.close()

            # Dark mode: the clients that honour prefers-color-scheme get the dark palette.
            page = browser.new_page(viewport={"width": 1200, "height": 1500})
            page.emulate_media(color_scheme="dark")
            page.set_content(html)
            bg = page.eval_on_selector("table.sheet", "e => getComputedStyle(e).backgroundColor")
            title = page.eval_on_selector("a.title", "e => getComputedStyle(e).color")
            assert bg == "rgb(22, 27, 34)" and title == "rgb(124, 180, 255)"
            for d in dirs:
                page.screenshot(path=str(d / "digest-dark.png"))
            page.close()

            # Light mode for comparison: the inlined light palette.
            page = browser.new_page(viewport={"width": 1200, "height": 600})
            page.set_content(html)
            bg = page.eval_on_selector("table.sheet", "e => getComputedStyle(e).backgroundColor")
            assert bg == "rgb(255, 255, 255)"
        finally:
            browser.close()
    for d in dirs:
        for name in ("digest-desktop.png", "digest-phone.png", "digest-dark.png"):
            assert (d / name).stat().st_size > 10_000
