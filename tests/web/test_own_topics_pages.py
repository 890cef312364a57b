"""The manage page's "Your own topics" form (issue 45), on SQLite and PostgreSQL: add, edit,
remove; the limits, refusals shown inline, the daily edit budget, CSRF; a hostile sentence stays
text everywhere it is shown."""

from __future__ import annotations

import html as htmllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config, load_config
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.conftest import NOW, SmtpServer, write_config
from tests.web.conftest import BASE, Clock, csrf_of, web_settings


def own_config(tmp_path: Path, db_url: str, smtp: SmtpServer, **own: object) -> Config:
    data = web_settings(db_url, smtp)
    data["own_topics"] = {"enabled": True, "max": 2, "max_chars": 60, "max_examples": 2, **own}
    return load_config(write_config(tmp_path, data))


@pytest.fixture
def setup(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, clock: Clock
) -> Iterator[tuple[TestClient, Store, str, int]]:
    config = own_config(tmp_path, db_url, smtp_server, edits_per_day=6)
    store = Store(config.database_url)
    store.upgrade()
    sub, _ = store.add_subscriber("ada@example.org", topics=("gpu-kernels",), now=NOW)
    manage = Subscriptions(Services(config, store, clock=clock)).links(sub).manage
    try:
        with TestClient(create_app(config, store, None, now=clock), base_url=BASE) as client:
            yield client, store, manage.removeprefix(BASE), sub.id
    finally:
        store.close()


def post(client: TestClient, manage: str, **form: str) -> tuple[int, str]:
    page = client.get(manage)
    r = client.post(f"{manage}/own", data={"csrf": csrf_of(page.text), **form})
    return r.status_code, r.text


def test_add_edit_remove(setup: tuple[TestClient, Store, str, int]) -> None:
    client, store, manage, sid = setup
    page = client.get(manage).text
    assert "Your own topics" in page and "match papers by their words only" in page  # lexical
    status, text = post(
        client, manage, action="add", text="Quantum decoders", examples="2401.04088v2"
    )
    assert status == 200 and "Your own topic was added" in text
    [own] = store.own_topics_of([sid])[sid]
    assert (own.text, own.examples) == ("Quantum decoders", ("2401.04088",))
    assert 'value="Quantum decoders"' in text

    status, text = post(
        client, manage, action="edit", id=str(own.id), text="Surface code decoders", examples=""
    )
    assert status == 200 and "was changed" in text
    [edited] = store.own_topics_of([sid])[sid]
    assert (edited.id, edited.text, edited.examples) == (own.id, "Surface code decoders", ())

    status, text = post(client, manage, action="remove", id=str(own.id))
    assert status == 200 and "was removed" in text
    assert store.own_topics_of([sid]) == {}


@pytest.mark.parametrize(
    ("text", "examples", "says"),
    [
        ("x" * 61, "", "too long: at most 60 characters"),
        ("<b>decoders</b>", "", "no HTML"),
        ("see https://evil.example.com/now", "", "no links"),
        ("decoders at evil.com", "", "no links"),
        ("decoders", "2401.04088 mixtral", "example 2 is not an arXiv id"),
        ("decoders", "2401.04088 2401.04089 2401.04090", "too many examples"),
        ("the of and", "", "words of substance"),
    ],
)
def test_refusals_are_shown_inline_and_nothing_is_stored(
    setup: tuple[TestClient, Store, str, int], text: str, examples: str, says: str
) -> None:
    client, store, manage, sid = setup
    status, page = post(client, manage, action="add", text=text, examples=examples)
    assert status == 400
    assert says in htmllib.unescape(page)
    assert 'class="error own-error"' in page
    assert store.own_topics_of([sid]) == {}


def test_the_topic_limit_and_the_daily_budget(
    setup: tuple[TestClient, Store, str, int], clock: Clock
) -> None:
    client, store, manage, sid = setup
    assert post(client, manage, action="add", text="first topic")[0] == 200
    assert post(client, manage, action="add", text="second topic")[0] == 200
    status, page = post(client, manage, action="add", text="third topic")
    assert status == 400 and "the most allowed" in page
    assert "Add topic" not in page  # no add form at the limit
    first = store.own_topics_of([sid])[sid][0]
    for n in range(4):  # 6 changes a day: 2 adds, then 4 edits
        assert (
            post(client, manage, action="edit", id=str(first.id), text=f"edit {n} here")[0] == 200
        )
    status, page = post(client, manage, action="edit", id=str(first.id), text="one too many")
    assert status == 400 and "too many changes today" in page
    assert store.own_topics_of([sid])[sid][0].text == "edit 3 here"
    clock.advance(days=1, minutes=1)
    assert post(client, manage, action="edit", id=str(first.id), text="next day")[0] == 200


def test_another_readers_topic_cannot_be_touched_and_csrf_is_required(
    setup: tuple[TestClient, Store, str, int],
) -> None:
    client, store, manage, sid = setup
    bob, _ = store.add_subscriber("bob@example.org", now=NOW)
    his = store.add_own_topic(bob.id, "his topic", "h", [], NOW, limit=3)
    assert his is not None
    status, page = post(client, manage, action="remove", id=str(his.id))
    assert status == 400 and "not one of yours" in page
    status, page = post(client, manage, action="edit", id=str(his.id), text="mine now")
    assert status == 400
    assert store.own_topics_of([bob.id])[bob.id][0].text == "his topic"
    r = client.post(f"{manage}/own", data={"action": "add", "text": "no csrf"})
    assert r.status_code == 403
    assert store.own_topics_of([sid]) == {}


def test_a_hostile_sentence_stays_text(setup: tuple[TestClient, Store, str, int]) -> None:
    client, store, manage, sid = setup
    hostile = "\"' onmouseover=alert(1) x=' & \u202e{{7*7}} decoders"
    status, page = post(client, manage, action="add", text=hostile)
    assert status == 200, page
    [own] = store.own_topics_of([sid])[sid]
    assert own.text == hostile
    assert "onmouseover=alert(1) x=&#39;" in page  # escaped inside the value attribute
    assert "{{7*7}}" in page and "49" not in page.split("Your own topics")[1][:2000]
    assert '" onmouseover' not in page


def test_turned_off_hides_the_form_and_refuses(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, clock: Clock
) -> None:
    config = own_config(tmp_path, db_url, smtp_server, enabled=False)
    store = Store(config.database_url)
    store.upgrade()
    try:
        sub, _ = store.add_subscriber("ada@example.org", now=NOW)
        manage = Subscriptions(Services(config, store, clock=clock)).links(sub).manage
        with TestClient(create_app(config, store, None, now=clock), base_url=BASE) as client:
            path = manage.removeprefix(BASE)
            assert "Your own topics" not in client.get(path).text
            status, page = post(client, path, action="add", text="quantum decoders")
            assert status == 400 and "turned off" in page
        assert store.own_topics_of([sub.id]) == {}
    finally:
        store.close()
