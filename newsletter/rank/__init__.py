"""Ranking: which new papers each topic wants, best first, each with a reason.

Pure: topics, papers, example papers, vectors and ``now`` in; scores and ranked items out. The
modules, in the order a score is made:

* :mod:`.rules`: a topic's keywords, ``all``/``exclude`` entries, categories and authors as a
  :class:`Rule`, compiled with their acronym variants into sparse :class:`Queries`
  (:mod:`.keyword_rows`: the same for many subscribers' plain keyword rows at once);
* :mod:`.index`: the run's papers as BM25F weights, evidence, trending and age
  (:class:`PaperIndex`);
* :mod:`.score`: rows × papers scores, the filters, the fusion with the semantic similarity
  and a reader's relevance turned into scores;
* :mod:`.profiles`: readers' votes and topics' ``like:`` papers as Rocchio profiles over tf-idf
  (:mod:`.tiled_matmul`: the profiles' products a tile of columns at a time);
* :mod:`.ranker`: the run's :class:`Ranker`, every topic scored once, then each reader's
  sections;
* :mod:`.explain`: why a paper scored what it did (:class:`Explanation`, the reasons);
* :mod:`.builder`: :func:`~newsletter.rank.builder.build_ranker`, the one place the service
  builds a ranker (it reads the store, so it is not imported here: the rest stays pure).

``docs/topics.md`` explains the scoring to operators. The text functions (tokens, stems,
acronyms) live in :mod:`newsletter.text`; a few stay importable from here.

May import: core, config, store, semantic, digest.latex.
"""

from __future__ import annotations

from newsletter.rank.explain import Explainer, Explanation
from newsletter.rank.index import (
    ABSTRACT_WEIGHT,
    AGE_DROP,
    BAG_TF,
    DENSE_LIMIT,
    HALF_LIFE_HOURS,
    K1,
    MAX_EXTRA_SOURCES,
    TITLE_WEIGHT,
    TREND_LIFT,
    TREND_SCALE,
    B,
    Documents,
    PaperIndex,
    age_hours,
    recency_factor,
    trend_factor,
    trend_signal,
)
from newsletter.rank.ranker import SECTIONS_CACHE, Ranker
from newsletter.rank.rules import (
    LEARNED_SENSES,
    NO_ACRONYMS,
    Acronyms,
    Group,
    Queries,
    Rule,
    Tokens,
    Vocabulary,
    compile_rules,
)
from newsletter.rank.score import (
    AUTHOR_SCORE,
    CATEGORY_SCORE,
    DEFAULT_FUSION,
    MIN_EVIDENCE,
    RELATIVE_CUT,
    Fusion,
    filter_masks,
    fuse_all,
    reader_scores,
    score_all,
    score_block,
    score_rows,
)
from newsletter.text import author_key, category_key, fold, phrase_terms, stem, tokenize

__all__ = [
    "ABSTRACT_WEIGHT",
    "AGE_DROP",
    "AUTHOR_SCORE",
    "BAG_TF",
    "CATEGORY_SCORE",
    "DEFAULT_FUSION",
    "DENSE_LIMIT",
    "HALF_LIFE_HOURS",
    "K1",
    "LEARNED_SENSES",
    "MAX_EXTRA_SOURCES",
    "MIN_EVIDENCE",
    "NO_ACRONYMS",
    "RELATIVE_CUT",
    "SECTIONS_CACHE",
    "TITLE_WEIGHT",
    "TREND_LIFT",
    "TREND_SCALE",
    "Acronyms",
    "B",
    "Documents",
    "Explainer",
    "Explanation",
    "Fusion",
    "Group",
    "PaperIndex",
    "Queries",
    "Ranker",
    "Rule",
    "Tokens",
    "Vocabulary",
    "age_hours",
    "author_key",
    "category_key",
    "compile_rules",
    "filter_masks",
    "fold",
    "fuse_all",
    "phrase_terms",
    "reader_scores",
    "recency_factor",
    "score_all",
    "score_block",
    "score_rows",
    "stem",
    "tokenize",
    "trend_factor",
    "trend_signal",
]
