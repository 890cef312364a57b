"""The polite, safe fetcher against a real HTTP server on loopback (and, for address checks that
need a public name, httpx's MockTransport at the transport seam)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest

from newsletter.sources.fetch import BlockedAddress, Fetcher, FetchError, blocked_reason
from tests.conftest import FEEDS
from tests.feedserver import Answer, FeedServer, Seen, feed_server

RSS = (FEEDS / "arxiv-rss-cs.DC-2026-11-16.xml").read_bytes()


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with feed_server() as s:
        yield s


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_fetcher(sleeps: Sleeps | None = None, **kw: object) -> Fetcher:
    kw.setdefault("host_delay", 0.0)
    kw.setdefault("rng", random.Random(1))
    return Fetcher(sleep=sleeps if sleeps is not None else Sleeps(), **kw)  # type: ignore[arg-type]


def test_user_agent_names_product_and_operator(server: FeedServer) -> None:
    server.script("/feed", Answer(200, RSS))
    with make_fetcher(contact="ops@papers.example.org") as f:
        got = f.fetch(server.url("/feed"), allow_private=True)
    assert got.body == RSS
    ua = server.seen("/feed")[0].headers["User-Agent"]
    assert ua.startswith("newsletter/") and "ops@papers.example.org" in ua


def test_conditional_get_sends_validators_and_304_means_not_modified(server: FeedServer) -> None:
    server.script(
        "/feed",
        Answer(200, RSS, {"ETag": '"v1"', "Last-Modified": "Mon, 16 Nov 2026 01:00:00 GMT"}),
        Answer(304),
    )
    with make_fetcher() as f:
        first = f.fetch(server.url("/feed"), allow_private=True)
        assert first.etag == '"v1"' and not first.not_modified
        second = f.fetch(
            server.url("/feed"),
            etag=first.etag,
            last_modified=first.last_modified,
            allow_private=True,
        )
    assert second.not_modified and second.body is None
    sent = server.seen("/feed")[1].headers
    assert sent["If-None-Match"] == '"v1"'
    assert sent["If-Modified-Since"] == "Mon, 16 Nov 2026 01:00:00 GMT"


def test_429_retry_after_seconds_is_honored(server: FeedServer) -> None:
    server.script("/feed", Answer(429, b"slow down", {"Retry-After": "7"}), Answer(200, RSS))
    sleeps = Sleeps()
    with make_fetcher(sleeps) as f:
        got = f.fetch(server.url("/feed"), allow_private=True)
    assert got.body == RSS and got.attempts == 2
    assert sleeps == [7.0]


def test_retry_after_as_http_date(server: FeedServer) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    server.script(
        "/feed",
        Answer(503, b"busy", {"Retry-After": format_datetime(when, usegmt=True)}),
        Answer(200, RSS),
    )
    sleeps = Sleeps()
    with make_fetcher(sleeps) as f:
        f.fetch(server.url("/feed"), allow_private=True)
    assert len(sleeps) == 1 and 25 <= sleeps[0] <= 31


def test_retry_after_beyond_the_cap_fails_with_the_reason(server: FeedServer) -> None:
    server.script("/feed", Answer(429, b"", {"Retry-After": "86400"}))
    with make_fetcher(max_retry_after=60) as f, pytest.raises(FetchError) as e:
        f.fetch(server.url("/feed"), allow_private=True)
    assert "86400" in str(e.value) and "fetch.max_retry_after" in str(e.value)


def test_5xx_backs_off_with_jitter_then_gives_up(server: FeedServer) -> None:
    server.script("/feed", Answer(502, b"bad gateway"))
    sleeps = Sleeps()
    with make_fetcher(sleeps, retries=3, backoff=2.0) as f, pytest.raises(FetchError) as e:
        f.fetch(server.url("/feed"), allow_private=True)
    assert "HTTP 502" in str(e.value) and "after 4 attempts" in str(e.value)
    assert len(server.seen("/feed")) == 4
    assert len(sleeps) == 3
    for i, wait in enumerate(sleeps):  # 2·2^i, jittered by ±50%
        assert 2.0 * 2**i * 0.5 <= wait <= 2.0 * 2**i * 1.5
    assert len(set(sleeps)) == 3


def test_404_is_not_retried(server: FeedServer) -> None:
    with make_fetcher() as f, pytest.raises(FetchError, match="HTTP 404"):
        f.fetch(server.url("/missing"), allow_private=True)
    assert len(server.seen("/missing")) == 1


def test_timeouts_are_retried(server: FeedServer) -> None:
    def slow(seen: Seen) -> Answer:
        time.sleep(0.6)
        return Answer(200, RSS)

    server.routes["/slow"] = slow
    sleeps = Sleeps()
    with make_fetcher(sleeps, timeout=0.2, retries=1) as f, pytest.raises(FetchError) as e:
        f.fetch(server.url("/slow"), allow_private=True)
    assert "timed out after 2 attempts" in str(e.value)
    assert len(sleeps) == 1


def test_size_cap_by_content_length(server: FeedServer) -> None:
    server.script("/big", Answer(200, b"x" * 5000))
    with make_fetcher(max_bytes=4096) as f, pytest.raises(FetchError) as e:
        f.fetch(server.url("/big"), allow_private=True)
    assert "over the 4096-byte cap" in str(e.value)


def test_size_cap_while_streaming(server: FeedServer) -> None:
    server.script("/big", Answer(200, b"x" * 200_000, chunked=True))
    with make_fetcher(max_bytes=100_000) as f, pytest.raises(FetchError, match="100000-byte cap"):
        f.fetch(server.url("/big"), allow_private=True)


def test_size_cap_for_local_files(tmp_path: Path) -> None:
    big = tmp_path / "big.xml"
    big.write_bytes(b"x" * 5000)
    with make_fetcher(max_bytes=4096) as f, pytest.raises(FetchError, match="4096-byte cap"):
        f.fetch(str(big))


def test_local_paths_and_file_urls(tmp_path: Path) -> None:
    with make_fetcher() as f:
        assert f.fetch(str(FEEDS / "lab-blog.atom")).body == (FEEDS / "lab-blog.atom").read_bytes()
        assert f.fetch((FEEDS / "lab-blog.atom").as_uri()).body is not None
        with pytest.raises(FetchError, match="cannot read"):
            f.fetch(str(tmp_path / "nope.xml"))


def test_only_http_and_https() -> None:
    with make_fetcher() as f, pytest.raises(FetchError, match="unsupported URL scheme 'ftp'"):
        f.fetch("ftp://example.org/feed.xml")


def test_loopback_needs_allow_private(server: FeedServer) -> None:
    server.script("/feed", Answer(200, RSS))
    with make_fetcher() as f, pytest.raises(BlockedAddress) as e:
        f.fetch(server.url("/feed"))
    assert "127.0.0.1" in str(e.value) and "allow_private" in str(e.value)
    assert server.seen("/feed") == []  # refused before connecting


def test_redirects_are_followed_and_checked(server: FeedServer) -> None:
    server.script("/old", Answer(301, b"", {"Location": "/new"}))
    server.script("/new", Answer(200, RSS))
    server.script("/evil", Answer(302, b"", {"Location": "file:///etc/passwd"}))
    with make_fetcher() as f:
        got = f.fetch(server.url("/old"), allow_private=True)
        assert got.body == RSS and got.url.endswith("/new")
        with pytest.raises(FetchError, match="only http and https"):
            f.fetch(server.url("/evil"), allow_private=True)


def _public_resolver(table: dict[str, str]):  # type: ignore[no-untyped-def]
    def resolve(host: str, port: int) -> list[str]:
        return [table[host]]

    return resolve


def test_redirect_to_metadata_address_is_blocked_on_that_hop() -> None:
    hits: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(request)
        return httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data"})

    f = make_fetcher(
        transport=httpx.MockTransport(handler),
        resolver=_public_resolver({"feeds.example.org": "93.184.216.34"}),
    )
    with f, pytest.raises(BlockedAddress, match=r"169\.254\.169\.254, a link-local"):
        f.fetch("https://feeds.example.org/rss")
    assert len(hits) == 1
    # The connection went to the checked address, with the name kept for Host and TLS (SNI).
    assert hits[0].url.host == "93.184.216.34"
    assert hits[0].headers["Host"] == "feeds.example.org"
    assert hits[0].extensions["sni_hostname"] == "feeds.example.org"


def test_a_name_resolving_to_a_private_address_is_blocked() -> None:
    f = make_fetcher(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=RSS)),
        resolver=_public_resolver({"intranet.example.org": "10.1.2.3"}),
    )
    with f:
        with pytest.raises(BlockedAddress, match=r"10\.1\.2\.3, a private address"):
            f.fetch("http://intranet.example.org/feed")
        assert f.fetch("http://intranet.example.org/feed", allow_private=True).body == RSS


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("fd00:ec2::254", "private"),
        ("0.0.0.0", "private"),
        ("100.64.0.1", "non-public"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_blocked_reason(address: str, reason: str | None) -> None:
    assert blocked_reason(address) == reason


def test_politeness_delay_per_host(server: FeedServer) -> None:
    server.script("/a", Answer(200, RSS))
    sleeps = Sleeps()
    f = make_fetcher(sleeps, host_delay=1.0, monotonic=lambda: 100.0)
    with f:
        f.fetch(server.url("/a"), allow_private=True)
        assert sleeps == []
        f.fetch(server.url("/a"), allow_private=True, delay=3.0)
    assert sleeps == [3.0]  # a source's own delay (arXiv's 3 s) raises the host's
