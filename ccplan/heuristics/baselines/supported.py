"""Which collectives each baseline method implements, and the error for the others."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccplan.errors import ValidationError

SUPPORTED: dict[str, frozenset[str]] = {
    "ring": frozenset({"allgather", "reducescatter", "allreduce", "broadcast", "reduce"}),
    "ring-1": frozenset({"allgather", "reducescatter", "allreduce", "broadcast", "reduce"}),
    "tree": frozenset({"broadcast", "reduce", "allreduce"}),
    "double-binary-tree": frozenset({"allreduce"}),
    "recursive-doubling": frozenset({"allgather", "allreduce"}),
    "recursive-halving-doubling": frozenset({"allgather", "reducescatter", "allreduce"}),
    "hierarchical": frozenset({"allgather", "reducescatter", "allreduce"}),
    "pairwise": frozenset({"alltoall", "scatter", "gather"}),
}
"""Method name -> collectives it implements (the rest raise ValidationError)."""


def _unsupported(method: str, kind: str) -> None:
    kinds = ", ".join(sorted(SUPPORTED[method]))
    raise ValidationError(f"method {method!r} does not support collective {kind!r} (supported: {kinds})")


def supports(method: str, kind: str) -> bool:
    """Whether baseline ``method`` implements collective ``kind``."""
    return kind in SUPPORTED.get(method, frozenset())


def baseline_label(method: str, details: Mapping[str, Any] | None = None) -> str:
    """How reports name baseline ``method``: ``ring`` is "NCCL-style ring (k channels)" with the
    ``channels`` its run reported, ``ring-1`` "single ring"; other methods keep their name."""
    if method == "ring":
        k = (details or {}).get("channels")
        if isinstance(k, int) and not isinstance(k, bool):
            return f"NCCL-style ring ({k} channel{'' if k == 1 else 's'})"
        return "NCCL-style ring"
    if method == "ring-1":
        return "single ring"
    return method
