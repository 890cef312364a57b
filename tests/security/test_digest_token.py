"""Issue 30: one signed token per digest. The "view in browser" link's token also serves every
"more/less like this" link of the digest, with the paper and the vote in the path; the ledger's
``editions.paper_ids`` decides whether that paper was in that reader's digest. Manage and
unsubscribe keep their own purpose-bound tokens, and no token opens a page of a longer-lived
purpose. Real fetch and send through a real SMTP server, the real app, SQLite and PostgreSQL."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import DigestItem, SubscriberStatus
from newsletter.services.link_tokens import Purpose
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.subscribe.votes import LESS, MORE, FeedbackLinks
from tests.conftest import SmtpServer
from tests.security.helpers import ADA, mailed_digest, open_feedback_pages, send_first_digest
from tests.web.conftest import BASE, Clock, csrf_of, links

VOTE = re.compile(rf"^{re.escape(BASE)}/feedback/([^/]+)/([^/]+)/(\d+)/(more|less)$")


def votes_in(smtp: SmtpServer, email: str) -> list[tuple[str, str, int, str]]:
    """(token, topic, paper id, more|less) of every more/less link of the mailed digest."""
    found = [VOTE.match(url) for url in links(mailed_digest(smtp, email))]
    return [(m[1], m[2], int(m[3]), m[4]) for m in found if m]


def token_of(path: str) -> str:
    return path.rstrip("/").split("/")[-1]


def test_one_token_signs_the_view_link_and_every_vote_link(
    client: TestClient,
    web_store: Store,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    votes = votes_in(smtp_server, ADA)
    view = token_of(mailed["archive/view"])
    record = web_store.edition_for(web_store.get_subscriber(ADA).id, clock().date())  # type: ignore[union-attr]
    assert record is not None
    carried = [p.id for p in web_store.edition_papers(record.id)]
    assert len(votes) == 2 * len(carried) >= 2
    assert {v[0] for v in votes} == {view}  # one signature for the view and all vote links
    assert [v[2] for v in votes] == [pid for pid in carried for _ in (MORE, LESS)]
    assert {v[1] for v in votes} == {"gpu-kernels"} and {v[3] for v in votes} == {"more", "less"}
    # Three tokens in the whole mail: the digest's, manage's and unsubscribe's.
    tokens = {token_of(url) for url in links(mailed_digest(smtp_server, ADA)) if "/" in url[8:]}
    tokens = {t for t in tokens if t.count(".") == 2}
    manage, unsubscribe = token_of(mailed["manage"]), token_of(mailed["unsubscribe"])
    assert tokens == {view, manage, unsubscribe}

    # The vote through the page: the paper, the vote and the section's topic are recorded.
    _, topic, pid, _ = votes[1]
    less = f"/feedback/{view}/{topic}/{pid}/less"
    page = client.get(less)
    assert page.status_code == 200 and "Fewer papers like this?" in page.text
    done = client.post(less, data={"csrf": csrf_of(page.text)})
    assert done.status_code == 200 and "Thanks, noted" in done.text
    [vote] = web_store.votes_of(web_store.get_subscriber(ADA).id)  # type: ignore[union-attr]
    assert (vote.paper_id, vote.value, vote.topic) == (pid, LESS, "gpu-kernels")


def test_a_vote_link_for_a_paper_not_in_the_readers_digest_is_refused(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    smtp_server: SmtpServer,
    clock: Clock,
) -> None:
    ada = send_first_digest(web_config, web_store, clock, ADA)
    view = votes_in(smtp_server, ADA)[0][0]
    record = web_store.edition_for(ada.id, clock().date())
    assert record is not None
    carried = {p.id for p in web_store.edition_papers(record.id)}
    stored = {p.id for p in web_store.recent_papers(clock().replace(year=2000))}
    other = min(stored - carried)  # a stored paper that Ada's digest did not carry
    for path in (f"/feedback/{view}/gpu-kernels/{other}/more", f"/feedback/{view}/{other}/less"):
        page = client.get(path)
        assert page.status_code == 404 and "not in the digest" in page.text
        assert 'name="csrf"' not in page.text  # no button to press
        csrf = csrf_of(client.get(f"/feedback/{view}/{min(carried)}/more").text)
        r = client.post(path, data={"csrf": csrf})
        assert r.status_code == 404 and "Nothing was recorded" in r.text
    # A bad vote word or a mangled topic is no link at all.
    assert client.get(f"/feedback/{view}/{min(carried)}/maybe").status_code == 400
    assert client.get(f"/feedback/{view}/~%21%21/{min(carried)}/more").status_code == 400
    assert web_store.votes_of(ada.id) == []
    good = client.get(f"/feedback/{view}/gpu-kernels/{min(carried)}/more")
    assert good.status_code == 200


def test_no_token_opens_a_page_of_another_or_longer_lived_purpose(
    client: TestClient,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    """The digest token lives a year: it opens no manage or unsubscribe page (90 days); and the
    manage and unsubscribe tokens open no vote or view page."""
    view = token_of(mailed["archive/view"])
    _, topic, pid, _ = votes_in(smtp_server, ADA)[0]
    for path in (f"/manage/{view}", f"/unsubscribe/{view}"):
        r = client.get(path)
        assert r.status_code == 400 and "This link is not valid" in r.text
        assert 'name="topics"' not in r.text
    assert client.post(f"/unsubscribe/{view}").status_code == 400
    ada = web_store.get_subscriber(ADA)
    assert ada is not None and ada.status is SubscriberStatus.ACTIVE
    for other in (token_of(mailed["manage"]), token_of(mailed["unsubscribe"])):
        for path in (f"/feedback/{other}/{topic}/{pid}/more", f"/archive/view/{other}"):
            r = client.get(path)
            assert r.status_code == 400 and "This link is not valid" in r.text, path
    # A feedback token of the old form is not a digest token either, nor the reverse.
    old = FeedbackLinks(service.tokens, BASE).for_subscriber(ada)
    paper = web_store.edition_papers(web_store.edition_for(ada.id, clock().date()).id)[0]  # type: ignore[union-attr]
    old_token = old.token(DigestItem(paper, topic, 1.0, ""), MORE)
    assert client.get(f"/archive/view/{old_token}").status_code == 400
    assert client.get(f"/feedback/{old_token}/{topic}/{pid}/more").status_code == 400
    assert client.get(f"/feedback/{view}").status_code == 400
    # Tampered with: refused.
    payload, stamp, sig = view.split(".")
    bad = f"{payload}.{stamp}.{sig[:-2]}AA"
    assert client.get(f"/feedback/{bad}/{topic}/{pid}/more").status_code == 400
    assert web_store.votes_of(ada.id) == []


def test_links_mailed_before_keep_working(
    client: TestClient,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    """A per-paper feedback token and a view token that named no address (both mailed before
    this change) still vote; a view token of that old kind also serves the new vote paths."""
    ada = web_store.get_subscriber(ADA)
    assert ada is not None
    record = web_store.edition_for(ada.id, clock().date())
    assert record is not None
    paper = web_store.edition_papers(record.id)[0]
    old = FeedbackLinks(service.tokens, BASE).for_subscriber(ada)
    url = old.url(DigestItem(paper, "gpu-kernels", 1.0, ""), MORE).removeprefix(BASE)
    open_feedback_pages(client, url)
    legacy = service.tokens.make(Purpose.VIEW, {"s": ada.id, "d": clock().date().isoformat()})
    assert client.get(f"/archive/view/{legacy}").status_code == 200
    feedback, done, _ = open_feedback_pages(client, f"/feedback/{legacy}/{paper.id}/more")
    assert "More papers like this?" in feedback.text and "Thanks, noted" in done.text
