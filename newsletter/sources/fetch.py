"""The fetcher: the only code in sources/ that does I/O. Parsers only ever see its bytes.

Local paths and ``file://`` URLs are read directly (tests, demos, air-gapped sites); http(s) goes
through httpx with a timeout, a User-Agent naming the product and the operator, and conditional
GET (ETag / Last-Modified).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from newsletter import __version__

DEFAULT_MAX_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetchResult:
    body: bytes | None
    """``None`` when the server answered 304 Not Modified."""
    etag: str | None = None
    last_modified: str | None = None

    @property
    def not_modified(self) -> bool:
        return self.body is None


class FetchError(Exception):
    """A fetch failed; the message says why in words an operator can act on."""


def user_agent(contact: str | None) -> str:
    ua = f"newsletter/{__version__} (self-hosted paper digest"
    return ua + (f"; {contact})" if contact else ")")


class Fetcher:
    def __init__(
        self,
        *,
        contact: str | None = None,
        timeout: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.client = httpx.Client(
            timeout=timeout,
            headers={"User-Agent": user_agent(contact)},
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self.client.close()

    def fetch(
        self, location: str, *, etag: str | None = None, last_modified: str | None = None
    ) -> FetchResult:
        parts = urlsplit(location)
        if parts.scheme in ("", "file"):
            path = Path(unquote(parts.path) if parts.scheme == "file" else location)
            try:
                size = path.stat().st_size
                if size > self.max_bytes:
                    raise FetchError(f"{path} is {size} bytes, over the {self.max_bytes}-byte cap")
                return FetchResult(path.read_bytes())
            except OSError as e:
                raise FetchError(f"cannot read {path}: {e.strerror or e}") from e
        if parts.scheme not in ("http", "https"):
            raise FetchError(
                f"unsupported URL scheme {parts.scheme!r}; use http(s), file:// or a path"
            )
        headers = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        try:
            with self.client.stream("GET", location, headers=headers) as resp:
                if resp.status_code == 304:
                    return FetchResult(None, etag, last_modified)
                if resp.status_code != 200:
                    raise FetchError(f"HTTP {resp.status_code} {resp.reason_phrase}")
                chunks: list[bytes] = []
                total = 0
                for chunk in resp.iter_bytes():
                    total += len(chunk)
                    if total > self.max_bytes:
                        raise FetchError(f"response is over the {self.max_bytes}-byte cap")
                    chunks.append(chunk)
                return FetchResult(
                    b"".join(chunks), resp.headers.get("ETag"), resp.headers.get("Last-Modified")
                )
        except httpx.HTTPError as e:
            raise FetchError(f"{type(e).__name__}: {e}") from e
