"""Issue 16 item 12: ``/api/archive/{day}`` applies the HTML page's URL policy.

The page already turned ``javascript:`` links into ``#``; the JSON returned them raw, for any
client that renders it to follow. Only http(s) and mailto links survive; the rest are null.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import PaperData
from newsletter.sources.ingest import decide
from newsletter.store import Store
from tests.conftest import NOW

HOSTILE = [
    ("2611.90001", "javascript:alert(document.cookie)", "data:text/html,<script>x</script>"),
    ("2611.90002", " JavaScript:alert(1)", "vbscript:msgbox(1)"),
    ("2611.90003", "data:text/html;base64,PHNjcmlwdD4=", "jAvAsCrIpT:alert(1)"),
]


def test_the_day_api_drops_scripting_urls(
    client: TestClient, web_config: Config, web_store: Store
) -> None:
    papers = [
        PaperData(
            key=key,
            title=f"CUDA kernels {key}",
            url=url,
            pdf_url=other,
            code_url=url,
            authors=("Mallory",),
        )
        for key, url, other in HOSTILE
    ]
    papers.append(
        PaperData(
            key="2611.90004",
            title="CUDA kernels, honestly linked",
            url="https://arxiv.org/abs/2611.90004",
            pdf_url="https://arxiv.org/pdf/2611.90004",
            code_url="mailto:authors@example.org",
        )
    )
    web_store.write_papers("evil", decide(papers, {}, source="evil"), NOW)
    day = NOW.astimezone(ZoneInfo(web_config.settings.schedule.timezone)).date()

    r = client.get(f"/api/archive/{day.isoformat()}")
    assert r.status_code == 200
    got = {p["key"]: p for t in r.json()["topics"] for p in t["papers"]}
    assert set(got) >= {"2611.90001", "2611.90002", "2611.90003", "2611.90004"}
    for key, _, _ in HOSTILE:
        assert got[key]["url"] is None
        assert got[key]["pdf_url"] is None and got[key]["code_url"] is None
    lower = r.text.lower()
    assert "javascript:" not in lower and "data:" not in lower and "vbscript:" not in lower
    honest = got["2611.90004"]
    assert honest["url"] == "https://arxiv.org/abs/2611.90004"
    assert honest["pdf_url"] == "https://arxiv.org/pdf/2611.90004"
    assert honest["code_url"] == "mailto:authors@example.org"

    page = client.get(f"/archive/{day.isoformat()}")
    assert page.status_code == 200 and "CUDA kernels 2611.90001" in page.text
    assert "javascript:" not in page.text.lower() and "data:text" not in page.text.lower()
