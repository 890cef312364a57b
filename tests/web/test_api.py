"""The JSON API: the same actions as the pages, an OpenAPI schema, and no 500 for any input."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from newsletter.models import SubscriberStatus
from newsletter.subscribe import Subscriptions
from tests.conftest import SmtpServer
from tests.web.conftest import link_to


def test_openapi_schema_describes_the_actions(client: TestClient) -> None:
    schema = client.get("/api/openapi.json").json()
    paths = schema["paths"]
    for path in (
        "/api/topics",
        "/api/subscribe",
        "/api/confirm",
        "/api/subscription/{token}",
        "/api/unsubscribe/{token}",
        "/api/archive/{day}",
    ):
        assert path in paths, path
    assert "put" in paths["/api/subscription/{token}"]
    assert not any(p.startswith(("/manage", "/subscribe")) for p in paths)  # pages stay out


def test_subscribe_confirm_manage_unsubscribe_by_api(
    client: TestClient, smtp_server: SmtpServer, service: Subscriptions
) -> None:
    assert [t["name"] for t in client.get("/api/topics").json()] == ["gpu-kernels", "rendering"]
    r = client.post(
        "/api/subscribe", json={"email": "ada@example.org", "topics": ["rendering"], "send_hour": 6}
    )
    assert r.status_code == 202 and r.json()["status"] == "accepted"
    again = client.post(
        "/api/subscribe", json={"email": "ada@example.org", "topics": ["rendering"]}
    )
    assert again.json() == r.json()  # the same answer: no enumeration
    token = link_to(smtp_server.messages_to("ada@example.org")[0], "confirm").rsplit("/", 1)[1]
    sub = client.post("/api/confirm", json={"token": token}).json()
    assert sub["status"] == "active" and sub["topics"] == ["rendering"] and sub["send_hour"] == 6
    stored = service.store.get_subscriber("ada@example.org")
    assert stored is not None
    manage = service.links(stored).manage.rsplit("/", 1)[1]
    put = client.put(
        f"/api/subscription/{manage}",
        json={"topics": ["gpu-kernels"], "frequency": "weekly", "paused": True},
    )
    assert put.status_code == 200 and put.json()["status"] == "paused"
    assert client.get(f"/api/subscription/{manage}").json()["frequency"] == "weekly"
    unsub = service.links(stored).unsubscribe.rsplit("/", 1)[1]
    assert client.post(f"/api/unsubscribe/{unsub}").json()["status"] == "unsubscribed"
    after = service.store.get_subscriber("ada@example.org")
    assert after is not None and after.status is SubscriberStatus.UNSUBSCRIBED
    bad = client.post("/api/subscribe", json={"email": "ada@", "topics": ["rendering"]})
    assert bad.status_code == 400 and bad.json()["field"] == "email"
    assert client.post("/api/confirm", json={"token": token + "x"}).status_code == 400


text = st.text(max_size=60)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=10,
)
subscribe_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "email": st.one_of(st.emails(), text),
            "topics": st.lists(st.sampled_from(["gpu-kernels", "rendering", "nope", ""]) | text),
        },
        optional={
            "timezone": st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus", ""]) | text,
            "send_hour": st.integers(-5, 30) | st.none(),
        },
    ),
)
segment = (text | st.sampled_from(["2026-11-17", "9999-12-31", "0001-01-01"])).map(
    lambda t: quote(t, safe="") or "x"
)
calls = st.one_of(
    st.tuples(st.just("POST"), st.just("/api/subscribe"), subscribe_bodies),
    st.tuples(st.just("POST"), st.just("/api/confirm"), json_values),
    st.tuples(st.just("PUT"), segment.map(lambda t: f"/api/subscription/{t}"), json_values),
    st.tuples(st.just("GET"), segment.map(lambda t: f"/api/subscription/{t}"), st.none()),
    st.tuples(st.just("POST"), segment.map(lambda t: f"/api/unsubscribe/{t}"), st.none()),
    st.tuples(st.just("GET"), segment.map(lambda t: f"/api/archive/{t}"), st.none()),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=calls)
def test_no_input_makes_the_api_fail(client: TestClient, call: tuple[str, str, Any]) -> None:
    method, path, body = call
    safe = TestClient(
        client.app, base_url="https://papers.example.org", raise_server_exceptions=False
    )
    r = safe.request(method, path, json=body)
    assert r.status_code < 500 or r.status_code == 503, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json") or r.status_code in (404, 405)
