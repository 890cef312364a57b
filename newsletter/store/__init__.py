"""Storage: the only package that speaks SQL. Domain types in, domain types out.

May import: core, config, bounces.score.
"""

from newsletter.store.db import (
    EditionClaim,
    EditionRecord,
    PaperWrite,
    RunRecord,
    SourceState,
    Store,
    normalize_url,
)

__all__ = [
    "EditionClaim",
    "EditionRecord",
    "PaperWrite",
    "RunRecord",
    "SourceState",
    "Store",
    "normalize_url",
]
