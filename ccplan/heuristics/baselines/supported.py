"""Which collectives each baseline method implements, and the error for the others."""

from __future__ import annotations

from ccplan.errors import ValidationError

SUPPORTED: dict[str, frozenset[str]] = {
    "ring": frozenset({"allgather", "reducescatter", "allreduce", "broadcast", "reduce"}),
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
