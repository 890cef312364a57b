"""A digest's layout (``editions.layout``, :mod:`newsletter.edition.layout`): written when the
message is built, read back into the same digest, rendered into the same HTML."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from newsletter.digest.render import Renderer
from newsletter.edition.layout import Layouts, read_layout
from newsletter.models import Digest, DigestItem, Later, Paper, TopicSection
from tests import digests


def _papers(d: Digest) -> dict[int, Paper]:
    return {i.paper.id: i.paper for i in d.items}


def _without_scores(d: Digest) -> Digest:
    """The digest as its layout keeps it: the scores are not shown, so not kept."""
    return replace(
        d,
        sections=tuple(
            replace(s, items=tuple(replace(i, score=0.0) for i in s.items)) for s in d.sections
        ),
    )


def test_a_digest_read_back_from_its_layout_is_the_digest_and_renders_the_same() -> None:
    papers = digests.papers()
    mailed = digests.digest(papers, per_topic=5)
    text = Layouts().layout(mailed)
    layout = read_layout(text)
    assert layout is not None and layout.grouped
    back = layout.digest(mailed.subscriber, mailed.edition_date, _papers(mailed))
    assert back == _without_scores(mailed)
    renderer = Renderer(digests.settings())
    links = digests.links()
    assert renderer.render(back, links) == renderer.render(mailed, links)


def test_the_cards_signals_are_the_mails_not_the_stores() -> None:
    """Upvotes, comments and stars change after the send; the page shows what the mail did."""
    papers = [p for p in digests.papers() if p.upvotes and p.code_url and p.code_stars][:2]
    assert len(papers) == 2
    items = tuple(DigestItem(p, "gpu", 1.0, "why") for p in papers)
    mailed = Digest(digests.subscriber(), digests.EDITION, (TopicSection("gpu", "GPU", items),))
    layout = read_layout(Layouts().layout(mailed))
    assert layout is not None
    now = {p.id: replace(p, upvotes=9999, comments=999, code_stars=99999) for p in papers}
    back = layout.digest(mailed.subscriber, mailed.edition_date, now)
    assert [i.paper for i in back.items] == list(papers)


def test_quiet_topics_merged_digests_and_hostile_text_come_back_as_they_were() -> None:
    hostile = digests.hostile_digest()
    other = digests.papers()[0]
    items = (
        *hostile.items,
        DigestItem(other, "gpu-kernels", 2.0, 'line\nbreak "quoted" \\ back\u2028slash'),
    )
    merged = replace(
        hostile,
        sections=(TopicSection("all", "Your topics", items), TopicSection("quiet", "Quiet", ())),
    )
    text = Layouts(grouped=False).layout(merged)
    assert "<script>" in text and "\n" not in text  # text, one line, never HTML
    layout = read_layout(text)
    assert layout is not None and not layout.grouped
    back = layout.digest(merged.subscriber, merged.edition_date, _papers(merged))
    assert back == _without_scores(merged)
    assert [i.topic for i in back.items] == ["llm", "gpu-kernels"]  # not the section's name


def test_readers_of_one_topic_share_its_written_section() -> None:
    papers = digests.papers()
    shared = digests.digest(papers)
    layouts = Layouts()
    first = layouts.layout(shared)
    again = layouts.layout(replace(shared, subscriber=digests.subscriber(2, "bob@example.org")))
    assert first == again
    assert len(layouts._sections) == len(shared.sections)  # written once per run
    assert len(first.encode()) < 120 * len(shared.items)  # ids and short strings


def test_a_paper_no_longer_stored_is_left_out() -> None:
    mailed = digests.digest(digests.papers(), per_topic=2)
    layout = read_layout(Layouts().layout(mailed))
    assert layout is not None
    gone = mailed.items[0].paper.id
    papers = {pid: p for pid, p in _papers(mailed).items() if pid != gone}
    back = layout.digest(mailed.subscriber, mailed.edition_date, papers)
    assert [i.paper.id for i in back.items] == [i.paper.id for i in mailed.items][1:]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"v":2,"t":[],"s":[]}',
        '{"v":1,"t":"x","s":[]}',
        '{"v":1,"t":[],"s":[["a","A",[["1","why"]]]]}',
        '{"v":1,"t":[],"s":[["a","A",[[1]]]]}',
        '{"v":1,"t":[],"s":[["a","A",[[1,"why",true]]]]}',
        '{"v":1,"t":[],"s":[["a","A"]]}',
    ],
)
def test_a_layout_this_code_cannot_read_is_none_and_logged(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "newsletter.edition.layout"):
        assert read_layout(text) is None
    assert "ranking it again" in caplog.text


def test_no_layout_is_none_quietly(caplog: pytest.LogCaptureFixture) -> None:
    assert read_layout(None) is None and read_layout("") is None
    assert caplog.text == ""
    assert json.loads(Layouts().layout(digests.empty_digest()))["s"] == []


def test_a_sections_limit_and_the_papers_it_left_out_come_back_and_render_the_same() -> None:
    """A thin topic's "a quiet day" and a cut one's "N more in the archive" (issue 44) are
    recorded: the section's limit and the ids of the papers the limit left out."""
    papers = digests.papers()
    cut = TopicSection(
        "gpu-kernels",
        "GPU kernels",
        tuple(DigestItem(p, "gpu-kernels", 1.0, "why") for p in papers[:2]),
        limit=2,
        more=3,
        later=Later.of(tuple(p.id for p in papers[2:5])),
    )
    quiet = TopicSection(
        "llm", "LLM serving", (DigestItem(papers[5], "llm", 1.0, "why"),), limit=10
    )
    mailed = Digest(digests.subscriber(), digests.EDITION, (cut, quiet), ("GPU kernels", "LLM"))
    text = Layouts().layout(mailed)
    layout = read_layout(text)
    assert layout is not None
    assert [(s.limit, s.later) for s in layout.sections] == [
        (2, tuple(p.id for p in papers[2:5])),
        (10, ()),
    ]
    back = layout.digest(mailed.subscriber, mailed.edition_date, _papers(mailed))
    assert back == _without_scores(mailed)
    renderer = Renderer(digests.settings())
    links = digests.links()
    again, first = renderer.render(back, links), renderer.render(mailed, links)
    assert again == first
    for part in (first.html, first.text):
        flat = " ".join(part.split())
        assert "1 paper today in LLM serving: a quiet day" in flat
        assert "3 more in the archive" in flat
    # A layout written before limits were recorded reads as before: no notes.
    old = read_layout(
        text.replace(",2,[" + ",".join(str(p.id) for p in papers[2:5]) + "]", "").replace(
            ",10]", "]"
        )
    )
    assert old is not None and [(s.limit, s.later) for s in old.sections] == [(0, ()), (0, ())]
