"""An unknown address answers a page in a browser and JSON to the API (issue 29 item 10)."""

from __future__ import annotations

from fastapi.testclient import TestClient

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_an_unknown_page_in_a_browser_is_a_page(client: TestClient) -> None:
    r = client.get("/no-such-page", headers=BROWSER)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "<h1>Page not found</h1>" in r.text and 'href="/subscribe"' in r.text
    assert "Content-Security-Policy" in r.headers  # the security headers as on every page


def test_unknown_api_routes_and_non_browsers_keep_json(client: TestClient) -> None:
    for path, headers in (
        ("/api/no-such-route", BROWSER),
        ("/no-such-page", {"Accept": "application/json"}),
        ("/no-such-page", {}),
    ):
        r = client.get(path, headers=headers)
        assert r.status_code == 404
        assert r.json() == {"detail": "Not Found"}, path
