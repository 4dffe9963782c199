"""Buffers: where every chunk lives in the MSCCL buffers of every rank (the package doc, item 1).

:class:`Loc` names a place in one rank's buffers, :class:`BufferLayout` holds each chunk's
start (``home``) and end (``dest``) places, :data:`LAYOUTS` has one builder per exportable
collective, and :func:`alias` maps an in-place alias to the buffer the runtime addresses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import COMBINING_KINDS, canonical_kind
from ccplan.instances.collectives import Chunk, Collective


class Loc(NamedTuple):
    """A place in one rank's buffers: ``buf`` in ``{"i", "o", "s"}``, ``off`` in MSCCL chunks.

    A named tuple (immutable, ordered by ``(buf, off)``): the exporter hashes and compares
    millions of them at cluster scale.
    """

    buf: str
    off: int


@dataclass(frozen=True)
class BufferLayout:
    """Where chunks live in the MSCCL buffers of every rank (one instance).

    Attributes
    ----------
    kind : str
        Canonical collective kind (``allgather``, ``broadcast``, ``alltoall``,
        ``reducescatter``, ``allreduce``, ``reduce``).
    gpus : tuple of int
        ``gpus[r]`` is the topology node id of MSCCL rank ``r``.
    inplace : bool
    nchunks : int
        ``nchunksperloop`` K of one instance.
    i_chunks, o_chunks : tuple of int
        Buffer sizes per rank (scratch is sized by the exporter).
    home : mapping
        ``(rank, chunk) -> Loc`` of the data a rank holds at the start (its contribution for
        combining collectives).
    dest : mapping
        ``(rank, chunk) -> Loc`` where the result must be at the end.
    combining : bool
        Values are sums of contributions rather than copies.
    root : int or None
        Rank of the root for rooted collectives.
    """

    kind: str
    gpus: tuple[int, ...]
    inplace: bool
    nchunks: int
    i_chunks: tuple[int, ...]
    o_chunks: tuple[int, ...]
    home: Mapping[tuple[int, Chunk], Loc]
    dest: Mapping[tuple[int, Chunk], Loc]
    combining: bool
    root: int | None = None
    chunk_order: tuple[Chunk, ...] = field(default=())

    @property
    def ngpus(self) -> int:
        """Number of ranks."""
        return len(self.gpus)

    @property
    def rank(self) -> dict[int, int]:
        """Topology node id -> rank."""
        return {g: r for r, g in enumerate(self.gpus)}


def alias(kind: str, inplace: bool, ngpus: int, nchunks: int, rank: int, loc: Loc) -> Loc:
    """Map an in-place alias to the buffer the runtime really addresses.

    The executor's in-place tests (section 1.2): AllGather ``sendbuff = recvbuff + rank*count``
    so ``i[j]`` is ``o[rank*C + j]``; ReduceScatter ``recvbuff = sendbuff + rank*count`` so
    ``o[j]`` is ``i[rank*C + j]``; every other collective ``sendbuff == recvbuff``.
    """
    if not inplace:
        return loc
    per_rank = nchunks // max(1, ngpus)
    if kind == "allgather" and loc.buf == "i":
        return Loc("o", rank * per_rank + loc.off)
    if kind == "reducescatter" and loc.buf == "o":
        return Loc("i", rank * per_rank + loc.off)
    if kind not in ("allgather", "reducescatter") and loc.buf == "i":
        return Loc("o", loc.off)
    return loc


def _per_source(coll: Collective, gpus: Sequence[int], what: str) -> int:
    """Check chunk ids are ``(gpu, 0..C-1)`` for every GPU and return C."""
    c = coll.chunks
    expected = {(g, j) for g in gpus for j in range(c)}
    if set(coll.chunk_ids) != expected:
        raise ValidationError(
            f"collective {coll.kind!r}: chunk ids are not (gpu, 0..{c - 1}) for every GPU, "
            f"so it has no {what} buffer layout"
        )
    return c


def _layout_allgather(coll: Collective, gpus: tuple[int, ...], inplace: bool) -> BufferLayout:
    c = _per_source(coll, gpus, "allgather")
    n = len(gpus)
    rank = {g: r for r, g in enumerate(gpus)}
    home: dict[tuple[int, Chunk], Loc] = {}
    dest: dict[tuple[int, Chunk], Loc] = {}
    for chunk in coll.chunk_ids:
        s, j = chunk
        out = Loc("o", rank[s] * c + j)
        for h in coll.holders[chunk]:
            home[(rank[h], chunk)] = out if inplace else Loc("i", j)
        for w in coll.wanted[chunk]:
            dest[(rank[w], chunk)] = out
    return BufferLayout(
        kind="allgather",
        gpus=gpus,
        inplace=inplace,
        nchunks=n * c,
        i_chunks=(0 if inplace else c,) * n,
        o_chunks=(n * c,) * n,
        home=home,
        dest=dest,
        combining=False,
        chunk_order=coll.chunk_ids,
    )


def _layout_broadcast(coll: Collective, gpus: tuple[int, ...], inplace: bool) -> BufferLayout:
    root = coll.root
    c = coll.chunks
    if root is None or set(coll.chunk_ids) != {(root, j) for j in range(c)}:
        raise ValidationError(f"collective {coll.kind!r}: chunk ids are not (root, 0..{c - 1})")
    n = len(gpus)
    rank = {g: r for r, g in enumerate(gpus)}
    home = {(rank[root], (root, j)): Loc("o" if inplace else "i", j) for j in range(c)}
    dest = {(rank[w], (root, j)): Loc("o", j) for j in range(c) for w in coll.wanted[(root, j)]}
    i_chunks = tuple(c if (r == rank[root] and not inplace) else 0 for r in range(n))
    return BufferLayout(
        kind="broadcast",
        gpus=gpus,
        inplace=inplace,
        nchunks=c,
        i_chunks=i_chunks,
        o_chunks=(c,) * n,
        home=home,
        dest=dest,
        combining=False,
        root=rank[root],
        chunk_order=coll.chunk_ids,
    )


def _layout_alltoall(coll: Collective, gpus: tuple[int, ...], inplace: bool) -> BufferLayout:
    if inplace:
        raise ValidationError(
            "inplace: in-place alltoall needs scratch shuffles that are not exported; use --out-of-place "
            "(inplace=False)"
        )
    n = len(gpus)
    c = coll.chunks
    rank = {g: r for r, g in enumerate(gpus)}
    expected = {(g, j) for g in gpus for j in range(n * c)}
    if set(coll.chunk_ids) != expected:
        raise ValidationError(f"collective {coll.kind!r}: chunk ids are not (gpu, 0..{n * c - 1})")
    home: dict[tuple[int, Chunk], Loc] = {}
    dest: dict[tuple[int, Chunk], Loc] = {}
    for chunk in coll.chunk_ids:
        s, k = chunk
        d_rank, i = divmod(k, c)
        home[(rank[s], chunk)] = Loc("i", k)
        dest[(d_rank, chunk)] = Loc("o", rank[s] * c + i)
    return BufferLayout(
        kind="alltoall",
        gpus=gpus,
        inplace=False,
        nchunks=n * c,
        i_chunks=(n * c,) * n,
        o_chunks=(n * c,) * n,
        home=home,
        dest=dest,
        combining=False,
        chunk_order=coll.chunk_ids,
    )


def _layout_reducescatter(coll: Collective, gpus: tuple[int, ...], inplace: bool) -> BufferLayout:
    n = len(gpus)
    rank = {g: r for r, g in enumerate(gpus)}
    order = coll.chunk_ids
    k_total = len(order)
    if k_total % n:
        raise ValidationError(f"reducescatter: {k_total} chunks do not split over {n} GPUs")
    per = k_total // n
    home: dict[tuple[int, Chunk], Loc] = {}
    dest: dict[tuple[int, Chunk], Loc] = {}
    owned: dict[int, list[Chunk]] = defaultdict(list)
    for idx, chunk in enumerate(order):
        for h in coll.holders[chunk]:
            home[(rank[h], chunk)] = Loc("i", idx)
        for w in coll.wanted[chunk]:
            owned[rank[w]].append(chunk)
    for r in range(n):
        if len(owned[r]) != per:
            raise ValidationError(
                f"reducescatter: GPU {gpus[r]} must own {per} chunks, "
                f"the postcondition gives it {len(owned[r])}"
            )
        for j, chunk in enumerate(owned[r]):
            if inplace:
                idx = order.index(chunk)
                if idx != r * per + j:
                    raise ValidationError(
                        f"inplace: chunk {list(chunk)} of GPU {gpus[r]} is at input offset {idx}, not "
                        f"{r * per + j}; in-place reducescatter needs rank-ordered chunks, use --out-of-place"
                    )
                dest[(r, chunk)] = Loc("i", idx)
            else:
                dest[(r, chunk)] = Loc("o", j)
    return BufferLayout(
        kind="reducescatter",
        gpus=gpus,
        inplace=inplace,
        nchunks=k_total,
        i_chunks=(k_total,) * n,
        o_chunks=(0 if inplace else per,) * n,
        home=home,
        dest=dest,
        combining=True,
        chunk_order=order,
    )


def _layout_allreduce(coll: Collective, gpus: tuple[int, ...], inplace: bool) -> BufferLayout:
    n = len(gpus)
    rank = {g: r for r, g in enumerate(gpus)}
    order = coll.chunk_ids
    k_total = len(order)
    home: dict[tuple[int, Chunk], Loc] = {}
    dest: dict[tuple[int, Chunk], Loc] = {}
    for idx, chunk in enumerate(order):
        for h in coll.holders[chunk]:
            home[(rank[h], chunk)] = Loc("o" if inplace else "i", idx)
        for w in coll.wanted[chunk]:
            dest[(rank[w], chunk)] = Loc("o", idx)
    kind = canonical_kind(coll.kind)
    root = rank[coll.root] if coll.root is not None and kind == "reduce" else None
    return BufferLayout(
        kind=kind,
        gpus=gpus,
        inplace=inplace,
        nchunks=k_total,
        i_chunks=(0 if inplace else k_total,) * n,
        o_chunks=(k_total,) * n,
        home=home,
        dest=dest,
        combining=True,
        root=root,
        chunk_order=order,
    )


LayoutBuilder = Callable[[Collective, tuple[int, ...], bool], BufferLayout]

LAYOUTS: dict[str, LayoutBuilder] = {
    "allgather": _layout_allgather,
    "broadcast": _layout_broadcast,
    "alltoall": _layout_alltoall,
    "reducescatter": _layout_reducescatter,
    "allreduce": _layout_allreduce,
    "reduce": _layout_allreduce,
}
"""Canonical collective kind -> buffer layout builder (section 1.3 item 1)."""


def buffer_layout(collective: Collective, gpus: Sequence[int], inplace: bool) -> BufferLayout:
    """The MSCCL buffer layout of ``collective`` over ranks ``gpus`` (rank r = ``gpus[r]``).

    Raises
    ------
    ValidationError
        The collective has no MSCCL mapping (gather, scatter, multicast, custom), or its
        chunks do not follow the standard naming the layout relies on.
    """
    kind = canonical_kind(collective.kind)
    if kind in COMBINING_KINDS and not collective.combining:
        raise ValidationError(f"collective {collective.kind!r} is not marked combining")
    try:
        builder = LAYOUTS[kind]
    except KeyError:
        raise ValidationError(
            f"collective {collective.kind!r} has no MSCCL XML mapping "
            f"(exportable: {', '.join(sorted(LAYOUTS))})"
        ) from None
    return builder(collective, tuple(gpus), inplace)
