"""A topic's `like:` example papers: normalized to versionless arXiv ids; a bad one is named
with its file and line."""

from __future__ import annotations

import pytest

from newsletter.config import parse_config
from newsletter.errors import ConfigError

CONFIG = """\
database:
  url: sqlite:///var/n.db
sender:
  from: "Papers <digest@example.org>"
topics:
  - name: moe
    keywords: [[MoE, mixture of experts]]
    like:
      - 2611.00010
      - 2611.00020v3
      - https://arxiv.org/abs/2401.04088v1
      - arXiv:hep-th/9901001
{extra}"""


def test_like_keeps_versionless_ids() -> None:
    settings, _ = parse_config(CONFIG.format(extra=""), "cfg.yaml")
    assert settings.topic("moe").like == [
        "2611.00010",  # YAML alone would read the number 2611.0001
        "2611.00020",
        "2401.04088",
        "hep-th/9901001",
    ]


def test_a_topic_without_like_has_none() -> None:
    text = CONFIG.format(extra="").split("    like:")[0]
    settings, _ = parse_config(text, "cfg.yaml")
    assert settings.topic("moe").like == []


@pytest.mark.parametrize(
    "bad", ["2611.0019x", "mixture of experts", "https://example.org/abs/2611.00019"]
)
def test_a_bad_example_paper_is_named_with_file_and_line(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(CONFIG.format(extra=f"      - {bad}\n"), "cfg.yaml")
    msg = str(info.value)
    assert msg.startswith("cfg.yaml:13: topics[0].like[4]:"), msg
    assert repr(bad) in msg and "is not an arXiv id" in msg
