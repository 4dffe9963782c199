"""How a runtime picks among several XML files: size ranges, buffer modes, protocols.

RCCL and the MSCCL executor for NCCL run a loaded algorithm for a call when its ``coll`` and
``ngpus`` match, its ``inplace``/``outofplace`` flag matches the call's buffer mode, the call's
count is a multiple of ``nchunksperloop`` and ``minBytes <= nBytes <= maxBytes`` (both bounds
inclusive, ``maxBytes="0"`` = no upper limit); the first matching file in load order wins
(``ROCm/rccl`` ``src/misc/msccl/msccl_lifecycle.cc``, ``mscclInternalSchedulerSelectAlgo``;
``nBytes = count * typesize * sizeMultiplier`` with ``sizeMultiplier = ngpus`` for AllGather,
ReduceScatter and AllToAll, ``src/misc/msccl/msccl_parser.cc``). Files that should serve
disjoint sizes therefore need ranges that tile ``[0, inf)`` without overlap; docs/runtime.md
gives the rules chosen here and their sources.

:func:`size_ranges` cuts ``[0, inf)`` between planned sizes, :func:`protocol_for` picks the
``proto`` of a range and :func:`render_max_bytes` spells "no limit" for a dialect.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import MAX_BYTES, PROTOCOLS, canonical_kind

LL_MAX_BYTES_PER_GPU = 1024
"""``proto="LL"`` while ``size / ngpus <= 1 KiB``: RCCL's shipped 8-GPU AllGather uses LL up to
``maxBytes="8192"`` (``tools/msccl-algorithms/allgather_8n_direct_0_8k_ll.xml``)."""
LL128_MAX_BYTES_PER_GPU = 128 * 1024
"""``proto="LL128"`` while ``size / ngpus < 128 KiB``: RCCL's 8-GPU AllGather switches from
LL128 after ``maxBytes="1048575"`` (``allgather_8n_direct_8k_1m_ll128.xml``); Simple above."""

PROTOCOLS_BY_SIZE: tuple[str, ...] = ("LL", "LL128", "Simple")
"""Protocols from the smallest messages they suit to the largest."""

SIZE_MULTIPLIER_KINDS = frozenset({"allgather", "reducescatter", "alltoall"})
"""Collectives whose runtime ``nBytes`` is ``count * typesize * ngpus`` (count per rank)."""


@dataclass(frozen=True)
class SizeRange:
    """Inclusive byte range ``[min_bytes, max_bytes]``; ``max_bytes=None``: no upper limit."""

    min_bytes: int
    max_bytes: int | None

    def __str__(self) -> str:
        return f"{self.min_bytes}..{'inf' if self.max_bytes is None else self.max_bytes}"


def byte_granularity(kind: str, ngpus: int, nchunksperloop: int) -> int:
    """Smallest step between byte counts a file can serve (1-byte types).

    The runtime needs ``count % nchunksperloop == 0``; ``nBytes = count * typesize *
    sizeMultiplier``, so with 1-byte types the served ``nBytes`` are multiples of
    ``nchunksperloop * sizeMultiplier``.
    """
    mult = ngpus if canonical_kind(kind) in SIZE_MULTIPLIER_KINDS else 1
    return max(1, nchunksperloop * mult)


def size_ranges(sizes: Sequence[int], granularity: Sequence[int] | None = None) -> list[SizeRange]:
    """Ranges that tile ``[0, inf)``, one per planned size (ascending, distinct).

    The boundary between planned sizes ``a < b`` is their geometric mean rounded up to a
    multiple of the upper file's :func:`byte_granularity` ``g`` (so the upper range starts at a
    byte count that file can serve), but never above ``b``: the upper file starts at
    ``B = min(b, ceil(sqrt(a*b) / g) * g)`` and the lower ends at ``B - 1``. The geometric mean
    splits the log-size axis evenly, which is how nccl-tests and message-size sweeps space
    sizes (``-f`` factor). The first range starts at 0, the last has no upper limit.

    Raises
    ------
    ValidationError
        Sizes not positive, not ascending or repeated; granularities not positive or of a
        different length.
    """
    sizes = [int(s) for s in sizes]
    if not sizes:
        return []
    if any(s <= 0 for s in sizes) or any(b <= a for a, b in itertools.pairwise(sizes)):
        raise ValidationError(f"size_ranges: sizes must be positive and strictly ascending, got {sizes}")
    grain = [1] * len(sizes) if granularity is None else [int(g) for g in granularity]
    if len(grain) != len(sizes) or any(g < 1 for g in grain):
        raise ValidationError(f"size_ranges: one positive granularity per size expected, got {list(grain)}")
    starts = [0]
    for i in range(1, len(sizes)):
        a, b, g = sizes[i - 1], sizes[i], grain[i]
        mean = math.isqrt(a * b)
        if mean * mean < a * b:
            mean += 1  # ceil(sqrt(a*b)), exactly, for any integer size
        start = min(b, -(-mean // g) * g)
        starts.append(max(start, a + 1))
    ends: list[int | None] = [s - 1 for s in starts[1:]] + [None]
    return [SizeRange(lo, hi) for lo, hi in zip(starts, ends, strict=True)]


def protocol_for(size_bytes: int, ngpus: int, allowed: Sequence[str] = PROTOCOLS) -> tuple[str, str | None]:
    """The ``proto`` for a file planned for ``size_bytes`` on ``ngpus`` GPUs, and a fallback note.

    LL for the smallest messages (``size / ngpus <= LL_MAX_BYTES_PER_GPU``), LL128 up to
    ``LL128_MAX_BYTES_PER_GPU`` per GPU, Simple above: the thresholds of RCCL's own 8-GPU
    AllGather files, per GPU. A protocol not in ``allowed`` falls back to the next larger one
    (LL -> LL128 -> Simple); the note says so (None when the rule's choice was allowed).

    Raises
    ------
    ValidationError
        ``allowed`` names an unknown protocol or lacks Simple.
    """
    bad = [p for p in allowed if p not in PROTOCOLS]
    if bad or "Simple" not in allowed:
        raise ValidationError(
            f"protocols must be a subset of {PROTOCOLS} containing 'Simple', got {list(allowed)}"
        )
    per_gpu = size_bytes / max(1, ngpus)
    if per_gpu <= LL_MAX_BYTES_PER_GPU:
        wanted = "LL"
    elif per_gpu < LL128_MAX_BYTES_PER_GPU:
        wanted = "LL128"
    else:
        wanted = "Simple"
    order = PROTOCOLS_BY_SIZE[PROTOCOLS_BY_SIZE.index(wanted) :]
    chosen = next(p for p in order if p in allowed)
    note = None if chosen == wanted else f"proto {wanted} not allowed, {chosen} used"
    return chosen, note


def render_max_bytes(max_bytes: int | None, dialect: str) -> int:
    """The ``maxBytes`` attribute for an inclusive upper limit (None = no limit).

    The executor (and RCCL) compares ``nBytes <= maxBytes`` and reads ``maxBytes="0"`` as no
    limit. Legacy MSCCL reads 0 literally (and rejects ``minBytes > maxBytes``), so "no limit"
    is :data:`MAX_BYTES` (1 TiB) there, and it compares ``nBytes < maxBytes``
    (``microsoft/msccl`` ``src/collectives/all_to_all.cc``), so a limit is written one higher.
    """
    if dialect == "executor":
        return 0 if max_bytes is None else max_bytes
    return MAX_BYTES if max_bytes is None else max_bytes + 1
