"""Issue 16 item 5: one unauthenticated request may not stall the web app or be echoed back.

A 1 MB JSON body to ``POST /api/subscribe`` used to block every request, ``/healthz`` included;
the 422 answer repeated the whole input. Bodies are capped at ``web.max_body_bytes`` (64 KiB by
default) before they are read, and validation errors name fields, never values.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.web.test_browser import LiveServer

LIMIT = 64 * 1024
MARKER = "ECHO-MARKER-7f3a"


@pytest.fixture
def live(app: FastAPI) -> Iterator[LiveServer]:
    with LiveServer(app) as server:
        yield server


def request_head(path: str, port: int, headers: dict[str, str]) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_status(sock: socket.socket) -> tuple[int, bytes]:
    """The status code and the whole answer (the server closes the connection after a 413)."""
    data = b""
    while True:
        try:
            got = sock.recv(65536)
        except ConnectionResetError:
            break
        if not got:
            break
        data += got
    assert data.startswith(b"HTTP/1.1 "), data[:100]
    return int(data.split(b" ", 2)[1]), data


def big_subscription() -> bytes:
    """The issue's case: a 1 MB JSON body for /api/subscribe."""
    topics = [f"topic-{i:07d}" for i in range(70_000)]
    body = json.dumps({"email": "bomb@example.org", "topics": topics}).encode()
    assert len(body) >= 1_000_000
    return body


def test_a_1mb_body_is_answered_413_unread_while_healthz_answers(live: LiveServer) -> None:
    body = big_subscription()
    with socket.create_connection(("127.0.0.1", live.port), timeout=15) as sock:
        head = request_head(
            "/api/subscribe",
            live.port,
            {"Content-Type": "application/json", "Content-Length": str(len(body))},
        )
        sock.sendall(head + body[:16384])  # 16 KB of 1 MB sent; the rest never comes
        # /healthz answers while that request is open and its body unfinished.
        assert httpx.get(f"http://127.0.0.1:{live.port}/healthz", timeout=15).status_code == 200
        status, answer = read_status(sock)
    assert status == 413
    assert b"65536-byte limit" in answer
    assert b"bomb@example.org" not in answer


def test_a_chunked_body_is_counted_as_it_arrives(live: LiveServer) -> None:
    """No Content-Length: the server stops reading at the cap, before the body ends."""
    body = big_subscription()
    sent = 0
    with socket.create_connection(("127.0.0.1", live.port), timeout=15) as sock:
        sock.sendall(
            request_head(
                "/api/subscribe",
                live.port,
                {"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
            )
        )
        try:
            while sent < 4 * LIMIT:  # never the whole body, never the final 0-chunk
                piece = body[sent : sent + 8192]
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                sent += len(piece)
        except OSError:
            pass  # the server answered and closed while we were still sending: that is the point
        status, answer = read_status(sock)
    assert status == 413 and b"65536-byte limit" in answer
    assert sent <= 4 * LIMIT < len(body)
    with httpx.Client(base_url=f"http://127.0.0.1:{live.port}", timeout=15) as client:
        # An HTML form is capped the same way; a body under the cap still gets through.
        form = client.post(
            "/subscribe",
            content=b"email=" + b"a" * (2 * LIMIT),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert form.status_code == 413
        ok = client.post(
            "/api/subscribe", json={"email": "reader@example.org", "topics": ["gpu-kernels"]}
        )
        assert ok.status_code == 202


def test_validation_errors_name_the_field_but_never_echo_the_input(client: TestClient) -> None:
    r = client.post(
        "/api/subscribe",
        json={"email": MARKER * 40, "topics": MARKER, "send_hour": 99, MARKER: "<script>"},
    )
    assert r.status_code == 422
    assert MARKER not in r.text and "<script>" not in r.text
    problem = r.json()
    assert problem["field"] in {"email", "topics", "send_hour"}
    for field in ("email", "topics", "send_hour"):
        assert f"{field}: " in problem["detail"]
    assert "unknown field" in problem["detail"]

    broken = client.post(
        "/api/subscribe",
        content=b'{"email": "' + MARKER.encode() + b'"',
        headers={"Content-Type": "application/json"},
    )
    assert broken.status_code == 422 and MARKER not in broken.text
    assert "not valid JSON" in broken.json()["detail"]


def test_admin_send_checks_its_token_before_the_body(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", "an-admin-token-for-the-test-0123456789")
    junk = {"to": MARKER, "dry_run": MARKER, MARKER: 1}
    for body in (json.dumps(junk).encode(), b"{" + MARKER.encode()):
        r = client.post("/admin/send", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 401 and MARKER not in r.text
    big = client.post(
        "/admin/send",
        content=b"{" + b" " * (2 * LIMIT) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert big.status_code == 413
    auth = {"Authorization": "Bearer an-admin-token-for-the-test-0123456789"}
    invalid = client.post("/admin/send", json=junk, headers=auth)
    assert invalid.status_code == 422 and MARKER not in invalid.text
    assert "dry_run: " in invalid.json()["detail"]
    assert client.post("/admin/send", headers=auth).status_code == 422  # no body: nothing is sent
