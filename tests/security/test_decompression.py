"""Issue 16 item 6: a decompression bomb stops at ``fetch.max_bytes`` of decompressed data.

1,827 bytes with ``Content-Encoding: gzip, gzip`` expanded to 1 GiB and took the fetcher to
2.2 GB before the cap was noticed. Stacked and unknown encodings are refused; one gzip or
deflate layer is inflated a piece at a time against the cap. Served by a real HTTP server.
"""

from __future__ import annotations

import functools
import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from newsletter.config import Config
from newsletter.sources.fetch import Fetcher, FetchError
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import FEEDS, base_config
from tests.feedserver import Answer, FeedServer, feed_server

GIB = 1024**3
MAX_BYTES = 2 * 1024 * 1024
NOW = datetime(2026, 11, 16, 6, 0, tzinfo=UTC)


def gzip_stream(pieces: Iterator[bytes], wbits: int = 31) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(c.compress(p) for p in pieces) + c.flush()


@functools.cache
def bombs() -> tuple[bytes, bytes]:
    """(one gzip layer over 1 GiB of zeros, that gzipped again): about 1 MB and 2.5 KB.

    The 1 GiB member is one compressed MiB of zeros repeated (each block starts from a full
    flush, so it stands alone), with the CRC and length of the whole: valid gzip, built in
    about a second instead of compressing 1 GiB.
    """
    zeros = bytes(1024 * 1024)
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(GIB // len(zeros)):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, GIB & 0xFFFFFFFF)
    single = header + block * (GIB // len(zeros)) + c.flush() + trailer
    return single, gzip_stream(iter((single,)))


@pytest.fixture
def server() -> Iterator[FeedServer]:
    single, double = bombs()
    with feed_server() as s:
        s.script("/double", Answer(body=double, headers={"Content-Encoding": "gzip, gzip"}))
        s.script("/single", Answer(body=single, headers={"Content-Encoding": "gzip"}))
        s.script(
            "/single-chunked",
            Answer(body=single, headers={"Content-Encoding": "gzip"}, chunked=True),
        )
        deflated = gzip_stream((bytes(1024 * 1024) for _ in range(16)), wbits=15)
        s.script("/deflate", Answer(body=deflated, headers={"Content-Encoding": "deflate"}))
        s.script("/br", Answer(body=b"\x00" * 10, headers={"Content-Encoding": "br"}))
        small = gzip_stream(iter((b"<rss version='2.0'><channel></channel></rss>",)))
        s.script("/fine", Answer(body=small, headers={"Content-Encoding": "gzip"}))
        yield s


def peak_while(action: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        try:
            result: object = action()
        except FetchError as e:
            result = e
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_the_issues_double_gzip_bomb_is_refused_before_inflating(server: FeedServer) -> None:
    single, double = bombs()
    assert len(double) < 4096 and len(single) < MAX_BYTES
    url = server.url("/double")
    with Fetcher(max_bytes=MAX_BYTES, retries=0, host_delay=0) as f:
        peak, error = peak_while(lambda: f.fetch(url, allow_private=True))
    assert peak < 4 * 1024 * 1024
    assert isinstance(error, FetchError)
    assert "stacked Content-Encodings (gzip, gzip)" in str(error) and url in str(error)


@pytest.mark.parametrize("path", ["/single", "/single-chunked", "/deflate"])
def test_a_single_layer_bomb_stops_at_max_bytes_decompressed(server: FeedServer, path: str) -> None:
    url = server.url(path)
    with Fetcher(max_bytes=MAX_BYTES, retries=0, host_delay=0) as f:
        peak, error = peak_while(lambda: f.fetch(url, allow_private=True))
        # Memory stays near the cap: the raw body (about 1 MB) plus the cap plus one piece.
        assert peak < MAX_BYTES + 3 * 1024 * 1024
        assert isinstance(error, FetchError)
        assert f"over the {MAX_BYTES}-byte cap once decompressed" in str(error)
        assert url in str(error)
        # An honest gzip answer still comes back inflated; an unknown coding is refused.
        fine = f.fetch(server.url("/fine"), allow_private=True)
        assert fine.body == b"<rss version='2.0'><channel></channel></rss>"
        with pytest.raises(FetchError, match=r"Content-Encoding 'br', which is not supported"):
            f.fetch(server.url("/br"), allow_private=True)
    assert server.seen("/fine")[0].headers["Accept-Encoding"] == "gzip, deflate"


@pytest.mark.slow  # inflates every bomb through a real fetch
def test_bombs_fail_their_source_and_the_others_go_on(
    server: FeedServer, db_url: str, make_config: Callable[..., Config], store: Store
) -> None:
    def remote(name: str, path: str) -> dict[str, object]:
        return {"name": name, "kind": "feed", "url": server.url(path), "allow_private": True}

    config = make_config(
        base_config(
            db_url,
            sources=[
                remote("double", "/double"),
                remote("single", "/single"),
                {
                    "name": "good",
                    "kind": "arxiv_rss",
                    "url": str(FEEDS / "arxiv-rss-cs.LG-2026-11-16.xml"),
                },
            ],
            fetch={"max_bytes": MAX_BYTES, "retries": 0, "host_delay": 0},
        )
    )
    report = {s.source: s for s in run_fetch(config, store, NOW).sources}
    assert "stacked Content-Encodings" in report["double"].errors[0]
    assert "once decompressed" in report["single"].errors[0]
    assert report["good"].ok and report["good"].new == 16
    assert "stacked" in (store.source_state("double").last_error or "")
