"""The records the Store reads and writes, kept importable from here: they live in
:mod:`newsletter.models` (paper writes, ledger claims and operations, editions, source states
and runs); new code imports them from there."""

from __future__ import annotations

from newsletter.models import (
    EditionClaim,
    EditionRecord,
    LedgerOp,
    PaperWrite,
    RunRecord,
    SourceState,
)

__all__ = ["EditionClaim", "EditionRecord", "LedgerOp", "PaperWrite", "RunRecord", "SourceState"]
