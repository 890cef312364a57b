"""A reader's own topic in a real send (issue 45): the bundled demo on SQLite and PostgreSQL,
semantic ranking on, mailed through a real SMTP server on loopback.

Ada adds "reinforcement learning that writes faster GPU code" with an example paper: her digest
gets a section titled with her words, ranked by meaning fused with the words that match, with
the own-topic reason; her "view in browser" page shows it as mailed; her "more like this" on it
is stored under that topic. Grace and Marie get nothing of it, and neither does the public
archive.
"""

from __future__ import annotations

import html as htmllib
import re

import lxml.html
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import SubscriberStatus
from newsletter.semantic.vectors import VectorSource
from newsletter.store import Store
from newsletter.subscribe.own_topics import OwnTopicEditor, sentence_hash
from newsletter.web import create_app
from tests.conftest import NOW, SmtpServer
from tests.sends import run_send
from tests.web.conftest import csrf_of
from tests.web.test_view_as_mailed import BASE, demo, mailed, shape

__all__ = ["demo"]

SENTENCE = "reinforcement learning that writes faster GPU code"
EXAMPLE = "2611.00017"  # a CUDA-L paper of the demo's feeds


def _sections(html: str) -> list[str]:
    doc = lxml.html.fromstring(html)
    return [
        " ".join(td.text_content().split()) for td in doc.xpath('//td[contains(@class, "section")]')
    ]


def test_an_own_topic_is_a_section_of_its_reader_only(
    demo: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    config, store = demo
    ada = store.get_subscriber("ada@example.org")
    assert ada is not None and ada.status is SubscriberStatus.ACTIVE
    assert store.paper_by_key(EXAMPLE) is not None
    editor = OwnTopicEditor(config, store, lambda: NOW)
    own = editor.add(ada, SENTENCE, EXAMPLE)
    # Embedded once, when saved: the send finds the sentence's vector by its hash.
    model = VectorSource(config, store, lambda: NOW).model
    assert own.text_hash == sentence_hash(SENTENCE)
    assert store.vectors(model, [own.text_hash])

    assert run_send(config, store, NOW).sent == 3
    digests = mailed(smtp_server)
    ada_html = digests["ada@example.org"][1]
    titles = _sections(ada_html)
    assert titles[0].startswith("LLM serving")  # her operator topics first, then her own
    assert titles[-1].startswith(SENTENCE), titles
    assert "close in meaning to your topic “" + SENTENCE + "”" in htmllib.unescape(ada_html)
    assert "match papers by their words only" not in ada_html  # semantic: no lexical note
    for other in ("grace@example.org", "marie@example.org"):
        assert SENTENCE not in htmllib.unescape(digests[other][1]), other
        assert "your topic" not in digests[other][1]

    with TestClient(create_app(config, store, None)) as client:
        view, _ = digests["ada@example.org"]
        page = client.get(view)
        assert page.status_code == 200
        assert shape(page.text, ada.email) == shape(ada_html, ada.email)
        assert _sections(page.text)[-1].startswith(SENTENCE)
        for path in ("/archive", f"/archive/{NOW.date().isoformat()}"):
            public = client.get(path)
            assert public.status_code == 200, path
            assert SENTENCE not in htmllib.unescape(public.text), path
            assert own.name not in public.text

        # "More like this" on a paper of her own topic is a vote under that topic.
        more = re.findall(
            rf'href="{re.escape(BASE)}(/feedback/[^"]+/{re.escape(own.name)}/\d+/more)"', ada_html
        )
        assert more, "no vote link names the own topic"
        opened = client.get(more[0])
        assert opened.status_code == 200
        done = client.post(more[0], data={"csrf": csrf_of(opened.text)})
        assert done.status_code == 200
    votes = store.votes_of(ada.id)
    assert [v.topic for v in votes] == [own.name]


def test_a_reader_without_due_edition_adds_no_row_and_removal_drops_the_section(
    demo: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    config, store = demo
    ada = store.get_subscriber("ada@example.org")
    assert ada is not None
    editor = OwnTopicEditor(config, store, lambda: NOW)
    own = editor.add(ada, SENTENCE, EXAMPLE)
    assert editor.remove(ada, own.id) is True
    assert run_send(config, store, NOW).sent == 3
    ada_html = mailed(smtp_server)["ada@example.org"][1]
    assert SENTENCE not in htmllib.unescape(ada_html)
