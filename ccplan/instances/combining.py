"""Combining collectives: ReduceScatter, AllReduce and Reduce.

A combining collective is a :class:`~ccplan.instances.collectives.Collective` with
``combining=True``. Its tables mean something different from a data-movement collective:

``pre``
    For every chunk, the GPUs that *contribute* to it. Each of them holds its own
    contribution at slot 0 (a different value at every GPU, all of the same size).
``post``
    For every chunk, the GPUs that must end holding the *reduction of all contributions*,
    each counted exactly once.

The contribution sets are tracked by :func:`ccplan.schedule.combining.verify_combining`.
Chunk ids stay ``(label, index)``: for ReduceScatter and AllReduce the label is the GPU that
owns the shard (the one that ends with it after ReduceScatter); for Reduce it is the root.

Sizes follow TE-CCL (DESIGN.md, "Collectives"): ``size`` is the *input* buffer of
ReduceScatter (= output buffer of the matching AllGather), the AllReduce buffer, and the
Reduce buffer. ``chunk_bytes = size / pieces`` with ``pieces = N*C`` (ReduceScatter,
AllReduce: N shards of C chunks) or ``C`` (Reduce).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk, Collective
from ccplan.instances.topology import Topology


def _chunks(chunks: object) -> int:
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise ValidationError(f"chunks must be a positive integer, got {chunks!r}")
    return chunks


def _root(topology: Topology, root: int | None) -> int:
    if root is None:
        return topology.gpus[0]
    if root not in topology.kind:
        raise ValidationError(f"root {root} is not a node of topology {topology.name!r}")
    if topology.kind[root] != "gpu":
        raise ValidationError(f"root {root} is a switch; it must be a GPU")
    return root


def _table(rows: Mapping[Chunk, Iterable[int]]) -> tuple[tuple[Chunk, tuple[int, ...]], ...]:
    return tuple(sorted((c, tuple(sorted(v))) for c, v in rows.items()))


def reducescatter(topology: Topology, chunks: int = 1, **_: Any) -> Collective:
    """ReduceScatter: shard ``g`` (C chunks ``(g, i)``) ends at GPU ``g`` reduced over all GPUs.

    ``pre``: every GPU contributes to every chunk. ``post``: chunk ``(g, i)`` -> ``[g]``.
    ``pieces = N*C`` (size = the input buffer of one GPU).
    """
    c = _chunks(chunks)
    gpus = topology.gpus
    pre = {(g, i): gpus for g in gpus for i in range(c)}
    post = {(g, i): (g,) for g in gpus for i in range(c)}
    return Collective("reducescatter", c, _table(pre), _table(post), pieces=len(gpus) * c, combining=True)


def allreduce(topology: Topology, chunks: int = 1, **_: Any) -> Collective:
    """AllReduce: every GPU ends with every chunk reduced over all GPUs.

    The buffer is cut into ``N*C`` chunks ``(g, i)`` so that the ReduceScatter + AllGather
    construction has one shard per GPU; ``g`` is only a label here. ``pieces = N*C``.
    """
    c = _chunks(chunks)
    gpus = topology.gpus
    pre = {(g, i): gpus for g in gpus for i in range(c)}
    post = {(g, i): gpus for g in gpus for i in range(c)}
    return Collective("allreduce", c, _table(pre), _table(post), pieces=len(gpus) * c, combining=True)


def reduce(topology: Topology, chunks: int = 1, root: int | None = None, **_: Any) -> Collective:
    """Reduce: the root ends with the ``C`` chunks ``(root, i)`` reduced over all GPUs.

    ``pieces = C`` (size = the buffer every GPU contributes).
    """
    c = _chunks(chunks)
    r = _root(topology, root)
    gpus = topology.gpus
    pre = {(r, i): gpus for i in range(c)}
    post = {(r, i): (r,) for i in range(c)}
    return Collective("reduce", c, _table(pre), _table(post), pieces=c, root=r, combining=True)


CombiningFactory = Callable[..., Collective]

COMBINING: dict[str, CombiningFactory] = {
    "reducescatter": reducescatter,
    "allreduce": allreduce,
    "reduce": reduce,
}
"""Registry of combining collectives by name (to be merged into ``make_collective``)."""

ROOTED_COMBINING: frozenset[str] = frozenset({"reduce"})

DATA_MOVEMENT_TWIN: dict[str, str] = {"reducescatter": "allgather", "reduce": "broadcast"}
"""Combining collective -> the data-movement collective whose time-reversal it is."""


def make_combining(kind: str, topology: Topology, chunks: int = 1, root: int | None = None) -> Collective:
    """Build a combining collective by name.

    Raises
    ------
    ValidationError
        Unknown name, bad chunk count or root.
    """
    try:
        factory = COMBINING[kind]
    except KeyError:
        raise ValidationError(
            f"combining collective {kind!r} is unknown (choose from {', '.join(sorted(COMBINING))})"
        ) from None
    return factory(topology, chunks=chunks, root=root)


def full_sets(collective: Collective) -> dict[Chunk, frozenset[int]]:
    """Chunk -> the complete contribution set (what every ``post`` node must end with)."""
    return dict(collective.holders)
