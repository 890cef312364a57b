"""LaTeX reads as text (issue 29, item 2): converted at render time, stored raw, never a crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.config import Config
from newsletter.ingest import run_fetch
from newsletter.latex import to_text
from newsletter.render import Renderer
from newsletter.store import Store
from tests import digests as D
from tests.conftest import FEEDS, base_config
from tests.test_ingest import MONDAY


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("Sub-$O(n^2)$ HPCTransCompile", "Sub-O(n^2) HPCTransCompile"),
        (r"\textit{Fast}~serving", "Fast serving"),
        (r"M\'elange: serving", "Mélange: serving"),
        (r"+22.0\% over {\it torch.matmul}", "+22.0% over torch.matmul"),
        (r"$L_{\infty}$ robustness and $\alpha$-scaling", "L_∞ robustness and α-scaling"),
        ("a 77% cut & more", "a 77% cut & more"),  # not LaTeX: % is no comment, & no column
        ("costs $5 per hour -- less", "costs $5 per hour – less"),  # one $: a dollar sign
        ("code at https://x.edu/~lab/a_b{1}", "code at https://x.edu/~lab/a_b{1}"),
        ("Plain title", "Plain title"),
        ("", ""),
    ],
)
def test_latex_becomes_unicode_text(raw: str, shown: str) -> None:
    assert to_text(raw) == shown


@pytest.mark.parametrize("raw", [r"\textbf{", "{", "}", "\\", r"\begin{x}", "$", r"\frac{"])
def test_malformed_latex_never_raises(raw: str) -> None:
    out = to_text(raw)
    assert isinstance(out, str) and (out or not raw.strip())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\\${}^_~%&#ab x()[]'`-\n")), max_size=60))
def test_any_string_converts_without_raising(raw: str) -> None:
    assert isinstance(to_text(raw), str)


def test_the_digest_shows_latex_as_text_in_both_parts() -> None:
    papers = D.papers()
    latex = next(p for p in papers if p.key == "2611.00007")
    assert "$O(n^2)$" in latex.title and r"43.8\%" in latex.abstract
    renderer = Renderer(D.settings())
    digest = D.digest([latex], per_topic=1, topics=D.TOPICS[:1])
    out = renderer.render(digest, D.links())
    for part in (out.html, out.text):
        assert "$" not in part and r"\%" not in part
    assert "Sub-O(n^2) HPCTransCompile" in out.html
    assert "Sub-O(n^2) HPCTransCompile" in " ".join(out.text.split())
    # A title no parser can read is shown raw; the digest is still rendered.
    broken = dataclasses.replace(latex, id=2, key="2611.99990", title=r"Bad \textbf{ title {")
    out = renderer.render(D.digest([broken], per_topic=1, topics=D.TOPICS[:1]), D.links())
    assert "Bad" in out.html and "title" in out.text


def test_the_store_keeps_the_raw_latex_for_search(
    db_url: str, make_config: Callable[..., Config], store: Store
) -> None:
    feed = {
        "name": "cs-dc",
        "kind": "arxiv_rss",
        "url": str(FEEDS / "arxiv-rss-cs.DC-2026-11-16.xml"),
    }
    run_fetch(make_config(base_config(db_url, sources=[feed])), store, MONDAY)
    stored = store.papers_by_keys(["2611.00007"])["2611.00007"]
    assert stored.title.startswith("Sub-$O(n^2)$")


def test_template_syntax_that_latex_produces_stays_text() -> None:
    """``\\{\\{ 7*7 \\}\\}`` becomes ``{{ 7*7 }}`` after conversion: shown, never evaluated."""
    p = dataclasses.replace(
        D.papers()[0], title=r"\{\{ 7*7 \}\} \{% for x in range(3) %\}x\{% endfor %\}"
    )
    out = Renderer(D.settings()).render(D.digest([p], per_topic=1, topics=D.TOPICS[:1]), D.links())
    assert "{{ 7*7 }}" in out.text and "49" not in out.text and "xxx" not in out.text
    assert "{{ 7*7 }}" in out.html and "49" not in out.html
