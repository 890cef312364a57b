"""The "more/less like this" pages through the real app, on a real database: a GET changes
nothing, a POST (with CSRF) votes, undo withdraws; bad tokens, erased readers and unknown papers
get a clear page and store nothing; the manage page lists the votes with undo."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import DigestItem, Paper, PaperData, Subscriber
from newsletter.services.link_tokens import Purpose, Tokens, signing_key
from newsletter.sources.ingest import decide
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.subscribe.votes import LESS, MORE, FeedbackLinks, read_token
from tests.web.conftest import BASE, Clock, csrf_of


@pytest.fixture
def reader(web_store: Store, clock: Clock) -> Subscriber:
    sub, _ = web_store.add_subscriber("ada@example.org", topics=("gpu-kernels",), now=clock())
    return sub


@pytest.fixture
def paper(web_store: Store, clock: Clock) -> Paper:
    data = PaperData(key="2611.00019", title="Fast <kernels> & friends", abstract="About GPUs.")
    web_store.write_papers("test", decide([data], {}), clock())
    return web_store.papers_by_keys(["2611.00019"])["2611.00019"]


def path_for(config: Config, clock: Clock, sub: Subscriber, paper: Paper, value: int) -> str:
    tokens = Tokens(signing_key(config), now=clock)
    links = FeedbackLinks(tokens, BASE).for_subscriber(sub)
    url = links.url(DigestItem(paper, "gpu-kernels", 1.0, ""), value)
    assert url.startswith(f"{BASE}/feedback/")
    return url.removeprefix(BASE)


def test_opening_the_link_changes_nothing_and_the_button_votes(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    clock: Clock,
    reader: Subscriber,
    paper: Paper,
) -> None:
    path = path_for(web_config, clock, reader, paper, MORE)
    for _ in range(3):  # a link scanner, a preview pane, the reader
        page = client.get(path)
        assert page.status_code == 200
        assert "Show me more papers like: Fast &lt;kernels&gt; &amp; friends" in page.text
    assert web_store.votes_of(reader.id) == []

    done = client.post(path, data={"csrf": csrf_of(page.text)})
    assert done.status_code == 200 and "Thanks, noted" in done.text
    [vote] = web_store.votes_of(reader.id)
    assert (vote.paper_key, vote.value, vote.topic) == ("2611.00019", MORE, "gpu-kernels")
    assert "already asked for more" in client.get(path).text

    less = path_for(web_config, clock, reader, paper, LESS)
    page = client.get(less)
    assert "Show me fewer papers like" in page.text
    assert [v.value for v in web_store.votes_of(reader.id)] == [MORE]  # the GET changed nothing
    client.post(less, data={"csrf": csrf_of(page.text)})
    assert [v.value for v in web_store.votes_of(reader.id)] == [LESS]  # replaced, not added

    undone = client.post(less, data={"csrf": csrf_of(page.text), "undo": "1"})
    assert undone.status_code == 200 and "withdrawn" in undone.text
    assert web_store.votes_of(reader.id) == []


def test_a_post_without_the_csrf_field_stores_nothing(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    clock: Clock,
    reader: Subscriber,
    paper: Paper,
) -> None:
    path = path_for(web_config, clock, reader, paper, MORE)
    client.get(path)  # sets the cookie
    assert client.post(path, data={}).status_code == 403
    assert client.post(path, data={"csrf": "forged"}).status_code == 403
    assert web_store.votes_of(reader.id) == []


def test_tampered_foreign_and_expired_feedback_tokens_get_a_clear_400(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
    reader: Subscriber,
    paper: Paper,
) -> None:
    path = path_for(web_config, clock, reader, paper, MORE)
    token = path.removeprefix("/feedback/")
    assert read_token(service.tokens, token).paper_key == "2611.00019"
    payload, stamp, sig = token.split(".")
    other = path_for(web_config, clock, reader, paper, LESS).removeprefix("/feedback/")
    manage = service.tokens.make(Purpose.MANAGE, {"s": reader.id, "e": reader.email})
    for bad in (
        f"{payload}.{stamp}.{sig[:-3]}xyz",
        f"{other.split('.')[0]}.{stamp}.{sig}",  # the "less" payload under the "more" signature
        manage,  # another purpose
        "garbage",
    ):
        r = client.get(f"/feedback/{bad}")
        assert r.status_code == 400 and "This link is not valid" in r.text, bad
        r = client.post(f"/feedback/{bad}", data={"csrf": csrf_of(client.get(path).text)})
        assert r.status_code == 400
    clock.advance(days=366)
    r = client.get(path)
    assert r.status_code == 400 and "This link has expired" in r.text
    assert web_store.votes_of(reader.id) == []


def test_an_erased_reader_or_an_unknown_paper_gets_a_message_and_nothing_is_stored(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    clock: Clock,
    reader: Subscriber,
    paper: Paper,
) -> None:
    ghost = Paper(
        **{
            **{f: getattr(paper, f) for f in paper.__dataclass_fields__ if f != "_hash"},
            "key": "2611.99999",
            "id": 999,
        }
    )  # type: ignore[arg-type]
    unknown = path_for(web_config, clock, reader, ghost, MORE)
    r = client.get(unknown)
    assert r.status_code == 404 and "2611.99999 is no longer stored" in r.text
    path = path_for(web_config, clock, reader, paper, MORE)
    csrf = csrf_of(client.get(path).text)
    assert client.post(unknown, data={"csrf": csrf}).status_code == 404

    assert web_store.remove_subscriber("ada@example.org")
    r = client.get(path)
    assert r.status_code == 410 and "no longer subscribed" in r.text
    r = client.post(path, data={"csrf": csrf})
    assert r.status_code == 410 and "Nothing was recorded" in r.text
    assert web_store.votes_for([reader.id]) == {}
    with web_store.engine.connect() as conn:
        from sqlalchemy import func, select

        from newsletter.store.tables import votes

        assert conn.execute(select(func.count()).select_from(votes)).scalar_one() == 0


def test_the_manage_page_lists_votes_and_undoes_one(
    client: TestClient,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
    reader: Subscriber,
    paper: Paper,
) -> None:
    web_store.set_vote(reader.id, paper.id, LESS, "gpu-kernels", clock())
    manage = service.links(reader).manage.removeprefix(BASE)
    page = client.get(manage)
    assert page.status_code == 200
    assert "Fast &lt;kernels&gt; &amp; friends" in page.text and "less like this" in page.text
    assert clock().strftime("%Y-%m-%d") in page.text
    form = re.search(r'action="(/manage/[^"]+/unvote)"', page.text)
    assert form
    assert client.post(form.group(1), data={"paper": str(paper.id)}).status_code == 403
    assert len(web_store.votes_of(reader.id)) == 1
    r = client.post(form.group(1), data={"csrf": csrf_of(page.text), "paper": str(paper.id)})
    assert r.status_code == 200 and "Vote withdrawn" in r.text and "No votes yet" in r.text
    assert web_store.votes_of(reader.id) == []


def test_the_feedback_page_shows_latex_titles_as_text(
    client: TestClient, web_config: Config, web_store: Store, clock: Clock, reader: Subscriber
) -> None:
    """Issue 29: the stored title keeps its LaTeX (search reads it); the page shows text."""
    data = PaperData(key="2611.00007", title=r"Sub-$O(n^2)$ \textit{Fast} M\'elange")
    web_store.write_papers("test", decide([data], {}), clock())
    paper = web_store.papers_by_keys(["2611.00007"])["2611.00007"]
    assert paper.title == data.title
    page = client.get(path_for(web_config, clock, reader, paper, MORE))
    assert "Show me more papers like: Sub-O(n²) Fast Mélange" in page.text
