"""Rendering: inline-once equals premailer-per-message, escaping, text part, overrides."""

from __future__ import annotations

import dataclasses
import html as htmllib
import logging
import os
import re
from pathlib import Path

import lxml.html
import premailer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.digest.latex import to_text
from newsletter.digest.render import (
    TEXT_WIDTH,
    NotInlinable,
    Renderer,
    excerpt,
    inline_template_source,
    safe_url,
    short_authors,
    wrap,
)
from newsletter.models import Digest, DigestItem, Paper, TopicSection
from tests import digests as D

PAPERS = D.papers()


def squash(html: str) -> str:
    return " ".join(html.split())


def dom(html: str) -> str:
    """Parsed and serialized again, whitespace collapsed: equal for equal documents."""
    tree = lxml.html.document_fromstring(html)
    return squash(lxml.html.tostring(tree, encoding="unicode"))


def same_html(fast: str, naive: str) -> None:
    # The two paths differ only in how characters are spelled: the fast path writes non-ASCII
    # as references (&#233;) and Jinja writes &#39; for ', where premailer's serializer writes
    # the characters. Equal once parsed, and equal as text once references are decoded and
    # whitespace is collapsed.
    assert dom(fast) == dom(naive)
    assert squash(htmllib.unescape(fast)) == squash(htmllib.unescape(naive))


@pytest.fixture(scope="module")
def renderers() -> tuple[Renderer, Renderer]:
    settings = D.settings()
    return Renderer(settings), Renderer(settings, inline_once=False)


def cases() -> list[tuple[str, Digest]]:
    ungrouped = D.digest(PAPERS, per_topic=10, topics=("Mixture of experts",))
    return [
        ("grouped-12", D.digest(PAPERS, per_topic=4)),
        ("grouped-21", D.digest(PAPERS, per_topic=7, offset=5)),
        ("one-topic", ungrouped),
        ("empty", D.empty_digest()),
        ("hostile", D.hostile_digest()),
        ("arxiv-only", D.digest(PAPERS, per_topic=3, offset=28)),
    ]


@pytest.mark.parametrize("name", [n for n, _ in cases()])
def test_inline_once_gives_the_html_premailer_gives_per_message(
    renderers: tuple[Renderer, Renderer], name: str
) -> None:
    fast, naive = renderers
    digest = dict(cases())[name]
    a, b = fast.render(digest, D.links()), naive.render(digest, D.links())
    assert fast.fast and not naive.fast
    same_html(a.html, b.html)
    assert (a.text, a.subject, a.preheader) == (b.text, b.subject, b.preheader)


def test_inlined_styles_are_on_the_elements(renderers: tuple[Renderer, Renderer]) -> None:
    html = renderers[0].render(D.digest(PAPERS), D.links()).html
    tree = lxml.html.document_fromstring(html)
    cards = tree.find_class("card")
    assert len(cards) == 12
    for card in cards:
        assert "padding:20px 32px 22px 32px" in card.get("style", "")
        title = card.find_class("title")[0]
        assert "color:#0f4fb8" in title.get("style", "")
    # Media queries and dark-mode rules stay in <style> for the clients that read them.
    assert "@media (prefers-color-scheme: dark)" in html
    assert "max-width: 620px" in html


def test_the_fast_html_is_ascii_and_shows_every_character(
    renderers: tuple[Renderer, Renderer],
) -> None:
    digest = D.digest(PAPERS, per_topic=7)
    html = renderers[0].render(digest, D.links()).html
    assert html.isascii()  # non-ASCII written as &#NNN; references
    names = {a for item in digest.items for a in item.paper.authors if not a.isascii()}
    assert names, "the fixture should have non-ASCII author names"
    text = lxml.html.document_fromstring(html).text_content()
    shown = [n for n in names if n in text]
    assert shown and "\u2019" in text  # decoded: "Why you’re seeing this"


def test_the_fast_path_runs_no_premailer_per_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renderer = Renderer(D.settings())  # inlines the template here, once

    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError("premailer ran for a message")

    monkeypatch.setattr(premailer, "transform", refuse)
    for offset in range(3):
        rendered = renderer.render(D.digest(PAPERS, offset=offset), D.links())
        assert 'style="' in rendered.html


def test_feed_text_stays_text_in_both_parts(renderers: tuple[Renderer, Renderer]) -> None:
    for renderer in renderers:
        r = renderer.render(D.hostile_digest(), D.links())
        tree = lxml.html.document_fromstring(r.html)
        assert tree.xpath("//script") == []
        assert tree.xpath("//img") == [] and tree.xpath("//h1") == []
        assert [b.text for b in tree.xpath("//b")] == ["Why you\u2019re seeing this:"]
        assert tree.xpath("//*[@onerror or @onmouseover]") == []
        hrefs = [a.get("href") for a in tree.xpath("//a")]
        assert not any(h.lower().startswith("javascript") for h in hrefs)
        assert not any("<" in h or '"' in h for h in hrefs)
        [card] = tree.find_class("card")
        title = card.find_class("titletext")[0]  # javascript: URL dropped: no link, plain title
        # shown as text after the LaTeX pass (its braces are TeX groups): never evaluated
        assert title.text_content() == to_text(D.HOSTILE_TITLE)
        assert "7*7" in card.text_content() and "49" not in card.text_content()
        assert "for x in range(3) %loop" in card.text_content()
        assert "loop loop" not in r.html
        assert "Eve" in card.text_content() and "<i>Eve</i>" in card.text_content()
        # the reason's *emphasis* becomes <em>, its markup stays text
        why = card.find_class("why")[0]
        assert [e.text for e in why.xpath(".//em")] == ["<script>x</script>"]
        # text part: verbatim, not evaluated
        assert to_text(D.HOSTILE_TITLE)[:40] in r.text and "7*7" in r.text
        assert "49" not in r.text and "javascript:" not in r.text
        assert "LLM <serving>" in r.subject or "LLM <serving>" in r.preheader


def test_a_reason_is_per_subscriber_even_when_the_paper_is_cached(
    renderers: tuple[Renderer, Renderer],
) -> None:
    fast = renderers[0]
    paper = PAPERS[0]
    for why in ("title: *first reason*", "abstract: *second reason*; 7 upvotes"):
        item = DigestItem(paper, "t", 1.0, why)
        digest = Digest(D.subscriber(), D.EDITION, (TopicSection("t", "T", (item,)),), ("T",))
        r = fast.render(digest, D.links())
        assert why.split("*")[1] in r.html  # the text part shows no reason (issue 29)
        other = "second reason" if "first" in why else "first reason"
        assert other not in r.html and other not in r.text


def test_the_card_shows_what_the_issue_asks(renderers: tuple[Renderer, Renderer]) -> None:
    digest = D.digest(PAPERS, per_topic=4)
    r = renderers[0].render(digest, D.links())
    tree = lxml.html.document_fromstring(r.html)
    items = digest.items
    cards = tree.find_class("card")
    for item, card in zip(items, cards, strict=True):
        p = item.paper
        text = " ".join(card.text_content().split())
        assert card.find_class("title")[0].get("href") == p.url
        assert " ".join(to_text(p.title).split()) in text
        assert short_authors(p.authors) in text
        assert excerpt(to_text(p.abstract)) in text
        links = {a.text_content(): a.get("href") for a in card.find_class("btn")}
        assert links["Abstract"] == p.url
        assert links.get("PDF") == p.pdf_url
        assert links.get("Code") == p.code_url
        if p.upvotes:
            assert f"{p.upvotes:,} upvote" in text
        if p.comments:
            assert f"{p.comments:,} comment" in text
        assert item.reason.replace("*", "") in text
    with_code = [i for i in items if i.paper.code_url]
    assert with_code, "the fixture digest should have a paper with a code link"
    head = " ".join(tree.find_class("head")[0].text_content().split())
    assert "Sunday, November 22, 2026" in head
    assert "LLM serving" in head and "GPU kernels" in head
    assert r.preheader == "12 new papers in LLM serving, Mixture of experts, GPU kernels"
    hidden = tree.xpath("//body/div[1]")[0]
    assert "display:none" in hidden.get("style") and r.preheader in hidden.text_content()
    foot = " ".join(tree.find_class("foot")[0].text_content().split())
    assert "because ada@example.org subscribed to" in foot
    assert "1 Example Street, 10115 Berlin" in foot
    foot_links = {a.text_content(): a.get("href") for a in tree.find_class("foot")[0].xpath(".//a")}
    assert foot_links["Manage topics"] == D.links().manage
    assert foot_links["Unsubscribe in one click"] == D.links().unsubscribe
    assert r.subject == "12 new papers in LLM serving, Mixture of experts, GPU kernels · Nov 22"


def test_the_text_part_has_the_same_content_wrapped_for_a_terminal(
    renderers: tuple[Renderer, Renderer],
) -> None:
    digest = D.digest(PAPERS, per_topic=7)
    text = renderers[0].render(digest, D.links()).text
    for line in text.splitlines():
        if len(line) > 78:
            # only a line that ends in a URL (which must stay whole) may be longer
            assert re.search(r"https?://\S+$", line), line
    flat = " ".join(text.split())
    lines = text.splitlines()
    for item in digest.items:
        p = item.paper
        assert " ".join(to_text(p.title).split()) in flat
        assert excerpt(to_text(p.abstract)) in flat
        assert f"    {p.url}" in lines  # one link per paper: the abstract page
        # the HTML part keeps the rest (issue 29: a text part one can read)
        assert item.reason not in flat
        if p.pdf_url:
            assert p.pdf_url not in text
    assert "upvote" not in text and "More like this" not in text
    assert lines.count(D.links().view) == 1
    assert lines[lines.index(D.links().view) - 1] == "Rate these papers (more or less like this):"
    assert f"Unsubscribe in one click: {D.links().unsubscribe}" in text
    assert f"Manage topics: {D.links().manage}" in flat
    assert "1 Example Street" in text
    assert max(len(line) for line in text.splitlines() if "http" not in line) <= TEXT_WIDTH


def test_an_empty_edition_says_nothing_new(renderers: tuple[Renderer, Renderer]) -> None:
    r = renderers[0].render(D.empty_digest(), D.links())
    assert r.subject == "Nothing new in LLM serving, Mixture of experts · Nov 22"
    assert "Nothing new matched your topics today" in r.html
    assert "Nothing new matched your topics today" in r.text
    assert "Unsubscribe" in r.html and D.links().unsubscribe in r.text


def test_a_topic_with_nothing_strong_today_says_so(renderers: tuple[Renderer, Renderer]) -> None:
    full = D.digest(PAPERS, per_topic=3)
    quiet = TopicSection("gpu-kernels", "GPU kernels", ())
    digest = dataclasses.replace(full, sections=(*full.sections, quiet))
    for renderer in renderers:
        r = renderer.render(digest, D.links())
        assert "Nothing strong in GPU kernels today." in r.html
        assert "Nothing strong in GPU kernels today." in " ".join(r.text.split())
    # Not when the whole digest is empty (that has its own note), nor for a full digest.
    plain = renderers[0].render(full, D.links())
    assert "Nothing strong" not in plain.html and "Nothing strong" not in plain.text


def test_subject_template_from_config_and_singular() -> None:
    renderer = Renderer(D.settings(subject="[Papers] {count} new papers: {topics} ({date:%d %b})"))
    one = D.digest(PAPERS, per_topic=1, topics=("LLM serving",))
    assert renderer.render(one, D.links()).subject == "[Papers] 1 new paper: LLM serving (22 Nov)"


def test_short_authors_and_excerpt() -> None:
    assert short_authors(("A. One", "B. Two")) == "A. One, B. Two"
    assert short_authors(tuple(f"A{i}" for i in range(8))) == "A0, A1, A2 + 5 more"
    assert short_authors(("A", "B", "C", "D")) == "A, B, C, D"  # "+ 1 more" hides nothing
    text = "First sentence here. " * 30
    cut = excerpt(text)
    assert cut.endswith("here.") and len(cut) <= 320
    words = "word " * 200
    cut = excerpt(words)
    assert cut.endswith("word…") and len(cut) <= 321
    assert excerpt("short") == "short"


def test_safe_url_keeps_http_and_drops_other_schemes() -> None:
    assert safe_url("https://arxiv.org/abs/2411.01234") == "https://arxiv.org/abs/2411.01234"
    assert safe_url(" javascript:alert(1)") == ""
    assert safe_url("data:text/html,x") == ""
    assert safe_url("https://ex.org/a b/ü") == "https://ex.org/a%20b/%C3%BC"
    assert safe_url(None) == ""


def test_an_operator_template_overrides_the_shipped_one_and_is_inlined_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "digest.html").write_text(
        "<html><head><style>.t { color: #123456; }</style></head><body>"
        "{% for item in items %}<p class='t'>{{ item.paper.title }}</p>{% endfor %}"
        "</body></html>"
    )
    renderer = Renderer(D.settings(), tmp_path)
    assert renderer.fast
    html = renderer.render(D.digest(PAPERS, per_topic=2), D.links()).html
    assert html.count('style="color:#123456"') == 6
    assert "Trending papers" not in html  # not the shipped template
    # the text template still comes from the shipped ones
    assert "Unsubscribe in one click" in renderer.render(D.empty_digest(), D.links()).text


def test_the_shipped_template_ships_inlined_and_up_to_date() -> None:
    """``templates/digest.inlined.html`` is what inlining ``digest.html`` gives now (run ``make
    templates`` after editing it), and a renderer of the shipped template uses it."""
    from newsletter.digest.inline_css import PREBUILT, inline_template_source, prebuilt
    from newsletter.digest.render import shipped_templates_dir

    shipped = shipped_templates_dir()
    source = (shipped / "digest.html").read_text(encoding="utf-8")
    made = prebuilt(source, shipped)
    assert made is not None, f"{PREBUILT} is missing or stale: run `make templates`"
    assert made == inline_template_source(source)
    assert prebuilt(source + "<!-- changed -->", shipped) is None  # another source: not used
    assert Renderer(D.settings()).inlined is not None


def test_a_send_with_the_shipped_template_needs_no_premailer(tmp_path: Path) -> None:
    """Rendering with the shipped template imports no premailer (nor its cssutils and
    requests); an operator's template still gets its CSS inlined once by premailer."""
    import subprocess
    import sys

    operator = tmp_path / "digest.html"
    operator.write_text(
        "<html><head><style>.t { color: #123456; }</style></head><body>"
        "<p class='t'>{{ preheader }}</p></body></html>"
    )
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from newsletter.digest.render import Renderer\n"
        "from tests import digests as D\n"
        "r = Renderer(D.settings())\n"
        "html = r.render(D.digest(D.papers()[:3], per_topic=1), D.links()).html\n"
        "print('premailer' in sys.modules, 'requests' in sys.modules, 'style=' in html)\n"
        "Renderer(D.settings(), Path(sys.argv[1]))\n"
        "print('premailer' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parent.parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.split() == ["False", "False", "True", "True"]


def test_a_template_with_data_built_classes_falls_back_to_premailer_per_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "digest.html").write_text(
        "<html><head><style>.topic-a { color: #aa0000; }</style></head><body>"
        "{% for s in sections %}<p class='topic-{{ s.name[0] }}'>{{ s.title }}</p>{% endfor %}"
        "</body></html>"
    )
    with caplog.at_level(logging.WARNING, logger="newsletter.digest.render"):
        renderer = Renderer(D.settings(), tmp_path)
    assert not renderer.fast
    assert "digest.html" in caplog.text and "class attribute is built from data" in caplog.text
    digest = D.digest(PAPERS, per_topic=1, topics=("Apples", "Bananas"))
    html = renderer.render(digest, D.links()).html
    # premailer ran on the rendered message: the data-built class got its style
    assert '<p class="topic-a" style="color:#a00">Apples</p>' in html
    assert '<p class="topic-b">Bananas</p>' in html


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("{% include 'x.html' %}<p>x</p>", "include"),
        ('<p class="{{ c }}">x</p>', "class attribute"),
        ("<p>Jx9q</p>", "marker"),
    ],
)
def test_templates_that_cannot_be_inlined_once_say_why(source: str, why: str) -> None:
    with pytest.raises(NotInlinable, match=why):
        inline_template_source(source)


def test_block_tags_in_head_and_between_rows_stay_in_place() -> None:
    source = (
        "<html><head><title>{% if a %}A{% else %}B{% endif %}</title>"
        "{% if a %}<meta name='x' content='{{ a }}'>{% endif %}"
        "<style>td.c { color: red; }</style></head><body><table>"
        "{% for r in rows %}<tr><td class='c'>{{ r }}</td></tr>{% endfor %}</table></body></html>"
    )
    inlined = inline_template_source(source)
    assert '<td class="c" style="color:red">{{ r }}</td>' in inlined
    assert inlined.index("{% if a %}") < inlined.index("<style>")
    assert inlined.index("{% for r in rows %}") < inlined.index("<tr>")
    assert "<title>{% if a %}A{% else %}B{% endif %}</title>" in inlined


GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"


@pytest.mark.parametrize(
    ("name", "digest"),
    [
        ("digest-12-papers.txt", D.digest(PAPERS, per_topic=4)),
        ("digest-empty.txt", D.empty_digest()),
    ],
)
def test_golden_text_part(renderers: tuple[Renderer, Renderer], name: str, digest: Digest) -> None:
    """The text part of a fixture digest, byte for byte. After an intended change to
    templates/digest.txt, regenerate with ``UPDATE_GOLDEN=1 pytest tests/digest/test_render.py``."""
    text = renderers[0].render(digest, D.links()).text
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_a_changed_paper_is_rendered_anew_not_from_the_cache(
    renderers: tuple[Renderer, Renderer],
) -> None:
    from dataclasses import replace

    fast = renderers[0]
    paper = PAPERS[3]

    def one(p: Paper) -> Digest:
        item = DigestItem(p, "t", 1.0, "title: *x*")
        return Digest(D.subscriber(), D.EDITION, (TopicSection("t", "T", (item,)),), ("T",))

    before = fast.render(one(paper), D.links())
    v2 = replace(paper, title="A replaced title (v2)", upvotes=(paper.upvotes or 0) + 100)
    after = fast.render(one(v2), D.links())
    assert "A replaced title (v2)" in after.html and "A replaced title (v2)" in after.text
    assert f"{(paper.upvotes or 0) + 100:,} upvotes" in after.html
    assert "A replaced title (v2)" not in before.html
    again = fast.render(one(paper), D.links())
    assert again.html == before.html and again.text == before.text


def _fresh_pair() -> tuple[Renderer, Renderer]:
    return Renderer(D.settings()), Renderer(D.settings())


def test_a_cached_section_is_the_section_rendered_afresh() -> None:
    """The second subscriber with the same sections gets them from the cache: the same bytes
    a fresh renderer makes for them, with their own name, address and links around them."""
    warm, cold = _fresh_pair()
    ada = D.digest(PAPERS, per_topic=5)
    bob_sub = D.subscriber(2, "bob@example.org", "Bob")
    bob = D.digest(PAPERS, per_topic=5, sub=bob_sub)
    warm.render(ada, D.links(1))
    again = warm.render(bob, D.links(2))
    fresh = cold.render(bob, D.links(2))
    assert (again.html, again.text) == (fresh.html, fresh.text)
    assert "bob@example.org" in again.html and "ada@example.org" not in again.html
    assert D.links(2).unsubscribe in again.text and D.links(1).unsubscribe not in again.text


def test_a_section_that_differs_in_one_reason_or_paper_is_not_served_from_the_cache() -> None:
    warm, cold = _fresh_pair()
    base = D.digest(PAPERS, per_topic=3, topics=("Mixture of experts",))
    warm.render(base, D.links())
    section = base.sections[0]
    first = section.items[0]
    changed_reason = dataclasses.replace(first, reason="title: *a different reason*")
    changed_paper = dataclasses.replace(
        first, paper=dataclasses.replace(first.paper, upvotes=(first.paper.upvotes or 0) + 7)
    )
    for item in (changed_reason, changed_paper):
        other = dataclasses.replace(
            base,
            sections=(dataclasses.replace(section, items=(item, *section.items[1:])),),
        )
        got, want = warm.render(other, D.links()), cold.render(other, D.links())
        assert (got.html, got.text) == (want.html, want.text)
    assert (
        "a different reason"
        in warm.render(
            dataclasses.replace(
                base, sections=(dataclasses.replace(section, items=(changed_reason,)),)
            ),
            D.links(),
        ).html
    )


def test_fragments_stay_within_their_character_budget() -> None:
    from newsletter.digest.render import Fragments

    once = Fragments(size=100, max_chars=1000)
    for i in range(50):
        assert once(i, caller=lambda i=i: f"{i:02d}" * 50) == f"{i:02d}" * 50
    assert sum(len(v) for v in once._cache.values()) <= 1000
    assert list(once._cache) == [(i, False) for i in range(40, 50)]  # the oldest went first
    calls: list[int] = []
    assert once(49, caller=lambda: str(calls.append(1))) == "49" * 50 and not calls
    small = Fragments(size=3)
    for i in range(5):
        small(i, caller=lambda: "x")
    assert list(small._cache) == [(2, False), (3, False), (4, False)]


@settings(max_examples=400, deadline=None)
@given(
    words=st.lists(
        st.one_of(
            st.text(alphabet="abc\u00e9-.", min_size=1, max_size=12),
            st.text(alphabet="x", min_size=20, max_size=100),  # longer than a line: a URL
        ),
        max_size=40,
    ),
    spaces=st.sampled_from([" ", "  ", "\t", "\n", "\u00a0 "]),
    width=st.integers(min_value=12, max_value=90),
    indent=st.sampled_from(["", "    ", "         "]),
    first=st.sampled_from([None, "", "1.  ", "    "]),
)
def test_wrap_gives_the_lines_textwrap_gives(
    words: list[str], spaces: str, width: int, indent: str, first: str | None
) -> None:
    import textwrap

    text = spaces.join(words)
    expected = textwrap.fill(
        " ".join(text.split()),
        width=width,
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    assert wrap(text, width, indent, first) == expected
