"""The digest as a reader sees it: headless Chromium (Debian's package, driven by Playwright).

At desktop width (1200px) and phone width (375px): no horizontal scroll on the phone, every
card on screen with a real size, dark mode switching the palette. The README's screenshots are
of the digest that `newsletter demo` really ranks and sends (Grace's: GPU kernels and LLM
serving); they are written to the test's temporary folder, and with
``NEWSLETTER_SCREENSHOTS=docs/screenshots`` also there (that is how the PNGs in the README are
made).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from newsletter.digest.render import Renderer
from newsletter.models import Digest, DigestItem, TopicSection
from tests import digests as D
from tests.web.test_browser import ARGS, CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
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

    dirs = [tmp_path]  # layout checks on a made-up worst case; the README's come from the demo
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


def test_the_readme_screenshots_are_the_digest_the_demo_ranks(tmp_path: Path) -> None:
    import re
    import shutil

    from click.testing import CliRunner
    from playwright.sync_api import sync_playwright

    from newsletter.cli import cli

    root = Path(__file__).resolve().parent.parent.parent
    shutil.copytree(root / "config", tmp_path / "config")
    config = str(tmp_path / "config" / "demo.yaml")
    ranked = CliRunner().invoke(cli, ["--config", config, "db", "upgrade"])
    assert ranked.exit_code == 0, ranked.output
    assert CliRunner().invoke(cli, ["--config", config, "fetch"]).exit_code == 0
    ranked = CliRunner().invoke(cli, ["--config", config, "rank", "--to", "grace@example.org"])
    assert ranked.exit_code == 0, ranked.output
    keys = re.findall(r"^\s*\d+\.\s+[\d.]+\s+(\S+)", ranked.output, re.MULTILINE)
    assert len(keys) >= 8
    var = tmp_path / "var"
    sent = CliRunner().invoke(cli, ["demo", "--dir", str(var)])
    assert sent.exit_code == 0, sent.output
    page_html = (var / "html" / "grace-example-org.html").read_text()
    # The picture is the ranker's digest: the same papers, in the same order.
    shown = re.findall(
        r'href="https?://arxiv\.org/abs/([0-9.]+?)(?:v\d+)?"[^>]*class="title"', page_html
    )
    shown = shown or re.findall(
        r'class="title" href="https?://arxiv\.org/abs/([0-9.]+?)(?:v\d+)?"', page_html
    )
    assert shown == keys, (shown, keys)

    dirs = shots_dir(tmp_path / "shots")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            for name, viewport, scheme in (
                ("digest-desktop.png", {"width": 1200, "height": 1500}, "light"),
                ("digest-phone.png", {"width": 375, "height": 1400}, "light"),
                ("digest-dark.png", {"width": 1200, "height": 1500}, "dark"),
            ):
                page = browser.new_page(viewport=viewport, is_mobile=viewport["width"] < 600)
                page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
                page.set_content(page_html)
                assert len(page.evaluate(CARDS)) == len(keys)
                for d in dirs:
                    page.screenshot(path=str(d / name))
                page.close()
        finally:
            browser.close()
    for d in dirs:
        for name in ("digest-desktop.png", "digest-phone.png", "digest-dark.png"):
            assert (d / name).stat().st_size > 10_000
