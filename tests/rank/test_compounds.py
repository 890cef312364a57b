"""Compound names match (issue 29, item 3): a keyword inside a CamelCase or hyphenated title word."""

from __future__ import annotations

import pytest

from newsletter.text import compound_parts
from tests.rank.test_ranker import keys, paper, rank, topic


@pytest.mark.parametrize(
    ("keyword", "title", "matches"),
    [
        ("NeRF", "BirdNeRF: Fast Neural Reconstruction of Large-Scale Scenes", True),
        ("NeRF", "NeRF-XL: Scaling NeRFs with Multiple GPUs", True),
        ("NeRF", "MobileNeRF and ENeRF-Outdoor", True),
        ("ViT", "LPViT: Low-Power Semi-structured Pruning", True),
        ("BLEU", "TensorBLEU: Vectorized GPU-based scores", True),
        ("solar", "DeepSolarEye: Power Loss Prediction", True),
        ("RF", "BirdNeRF: Fast Neural Reconstruction", False),  # "RF" is too short a piece
        ("bird", "Birdsong classification", False),  # one lowercase word: no compound
    ],
)
def test_a_keyword_matches_inside_a_compound_in_the_title(
    keyword: str, title: str, matches: bool
) -> None:
    ranker = rank([paper(1, title)], topic(keywords=[keyword]))
    assert bool(ranker.ranked["t"]) is matches


def test_the_compound_match_is_a_title_match_and_the_reason_says_so() -> None:
    birdnerf = paper(1, "BirdNeRF: Fast Neural Reconstruction", "We reconstruct scenes.")
    other = paper(2, "Fast reconstruction of scenes", "A NeRF method.")
    ranker = rank([birdnerf, other], topic(keywords=["NeRF"]))
    assert keys(ranker)[0] == birdnerf.key
    assert ranker.ranked["t"][0].reason.startswith("title: NeRF")


def test_compound_parts() -> None:
    assert "nerf" in compound_parts("BirdNeRF: fast")
    assert "vit" in compound_parts("LPViT")
    assert compound_parts("NeRF") == []  # "Ne" and "RF" are too short to be words
    assert compound_parts("NVIDIA GPUs and plain words") == []
    assert compound_parts("Mélange") == []
