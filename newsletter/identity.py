"""Source-independent paper identity, and the hash that says whether a paper's content changed.

arXiv papers key on the identifier without its version (``2411.01234``, ``hep-th/9901001``);
other items on their DOI (``doi:10.1234/abc``), else on their normalized link (``url:...``).
:func:`content_hash` is what ingest compares to decide whether an update to a stored paper's
metadata matters (and what the store keeps with each paper).
"""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from newsletter.models import Paper, PaperData

# arXiv's own DOIs (10.48550/arXiv.2411.01234) name the same paper.
# New style (0704 onwards): YYMM.NNNN or YYMM.NNNNN; old style: archive(.SUBJ)/YYMMNNN.
_NEW = r"(?P<new>\d{4}\.\d{4,5})"
_OLD = r"(?P<old>[a-z][a-z-]*(?:\.[A-Z]{2})?/\d{7})"
_VERSION = r"(?:v(?P<version>\d+))?"
_ARXIV_IN_TEXT = re.compile(
    rf"(?:arxiv\.org/(?:abs|pdf|html)/|10\.48550/arxiv\.|arxiv:|oai:arxiv\.org:|^|(?<=\s)){'(?:' + _NEW + '|' + _OLD + ')'}{_VERSION}(?:\.pdf)?(?![\d])",
    re.IGNORECASE,
)
_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s\"'<>]+)", re.IGNORECASE)
_TRACKING = re.compile(r"^(utm_[a-z]+|fbclid|gclid|mc_cid|mc_eid|ref|ref_src)$", re.IGNORECASE)


def parse_arxiv_id(text: str) -> tuple[str, int | None] | None:
    """``(versionless id, version)`` from an id, ``arXiv:`` string or abs/pdf/html link."""
    m = _ARXIV_IN_TEXT.search(text.strip())
    if m is None:
        return None
    ident = m.group("new") or m.group("old")
    version = m.group("version")
    if m.group("old"):
        archive, _, number = ident.partition("/")
        ident = (
            archive.lower()
            if "." not in archive
            else archive.split(".")[0].lower() + "." + archive.split(".")[1].upper()
        )
        ident = f"{ident}/{number}"
    return ident, int(version) if version else None


def arxiv_urls(arxiv_id: str) -> tuple[str, str]:
    """The abstract page and PDF links for a versionless id."""
    return f"https://arxiv.org/abs/{arxiv_id}", f"https://arxiv.org/pdf/{arxiv_id}"


def find_doi(text: str) -> str | None:
    """The first DOI in ``text``, lower-cased, or ``None``."""
    m = _DOI.search(text)
    return m.group(1).rstrip(".,;)").lower() if m else None


def normalize_link(url: str) -> str:
    """A link without tracking parameters, fragment, default port or trailing slash noise."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower() or "https"
    host = (parts.hostname or "").lower()
    if parts.port and not (
        (scheme == "http" and parts.port == 80) or (scheme == "https" and parts.port == 443)
    ):
        host = f"{host}:{parts.port}"
    query = urlencode(
        [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if not _TRACKING.match(k)
        ]
    )
    path = parts.path.rstrip("/") or "/"
    return urlunsplit((scheme, host, path, query, ""))


def paper_key(*, link: str = "", ids: tuple[str, ...] = (), text: str = "") -> str | None:
    """The key for an item: arXiv id from any of its ids/links, else DOI, else normalized link."""
    for candidate in (*ids, link):
        if candidate:
            found = (
                parse_arxiv_id(candidate)
                if ("arxiv" in candidate.lower() or re.match(r"^\d{4}\.\d{4,5}", candidate))
                else None
            )
            if found:
                return found[0]
    for candidate in (*ids, link, text):
        doi = find_doi(candidate) if candidate else None
        if doi:
            return f"doi:{doi}"
    if link:
        return f"url:{normalize_link(link)}"
    return None


_ARXIV_EXACT = re.compile(rf"(?:arxiv:)?(?:{_NEW}|{_OLD}){_VERSION}", re.IGNORECASE)
_ARXIV_PAGE = re.compile(
    r"https?://(?:www\.|export\.)?arxiv\.org/(?:abs|pdf|html)/(?P<rest>[^?#]+?)(?:\.pdf)?/?(?:[?#].*)?",
    re.IGNORECASE,
)


def arxiv_id_of(text: str) -> str | None:
    """The versionless arXiv id that ``text`` names exactly, else ``None``.

    Accepts an id with or without version (``2611.00019``, ``2611.00019v2``, ``hep-th/9901001``,
    ``arXiv:2611.00019``) or an arXiv page (``https://arxiv.org/abs/2611.00019v1``, ``/pdf/``).
    Unlike :func:`parse_arxiv_id`, nothing else may surround it: for ids that people type.
    """
    text = text.strip()
    page = _ARXIV_PAGE.fullmatch(text)
    if page is not None:
        text = page.group("rest")
    if _ARXIV_EXACT.fullmatch(text) is None:
        return None
    found = parse_arxiv_id(text)
    return found[0] if found else None


def content_hash(p: PaperData | Paper) -> str:
    """What decides whether an update to a paper's metadata matters."""
    blob = json.dumps(
        [
            p.title,
            p.abstract,
            list(p.authors),
            sorted(p.categories),
            p.version,
            p.pdf_url,
            p.code_url,
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()
