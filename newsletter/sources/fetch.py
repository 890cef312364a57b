"""The fetcher: the only code in sources/ that does I/O. Parsers only ever see its bytes.

Local paths and ``file://`` URLs are read directly (tests, demos, air-gapped sites). http(s) goes
through httpx, politely and safely:

* a timeout, and a User-Agent naming the product and the operator's contact;
* conditional GET (``If-None-Match`` / ``If-Modified-Since``): a 304 means nothing to do;
* a delay between two requests to the same host (``fetch.host_delay``, or a source's own);
* retries with exponential backoff and jitter on 429, 5xx and timeouts, honoring ``Retry-After``;
* a size cap, checked against ``Content-Length`` and again while streaming: gzip and deflate
  bodies are inflated here a piece at a time and stop at ``fetch.max_bytes`` of decompressed
  data (a decompression bomb never gets further); stacked (``gzip, gzip``) and unknown
  Content-Encodings are refused;
* an optional proxy (``fetch.proxy``; the environment's proxy variables are ignored);
* http and https only; every redirect hop is checked again, and the host is resolved here and
  the connection pinned to the checked address, so neither a redirect nor a DNS answer can reach
  loopback, private, link-local or cloud-metadata addresses unless the source allows it.
"""

from __future__ import annotations

import ipaddress
import random
import socket
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import httpx

from newsletter import __version__
from newsletter.config import FetchSettings
from newsletter.errors import NewsletterError

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: The Content-Encodings we ask for and inflate ourselves, with a running bound.
ENCODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
ACCEPT_ENCODING = "gzip, deflate"
_PIECE = 64 * 1024

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True, slots=True)
class FetchResult:
    body: bytes | None
    """``None`` when the server answered 304 Not Modified."""
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    url: str = ""
    """Where the body finally came from (after redirects)."""
    attempts: int = 1

    @property
    def not_modified(self) -> bool:
        """Whether the server answered 304 Not Modified (there is no body)."""
        return self.body is None


class FetchError(NewsletterError):
    """A fetch failed; the message says why in words an operator can act on."""


class BlockedAddress(FetchError):
    """The URL (or a redirect, or a DNS answer) points at an address sources may not reach."""


def user_agent(contact: str | None) -> str:
    """The ``User-Agent`` header for fetches, with the operator's ``contact`` when set."""
    ua = f"newsletter/{__version__} (self-hosted paper digest"
    return ua + (f"; {contact})" if contact else ")")


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, each once; raises :class:`FetchError` when it cannot."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise FetchError(f"cannot resolve {host}: {e.strerror or e}") from e
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def blocked_reason(address: str) -> str | None:
    """Why a source may not connect to ``address`` by default, or ``None`` when it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for test, what in (
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local (cloud metadata)"),
        (ip.is_private, "private"),
        (ip.is_multicast, "multicast"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_reserved, "reserved"),
    ):
        if test:
            return what
    if not ip.is_global:
        return "non-public"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Fetcher:
    def __init__(
        self,
        *,
        contact: str | None = None,
        timeout: float = 30.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        host_delay: float = 1.0,
        retries: int = 3,
        backoff: float = 2.0,
        max_retry_after: float = 300.0,
        max_redirects: int = 5,
        proxy: str | None = None,
        transport: httpx.BaseTransport | None = None,
        resolver: Resolver = system_resolver,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.host_delay = host_delay
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.max_redirects = max_redirects
        self.resolver = resolver
        self.sleep = sleep
        self.monotonic = monotonic
        self.rng = rng or random.Random()
        self._last_request: dict[str, float] = {}
        self.proxy = proxy
        self._client_options: dict[str, Any] = {
            "timeout": timeout,
            "headers": {"User-Agent": user_agent(contact)},
            "follow_redirects": False,
            "transport": transport,
            "proxy": proxy,
            "trust_env": False,  # proxies come from fetch.proxy, never from the environment
        }
        # One client (one connection pool) per host name: connections go to a pinned address,
        # and a TLS connection made for one name must never carry another name's requests.
        self._clients: dict[str, httpx.Client] = {}

    def _client(self, host: str) -> httpx.Client:
        client = self._clients.get(host)
        if client is None:
            client = self._clients[host] = httpx.Client(**self._client_options)
        return client

    @classmethod
    def from_settings(cls, settings: FetchSettings, contact: str | None = None) -> Fetcher:
        """A fetcher configured by the ``fetch:`` section."""
        return cls(
            contact=contact,
            timeout=settings.timeout,
            max_bytes=settings.max_bytes,
            host_delay=settings.host_delay,
            retries=settings.retries,
            backoff=settings.backoff,
            max_retry_after=settings.max_retry_after,
            max_redirects=settings.max_redirects,
            proxy=settings.proxy,
        )

    def close(self) -> None:
        """Close the HTTP clients."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- entry point

    def fetch(
        self,
        location: str,
        *,
        etag: str | None = None,
        last_modified: str | None = None,
        allow_private: bool = False,
        delay: float = 0.0,
    ) -> FetchResult:
        """Download ``location``. Raises :class:`FetchError` with a reason an operator can act on.

        ``delay`` raises the per-host politeness delay for this request (arXiv asks for 3 s).
        """
        parts = urlsplit(location)
        if parts.scheme in ("", "file"):
            return self._read_file(location, parts.scheme == "file")
        if parts.scheme not in ("http", "https"):
            raise FetchError(
                f"unsupported URL scheme {parts.scheme!r}; use http(s), file:// or a path"
            )
        headers: dict[str, str] = {"Accept-Encoding": ACCEPT_ENCODING}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        url = location
        attempt = 0
        redirects = 0
        while True:
            attempt += 1
            self._wait_for_host(url, delay)
            try:
                outcome = self._request(url, headers, allow_private)
            except httpx.TimeoutException as e:
                if attempt > self.retries:
                    raise FetchError(
                        f"timed out after {attempt} attempts ({type(e).__name__})"
                    ) from e
                self.sleep(self._backoff(attempt))
                continue
            except httpx.ConnectError as e:
                where = urlsplit(url).netloc
                raise FetchError(f"cannot connect to {where}: {e}") from e
            except httpx.HTTPError as e:
                raise FetchError(f"{type(e).__name__}: {e}") from e
            if isinstance(outcome, FetchResult):
                return FetchResult(
                    outcome.body,
                    outcome.etag,
                    outcome.last_modified,
                    outcome.content_type,
                    outcome.url,
                    attempt,
                )
            status, reason, retry_after, location_header = outcome
            if status in (301, 302, 303, 307, 308):
                redirects += 1
                if not location_header:
                    raise FetchError(f"HTTP {status} redirect without a Location header")
                if redirects > self.max_redirects:
                    raise FetchError(f"more than {self.max_redirects} redirects (last to {url})")
                url = urljoin(url, location_header)
                if urlsplit(url).scheme not in ("http", "https"):
                    raise FetchError(f"redirected to {url!r}: only http and https are followed")
                attempt -= 1  # a redirect is not a failed attempt
                continue
            if status in RETRY_STATUS and attempt <= self.retries:
                wait = self._backoff(attempt)
                if retry_after is not None:
                    if retry_after > self.max_retry_after:
                        raise FetchError(
                            f"HTTP {status} {reason}: the server asks to retry after "
                            f"{retry_after:.0f} s, more than fetch.max_retry_after "
                            f"({self.max_retry_after:.0f} s)"
                        )
                    wait = max(retry_after, 0.0)
                self.sleep(wait)
                continue
            tries = f" after {attempt} attempts" if attempt > 1 else ""
            raise FetchError(f"HTTP {status} {reason}{tries}")

    # ---------------------------------------------------------------- pieces

    def _read_file(self, location: str, is_url: bool) -> FetchResult:
        path = Path(unquote(urlsplit(location).path) if is_url else location)
        try:
            with path.open("rb") as f:
                body = f.read(self.max_bytes + 1)  # st_size says 0 for /proc files
        except OSError as e:
            raise FetchError(f"cannot read {path}: {e.strerror or e}") from e
        if len(body) > self.max_bytes:
            raise FetchError(f"{path} is over the {self.max_bytes}-byte cap (fetch.max_bytes)")
        return FetchResult(body, url=str(path))

    def _backoff(self, attempt: int) -> float:
        return float(self.backoff * (2 ** (attempt - 1)) * (0.5 + self.rng.random()))

    def _wait_for_host(self, url: str, delay: float) -> None:
        host = (urlsplit(url).hostname or "").lower()
        gap = max(self.host_delay, delay)
        last = self._last_request.get(host)
        if last is not None and gap > 0:
            remaining = last + gap - self.monotonic()
            if remaining > 0:
                self.sleep(remaining)
        self._last_request[host] = self.monotonic()

    def _pin(self, url: str, allow_private: bool) -> tuple[str, dict[str, str], dict[str, str]]:
        """Check where ``url`` leads; return the URL to connect to, extra headers, extensions."""
        parts = urlsplit(url)
        host = parts.hostname
        if not host:
            raise FetchError(f"{url!r} has no host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = [host] if _is_ip(host) else self.resolver(host, port)
        if not addresses:
            raise FetchError(f"cannot resolve {host}: no addresses")
        if not allow_private:
            for address in addresses:
                why = blocked_reason(address)
                if why is not None:
                    raise BlockedAddress(
                        f"{host} resolves to {address}, a {why} address; sources may not reach "
                        "those (set allow_private: true on this source if it is an intranet feed)"
                    )
        if _is_ip(host) or self.proxy:
            # Behind a proxy the proxy connects (and resolves again); the check above still
            # refuses names that resolve to internal addresses here.
            return url, {}, {}
        address = addresses[0]
        netloc_host = f"[{address}]" if ":" in address else address
        netloc = netloc_host + (f":{parts.port}" if parts.port else "")
        pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        host_header = host + (f":{parts.port}" if parts.port else "")
        return pinned, {"Host": host_header}, {"sni_hostname": host}

    def _request(
        self, url: str, headers: dict[str, str], allow_private: bool
    ) -> FetchResult | tuple[int, str, float | None, str | None]:
        """One request: the result, or ``(status, reason, retry_after, location)`` to act on."""
        pinned, extra, extensions = self._pin(url, allow_private)
        client = self._client((urlsplit(url).hostname or "").lower())
        request = client.build_request(
            "GET", pinned, headers={**headers, **extra}, extensions=extensions
        )
        resp = client.send(request, stream=True)
        try:
            if resp.status_code == 304:
                return FetchResult(
                    None,
                    headers.get("If-None-Match"),
                    headers.get("If-Modified-Since"),
                    url=url,
                )
            if resp.status_code != 200:
                return (
                    resp.status_code,
                    resp.reason_phrase,
                    _retry_after(resp.headers.get("Retry-After"), time.time()),
                    resp.headers.get("Location"),
                )
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > self.max_bytes:
                raise FetchError(
                    f"response is {declared} bytes, over the {self.max_bytes}-byte cap "
                    "(fetch.max_bytes)"
                )
            coding = _content_coding(resp.headers.get("Content-Encoding"), url)
            body: Iterable[bytes]
            if resp.is_stream_consumed:  # made from bytes in memory (a test's MockTransport)
                body = (resp.content,)
            else:
                body = _capped(resp.iter_raw(), self.max_bytes, url, "")
                if coding is not None:
                    body = _inflate(body, coding, url)
            chunks = list(_capped(body, self.max_bytes, url, " once decompressed"))
            return FetchResult(
                b"".join(chunks),
                resp.headers.get("ETag"),
                resp.headers.get("Last-Modified"),
                resp.headers.get("Content-Type"),
                url,
            )
        finally:
            resp.close()


def _content_coding(header: str | None, url: str) -> str | None:
    """The one coding to undo (``gzip`` or ``deflate``), ``None`` for none; refuse the rest."""
    codings = [c.strip().lower() for c in (header or "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise FetchError(
            f"{url} answered with stacked Content-Encodings ({header}); refused: only one "
            "gzip or deflate layer is accepted (a decompression bomb?)"
        )
    if codings[0] not in ENCODINGS:
        raise FetchError(
            f"{url} answered with Content-Encoding {codings[0]!r}, which is not supported "
            f"(we asked for {ACCEPT_ENCODING})"
        )
    return ENCODINGS[codings[0]]


def _capped(pieces: Iterable[bytes], max_bytes: int, url: str, what: str) -> Iterator[bytes]:
    """``pieces`` as they come, stopping with an error once they add up to over ``max_bytes``."""
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > max_bytes:
            raise FetchError(
                f"the response from {url} is over the {max_bytes}-byte cap{what} (fetch.max_bytes)"
            )
        yield piece


def _decompressor(coding: str, raw_deflate: bool = False) -> Any:
    if coding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)


def _inflate(chunks: Iterable[bytes], coding: str, url: str) -> Iterator[bytes]:
    """Undo one gzip or deflate layer, yielding at most 64 KiB at a time however much the input
    expands, so the caller's size cap stops a bomb before it is in memory."""
    d = _decompressor(coding)
    started = False
    for chunk in chunks:
        data = chunk
        while True:
            try:
                out = d.decompress(data, _PIECE)
            except zlib.error as e:
                if coding == "deflate" and not started:  # some servers send raw deflate
                    d, started = _decompressor(coding, raw_deflate=True), True
                    continue
                raise FetchError(f"the {coding} body from {url} is corrupt ({e})") from e
            started = True
            if out:
                yield out
            if d.eof:
                if d.unused_data and coding == "gzip":  # the next member of a multi-member file
                    data, d = d.unused_data, _decompressor(coding)
                    continue
                return  # the stream is complete; trailing bytes are ignored
            if d.unconsumed_tail or len(out) == _PIECE:
                data = d.unconsumed_tail  # input left, or output still pending inside zlib
                continue
            break


def _retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)
