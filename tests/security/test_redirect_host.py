"""Issue 27, a suspicion checked: the trailing-slash redirect trusted the client's Host header.

Starlette answers ``GET /subscribe/`` with a redirect to the same URL without the slash, built
from the request's ``Host`` header: ``Host: evil.example`` gave ``Location:
http://evil.example/subscribe``, so anything that caches or follows it (a shared cache, a proxy
that passes Host through, a page that links ``/subscribe/``) could send readers to another
site. The redirect now points at ``sender.base_url`` whatever the request says.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from newsletter.config import Config

FORGED = {"Host": "evil.example", "X-Forwarded-Host": "evil.example"}


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/subscribe/", "/subscribe"),
        ("/archive/", "/archive"),
        ("/subscribe/?topic=gpu-kernels", "/subscribe?topic=gpu-kernels"),
        ("/api/topics/", "/api/topics"),
    ],
)
def test_the_trailing_slash_redirect_goes_to_the_configured_site(
    client: TestClient, web_config: Config, path: str, location: str
) -> None:
    base = web_config.settings.sender.base_url.rstrip("/")
    response = client.get(path, headers=FORGED, follow_redirects=False)
    assert response.status_code in (307, 308), response.text
    assert response.headers["location"] == f"{base}{location}"
    assert "evil" not in response.text


def asgi_get(app: FastAPI, path: str) -> tuple[int, dict[bytes, bytes]]:
    """``GET path`` with the forged Host, the path exactly as a raw HTTP request line gives it
    (an HTTP client would resolve ``//evil.example/`` as a URL of its own)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in FORGED.items()],
        "client": ("203.0.113.7", 40000),
        "server": ("papers.example.org", 443),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], dict(start["headers"])


@pytest.mark.parametrize(
    "path", ["//evil.example/", "//evil.example", "/\\evil.example/", "/nowhere/"]
)
def test_no_redirect_for_paths_the_app_does_not_serve(app: FastAPI, path: str) -> None:
    status, headers = asgi_get(app, path)
    assert status == 404
    assert b"location" not in headers
