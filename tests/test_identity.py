"""Source-independent identity: the versionless arXiv id, else the DOI, else the normalized link."""

from __future__ import annotations

import pytest

from newsletter.identity import normalize_link, paper_key, parse_arxiv_id


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2411.01234", ("2411.01234", None)),
        ("2411.01234v3", ("2411.01234", 3)),
        ("1501.00001v10", ("1501.00001", 10)),
        ("0704.0001", ("0704.0001", None)),
        ("arXiv:2411.01234v2", ("2411.01234", 2)),
        ("arxiv:2411.01234", ("2411.01234", None)),
        ("oai:arXiv.org:2411.01234v1", ("2411.01234", 1)),
        ("https://arxiv.org/abs/2411.01234v2", ("2411.01234", 2)),
        ("https://arxiv.org/pdf/2411.01234v2.pdf", ("2411.01234", 2)),
        ("https://arxiv.org/pdf/2411.01234", ("2411.01234", None)),
        ("https://arxiv.org/html/2411.01234v1", ("2411.01234", 1)),
        ("http://export.arxiv.org/abs/2411.01234", ("2411.01234", None)),
        ("https://doi.org/10.48550/arXiv.2411.01234", ("2411.01234", None)),
        ("hep-th/9901001", ("hep-th/9901001", None)),
        ("arXiv:hep-th/9901001v2", ("hep-th/9901001", 2)),
        ("https://arxiv.org/abs/math.GT/0309136v1", ("math.GT/0309136", 1)),
        ("arXiv:2411.012345", None),
        ("https://example.org/paper", None),
    ],
)
def test_parse_arxiv_id(text: str, expected: tuple[str, int | None] | None) -> None:
    assert parse_arxiv_id(text) == expected


def test_every_spelling_of_one_paper_is_one_key() -> None:
    spellings = [
        "https://arxiv.org/abs/2611.00001v1",
        "https://arxiv.org/pdf/2611.00001v2.pdf",
        "http://arxiv.org/abs/2611.00001",
        "oai:arXiv.org:2611.00001v3",
        "arXiv:2611.00001",
        "https://doi.org/10.48550/arXiv.2611.00001",
    ]
    assert {paper_key(link=s) for s in spellings} == {"2611.00001"}


def test_doi_then_normalized_link() -> None:
    assert (
        paper_key(link="https://doi.org/10.1145/3712285.3759811") == "doi:10.1145/3712285.3759811"
    )
    assert paper_key(link="https://blog.example/p", ids=("10.1000/XYZ",)) == "doi:10.1000/xyz"
    assert (
        paper_key(link="https://Example.org:443/a/b/?utm_source=x&id=3&fbclid=z#frag")
        == "url:https://example.org/a/b?id=3"
    )
    assert normalize_link("http://example.org:8080/x/") == "http://example.org:8080/x"
    assert paper_key() is None
