"""The "more/less like this" links: signed per reader, paper and vote; in every item of both
parts; made without giving up the per-run caches of sections and cards."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from pathlib import Path

import pytest

from newsletter.digest.render import Renderer
from newsletter.services.link_tokens import Purpose, TokenError, Tokens
from newsletter.subscribe.votes import (
    LESS,
    MORE,
    DigestVote,
    FeedbackLinks,
    VoteLinks,
    read_token,
    topic_of_segment,
    topic_segment,
)
from tests import digests as D

PAPERS = D.papers()
LINK = re.compile(r"https://papers\.example\.org/feedback/([A-Za-z0-9_.\-]+)")


def test_a_family_token_is_an_ordinary_signed_token() -> None:
    tokens = Tokens("s3cret", now=lambda: D.NOW)
    head = tokens.family(Purpose.FEEDBACK).head({"s": 7, "e": "zoë@example.org"})
    tail = tokens.family(Purpose.FEEDBACK).tail({"p": "hep-th/9901001", "v": -1, "t": "moe"})
    token = head.make(tail)
    assert tokens.read(Purpose.FEEDBACK, token) == {
        "s": 7,
        "e": "zoë@example.org",
        "p": "hep-th/9901001",
        "v": -1,
        "t": "moe",
    }
    with pytest.raises(TokenError):
        tokens.read(Purpose.MANAGE, token)  # another purpose
    with pytest.raises(TokenError):
        Tokens("another secret").read(Purpose.FEEDBACK, token)
    later = Tokens("s3cret", now=lambda: D.NOW + timedelta(days=366))
    with pytest.raises(TokenError) as e:
        later.read(Purpose.FEEDBACK, token)
    assert e.value.expired


def test_a_tampered_feedback_token_is_refused() -> None:
    tokens = Tokens("s3cret", now=lambda: D.NOW)
    url = FeedbackLinks(tokens, "https://x.example").for_subscriber(D.subscriber()).url
    item = D.digest(PAPERS).items[0]
    token = url(item, MORE).rsplit("/", 1)[1]
    payload, stamp, sig = token.split(".")
    flipped = read_token(tokens, url(item, LESS).rsplit("/", 1)[1])
    assert flipped.value == LESS
    # the payload of the "less" token with the signature of the "more" one
    less_payload = url(item, LESS).rsplit("/", 1)[1].split(".")[0]
    for bad in (f"{less_payload}.{stamp}.{sig}", f"{payload}.{stamp}.{sig[:-2]}AA", token[:-1]):
        with pytest.raises(TokenError):
            read_token(tokens, bad)


def render_both(renderer: Renderer, sid: int) -> tuple[str, str]:
    digest = D.digest(PAPERS, per_topic=4, sub=D.subscriber(sid, f"reader{sid}@example.org"))
    out = renderer.render(digest, D.links(sid))
    return out.html, out.text


def test_every_item_has_both_links_for_its_reader_in_both_parts() -> None:
    """The HTML has each paper's two links; the text part has them too when there is no view
    page, and otherwise one "rate these papers" link to it (issue 29: a readable text part)."""
    renderer = Renderer(D.settings())
    digest = D.digest(PAPERS, per_topic=4)
    out = renderer.render(digest, D.links())
    no_view = renderer.render(digest, dataclasses.replace(D.links(), view=None))
    tokens = Tokens(D.SECRET, now=lambda: D.NOW)
    for part in (out.html, no_view.html, no_view.text):
        found = [read_token(tokens, t) for t in LINK.findall(part)]
        expected = [(i.paper.key, v, i.topic) for i in digest.items for v in (MORE, LESS)]
        assert [(f.paper_key, f.value, f.topic) for f in found] == expected
        readers = {(f.subscriber_id, tokens.made_for(f.reader, "ada@example.org")) for f in found}
        assert readers == {(1, True)}
    assert out.html.count(">More like this</a>") == len(digest.items) == 12
    assert out.html.count(">Less like this</a>") == 12
    assert no_view.text.count("    More like this  https://") == 12
    assert LINK.findall(out.text) == [] and out.text.count(D.links().view or "-") == 1
    assert "Rate these papers (more or less like this):" in out.text
    for part in (out.html, out.text, no_view.html, no_view.text):
        assert "fbk" not in part  # no marker left behind


def test_readers_sharing_a_cached_section_each_get_their_own_links() -> None:
    renderer = Renderer(D.settings())
    fragments = renderer.html_env.globals["once"]
    html1, text1 = render_both(renderer, 1)
    cached = len(fragments._cache)  # type: ignore[attr-defined]
    html2, text2 = render_both(renderer, 2)
    assert len(fragments._cache) == cached  # type: ignore[attr-defined]  # nothing rendered anew
    tokens = Tokens(D.SECRET, now=lambda: D.NOW)
    for part, sid in ((html1, 1), (html2, 2)):
        assert {read_token(tokens, t).subscriber_id for t in LINK.findall(part)} == {sid}
    for part, sid in ((text1, 1), (text2, 2)):  # the text part: one link to the reader's page
        assert D.links(sid).view in part and D.links(3 - sid).view not in part


def test_without_feedback_links_the_digest_shows_none() -> None:
    renderer = Renderer(D.settings())
    out = renderer.render(D.digest(PAPERS, per_topic=4), D.links(feedback=False))
    assert "like this" not in out.html and "like this" not in out.text
    assert "/feedback/" not in out.html and "fbk" not in out.html + out.text
    # and a digest with links rendered afterwards by the same renderer still gets them
    again = renderer.render(D.digest(PAPERS, per_topic=4), D.links())
    assert again.html.count(">More like this</a>") == 12


def test_feed_text_that_looks_like_a_hole_stays_text() -> None:
    import dataclasses

    from newsletter.digest import fragments

    digest = D.digest(PAPERS, per_topic=2)
    item = digest.sections[0].items[0]
    fake = (
        f"fbk000000000000x{item.paper.id}m and {fragments.HOLE_MARK[:-1]}"  # no full prefix known
    )
    paper = dataclasses.replace(item.paper, title=fake)
    section = dataclasses.replace(
        digest.sections[0],
        items=(dataclasses.replace(item, paper=paper), *digest.sections[0].items[1:]),
    )
    digest = dataclasses.replace(digest, sections=(section, *digest.sections[1:]))
    out = Renderer(D.settings()).render(digest, D.links())
    assert fake in out.text and fake in out.html
    assert len(LINK.findall(out.html)) == 2 * len(digest.items)


def test_feedback_outside_a_cached_fragment_is_the_readers_link(tmp_path: Path) -> None:
    (tmp_path / "digest.txt").write_text(
        "{% for item in items %}{{ feedback(item, 1) }}\n{{ feedback(item, -1) }}\n{% endfor %}"
    )
    renderer = Renderer(D.settings(), templates_dir=tmp_path)
    digest = D.digest(PAPERS, per_topic=1)
    for sid in (1, 2):
        text = renderer.render(digest, D.links(sid)).text
        tokens = Tokens(D.SECRET, now=lambda: D.NOW)
        found = [read_token(tokens, t) for t in LINK.findall(text)]
        assert [(f.subscriber_id, f.paper_key, f.value) for f in found] == [
            (sid, i.paper.key, v) for i in digest.items for v in (MORE, LESS)
        ]


def test_a_template_that_caches_links_regardless_leaks_no_hole(tmp_path: Path) -> None:
    (tmp_path / "digest.txt").write_text(
        "{% for item in items %}{% call once(item.paper, 't') %}"
        "[{{ feedback(item, 1) }}]{% endcall %}\n{% endfor %}"
    )
    renderer = Renderer(D.settings(), templates_dir=tmp_path)
    digest = D.digest(PAPERS, per_topic=1)
    with_links = renderer.render(digest, D.links()).text
    assert len(LINK.findall(with_links)) == len(digest.items)
    without = renderer.render(digest, D.links(feedback=False)).text
    assert without.split() == ["[][][]"] and "fbk" not in without


@pytest.mark.parametrize(
    "topic",
    ["gpu-kernels", "cs.LG", "a/b", "~x", ".", "..", "LLM serving", "zoë", "50%", "x" * 150],
)
def test_any_topic_name_survives_the_path(topic: str) -> None:
    """A section's topic travels in the vote link's path: names of letters, digits, ``-``,
    ``_`` and ``.`` as they are, anything else in URL-safe base64 (no slash, no percent)."""
    segment = topic_segment(topic)
    assert re.fullmatch(r"[A-Za-z0-9._~-]+", segment) and segment not in (".", "..")
    assert topic_of_segment(segment) == topic
    item = dataclasses.replace(D.digest(PAPERS).items[0], topic=topic)
    url = VoteLinks("https://x.example").for_digest("TOKEN").url(item, LESS)
    assert url == f"https://x.example/feedback/TOKEN/{segment}/{item.paper.id}/less"
    vote = DigestVote.parse("TOKEN", item.paper.id, "less", segment)
    assert (vote.value, vote.topic, vote.path) == (LESS, topic, url.split("/feedback/")[1])
    for bad in ("~!!", "a b", "~"):
        with pytest.raises(TokenError):
            topic_of_segment(bad)
    with pytest.raises(TokenError):
        DigestVote.parse("TOKEN", 1, "links", None)


def test_a_digests_vote_links_carry_its_one_token_and_render_in_place_of_tokens() -> None:
    """The renderer takes the digest's vote links as it takes per-paper tokens: every item's
    two links, in the HTML, and in the text part when there is no view page."""
    renderer = Renderer(D.settings())
    digest = D.digest(PAPERS, per_topic=4)
    votes = VoteLinks("https://papers.example.org").for_digest("ONE.TOKEN.sig")
    links = dataclasses.replace(D.links(), feedback=votes, view=None)
    out = renderer.render(digest, links)
    pattern = r"https://papers\.example\.org/feedback/ONE\.TOKEN\.sig/([^/]+)/(\d+)/(more|less)"
    for part in (out.html, out.text):
        found = re.findall(pattern, part)
        assert found == [
            (topic_segment(i.topic), str(i.paper.id), word)
            for i in digest.items
            for word in ("more", "less")
        ]
