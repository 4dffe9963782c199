"""Export a verified schedule as an MSCCL algorithm XML ("MSCCL-IR").

The XML has no global clock: a schedule's "chunk c crosses u -> v in slot t" survives only as
per-thread-block program order, FIFO order on each (channel, peer) connection and explicit
cross-thread-block dependencies. This module follows the mapping recipe of
``reference/msccl_and_peers.md`` section 1.3 and the runtime limits of sections 1.2 / 5:

1. **Buffers** (:class:`BufferLayout`): where every chunk lives on every rank. AllGather in
   place keeps chunk ``(s, j)`` at ``o[rank(s)*C + j]`` everywhere (``i_chunks = 0``); out of
   place reads own data from ``i[j]`` and copies it into ``o``. Broadcast, AllToAll and the
   combining collectives (ReduceScatter, AllReduce, Reduce) have their own layouts. Chunks a
   rank only relays (neither holds nor wants) go to scratch.
2. **Channels**: chunk ``k`` (its position in the sorted chunk list) uses channel
   ``k mod channels`` on every hop, so a forwarded chunk stays on its channel and can be fused.
3. **Thread blocks**: per rank and channel, one send stream per peer and one receive stream
   per peer; a receive stream and a send stream share a thread block when chunks are received
   from one and forwarded to the other (most forwards first), otherwise when they name the same
   peer. Every thread block therefore has one send peer and one receive peer per channel.
4. **Order**: every operation gets a key; sends ``(t, 1, ...)``, receives ``(arrival, 0, ...)``
   where ``arrival = t + L``. All happens-before edges (program order, dependencies, a send
   before its receive) strictly increase in that key, so the exported program is deadlock free
   whenever the schedule is valid; both ends of a connection list its transfers in the same
   order, which is the FIFO matching the runtime needs.
5. **Fusion**: a receive immediately followed, in the same thread block, by the send of the
   same chunk becomes ``rcs`` (``rrcs``/``rrs`` for receive-and-reduce).
6. **Dependencies**: read-after-write, write-after-write and write-after-read on a buffer
   slot between thread blocks become ``depid/deps`` (only the latest step per foreign thread
   block is kept); extra dependencies become ``nop`` steps right before the step, and every
   target gets ``hasdep="1"``.
7. **Replication**: ``instances = k`` repeats the program k times on fresh channels with
   interleaved chunk offsets ``x*k + i``.

Memory: items 3-6 depend only on a rank's own transfers and the buffer layout, except two
facts per transfer that its other end decides (where the receiver stores it, what the sender
sends). :class:`_Planner` plans one rank at a time; a first pass records those facts (a few
integers per transfer) and checks every limit, and the rendering plans each rank again. The
transfers are numpy columns, so the peak is one rank's step objects plus bytes per transfer.

Switches: MSCCL connects GPUs only. By default (``switches="collapse"``) a relay
``u -> switch -> ... -> v`` becomes one logical GPU-to-GPU transfer ``u -> v`` (the runtime's
transport, e.g. NET through the switch, carries it); a switch that copies a chunk to several
GPUs becomes several transfers from ``u``, and a switch that adds partial sums (in-network
reduction) becomes one transfer per part, reduced at the receiving GPU. ``switches="refuse"``
raises instead.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ccplan.atomic import sigint_blocked, staging_path
from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk, Collective
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

PROTOCOLS: tuple[str, ...] = ("Simple", "LL", "LL128")
"""Values of the ``proto`` attribute (exact case)."""

MAX_CHANNELS = 32
"""``MAXCHANNELS`` of the NCCL versions the runtimes are built on."""
MAX_COUNT = 72
"""``MSCCL_MAX_COUNT``: ``cnt`` must be below it."""
MAX_OFFSET = 32767
"""Offsets are stored as ``int16``."""
MAX_DEP_TB = 127
"""``depid`` is stored as ``int8``."""
MAX_TBS_PER_CHANNEL = 32
"""``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`` (send tbs and receive tbs, each)."""
DEFAULT_MAX_TBS = 108
"""All thread blocks of a GPU must be co-resident: keep their number at most the SM count (A100)."""
MAX_BYTES = 1099511627776
"""Explicit ``maxBytes`` (1 TiB): the executor reads 0 as "no limit" but legacy msccl reads it literally."""


@dataclass(frozen=True)
class Dialect:
    """What one MSCCL runtime accepts.

    Attributes
    ----------
    name : str
    coll_names : mapping
        Canonical collective kind -> spelling of the ``coll`` attribute.
    max_steps : int
        ``MSCCL_MAX_NUM_STEPS``: steps per thread block (``nop`` included).
    max_tb_id : int
        Thread block ids must be below it.
    required_attrs : tuple of str
        ``<algo>`` attributes the parser insists on.
    """

    name: str
    coll_names: Mapping[str, str]
    max_steps: int
    max_tb_id: int
    required_attrs: tuple[str, ...]
    accepted_colls: frozenset[str]


DIALECTS: dict[str, Dialect] = {
    "executor": Dialect(
        name="executor",
        coll_names={
            "allgather": "allgather",
            "broadcast": "broadcast",
            "alltoall": "alltoall",
            "reducescatter": "reducescatter",
            "allreduce": "allreduce",
            "reduce": "reduce",
        },
        max_steps=64,
        max_tb_id=32 * MAX_CHANNELS,
        required_attrs=(
            "nchunksperloop",
            "nchannels",
            "ngpus",
            "proto",
            "coll",
            "minBytes",
            "maxBytes",
            "inplace",
            "outofplace",
        ),
        accepted_colls=frozenset(
            [
                "reduce",
                "broadcast",
                "allreduce",
                "reducescatter",
                "allgather",
                "send",
                "recv",
                "gather",
                "scatter",
                "alltoall",
                "alltoallv",
            ]
        ),
    ),
    "legacy": Dialect(
        name="legacy",
        coll_names={
            "allgather": "allgather",
            "broadcast": "broadcast",
            "alltoall": "alltoall",
            "reducescatter": "reduce_scatter",
            "allreduce": "allreduce",
            "reduce": "reduce",
        },
        max_steps=256,
        max_tb_id=216,
        required_attrs=("name", "ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace"),
        accepted_colls=frozenset(
            ["allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter", "custom"]
        ),
    ),
}
"""The two XML dialects of ``reference/msccl_and_peers.md`` section 1.1."""

COLL_TO_KIND: dict[str, str] = {
    "allgather": "allgather",
    "broadcast": "broadcast",
    "alltoall": "alltoall",
    "reducescatter": "reducescatter",
    "reduce_scatter": "reducescatter",
    "allreduce": "allreduce",
    "reduce": "reduce",
}
"""XML ``coll`` spelling (either dialect) -> canonical kind."""

COMBINING_KINDS: frozenset[str] = frozenset({"reducescatter", "allreduce", "reduce"})
SWITCH_POLICIES: tuple[str, ...] = ("collapse", "refuse")


def canonical_kind(kind: str) -> str:
    """``"reduce_scatter"``, ``"ReduceScatter"``, ``"reduce-scatter"`` -> ``"reducescatter"``."""
    return kind.replace("_", "").replace("-", "").lower()


# ============================================================================ buffers
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


# ============================================================================ transfers
@dataclass(frozen=True, slots=True)
class Transfer:
    """One GPU-to-GPU transfer after switch relays are collapsed (ranks, not node ids)."""

    chunk: Chunk
    src: int
    dst: int
    send_key: int
    recv_key: int
    reduce: bool
    via: tuple[int, ...] = ()


def logical_transfers(instance: Instance, schedule: Schedule, switches: str = "collapse") -> list[Transfer]:
    """GPU-to-GPU transfers of ``schedule``, with ranks as in ``instance.topology.gpus``.

    A direct send ``u -> v`` in slot t keeps keys ``(t, t + L)``. A relay through switches
    ``u -> sw ... -> v`` becomes one transfer ``u -> v`` whose receive key is the arrival at
    v and whose send key is one less: u held the chunk since its first hop, and tying both
    ends of the logical connection to the arrival order keeps its FIFO order consistent even
    when a store-and-forward switch reorders chunks.

    Raises
    ------
    ValidationError
        ``switches="refuse"`` and the schedule uses a switch; an unknown policy; a relayed
        partial sum that changes at its origin while it is in the switch.
    """
    if switches not in SWITCH_POLICIES:
        raise ValidationError(f"switches must be one of {SWITCH_POLICIES}, got {switches!r}")
    topo = instance.topology
    kind = topo.kind
    rank = {g: r for r, g in enumerate(topo.gpus)}
    latency = instance.latency
    link_index = topo.link_index
    # (switch, chunk) -> arrivals: (usable from, bundle). A bundle lists the GPU-level parts the
    # switch's copy is made of, each (origin GPU, switches crossed, first-hop slot). It has one
    # part unless the switch reduces in the network (a reduce arriving at a switch that already
    # holds a partial sum); MSCCL cannot reduce in a switch, so every part then becomes its own
    # transfer and the receiving GPU reduces them one by one (same result, more traffic).
    Part = tuple[int, tuple[int, ...], int]
    feed: dict[tuple[int, Chunk], list[tuple[int, tuple[Part, ...]]]] = defaultdict(list)
    out: list[Transfer] = []
    first_hop: dict[int, int] = {}
    for send in schedule.sends:
        key = (send.src, send.dst)
        if key not in link_index:
            raise ValidationError(f"schedule: {send.describe()} uses a link the topology does not have")
        arrive = send.slot + int(latency[link_index[key]])
        src_switch = kind.get(send.src) == "switch"
        dst_switch = kind.get(send.dst) == "switch"
        if (src_switch or dst_switch) and switches == "refuse":
            sw = send.src if src_switch else send.dst
            raise ValidationError(
                f"switches: {send.describe()} goes through switch {sw}; MSCCL XML connects GPUs only "
                "(use --switches collapse to turn relays into GPU-to-GPU transfers)"
            )
        bundle: tuple[Part, ...]
        if src_switch:
            usable = [f for f in feed[(send.src, send.chunk)] if f[0] <= send.slot]
            if send.src in instance.bufferless:
                # a cut-through switch forwards the copy that passes it in this very slot
                usable = [f for f in usable if f[0] == send.slot]
            if not usable:
                raise ValidationError(
                    f"schedule: {send.describe()} leaves switch {send.src} before the chunk reaches it"
                )
            bundle = usable[-1][1]
        else:
            bundle = ((send.src, (), send.slot),)
        if dst_switch:
            arrived = feed[(send.dst, send.chunk)]
            if send.reduce and arrived and instance.collective.combining:
                bundle = (*arrived[-1][1], *bundle)
            arrived.append((arrive, tuple((o, (*v, send.dst), t1) for o, v, t1 in bundle)))
            continue
        if not src_switch:
            out.append(Transfer(send.chunk, rank[send.src], rank[send.dst], send.slot, arrive, send.reduce))
            continue
        for part, (origin, via, t1) in enumerate(bundle):
            first_hop[len(out)] = t1
            reduce = send.reduce or part > 0
            out.append(Transfer(send.chunk, rank[origin], rank[send.dst], arrive - 1, arrive, reduce, via))
    if instance.collective.combining:
        # A relay is sent as of its arrival - 1; the value must not change at its origin after
        # the first hop (a partial sum reduced further meanwhile would be forwarded too late).
        for i, t1 in first_hop.items():
            tr = out[i]
            for other in out:
                if other.dst == tr.src and other.chunk == tr.chunk and t1 < other.recv_key <= tr.send_key:
                    raise ValidationError(
                        f"switches: chunk {list(tr.chunk)} relayed from GPU {topo.gpus[tr.src]} through "
                        f"switch(es) {list(tr.via)} changes at its origin while in the switch; it cannot "
                        "be one MSCCL transfer (use --switches refuse to see every switch hop)"
                    )
    return out


# ============================================================================ ops
@dataclass(eq=False, slots=True)
class _Op:
    """One step before numbering (mutable while the program is assembled)."""

    type: str
    rank: int
    key: tuple[Any, ...]
    chunk: Chunk | None = None
    send_peer: int = -1
    recv_peer: int = -1
    channel: int = 0
    reduce: bool = False
    transfer: int = -1
    src: Loc | None = None
    dst: Loc | None = None
    cnt: int = 1
    tb: int = -1
    pos: int = -1
    step: int = -1
    deps: list[_Op] = field(default_factory=list)
    hasdep: bool = False
    out_transfer: int = -1
    """The transfer a fused receive-and-forward step sends on (-1: none)."""

    def reads(self) -> list[Loc]:
        if self.type in ("s", "rrs", "rrc", "rrcs", "cpy") and self.src is not None:
            return _span(self.src, self.cnt)
        return []

    def writes(self) -> list[Loc]:
        if self.type in ("r", "rcs", "rrc", "rrcs", "cpy") and self.dst is not None:
            return _span(self.dst, self.cnt)
        return []


def _span(loc: Loc, cnt: int) -> list[Loc]:
    if cnt == 1:
        return [loc]
    return [Loc(loc.buf, loc.off + k) for k in range(cnt)]


@dataclass(frozen=True)
class _TB:
    send: int
    recv: int
    chan: int


def _pair_streams(
    sends: set[int], recvs: set[int], forwards: Mapping[tuple[int, int], int]
) -> list[tuple[int, int]]:
    """Pair receive peers with send peers of one rank and channel into thread blocks."""
    free_s, free_r = set(sends), set(recvs)
    pairs: list[tuple[int, int]] = []
    # Most forwarded chunks first: a forwarded chunk in one tb becomes an rcs, no dependency.
    for (w, v), count in sorted(forwards.items(), key=lambda kv: (-kv[1], kv[0])):
        if count > 0 and w in free_r and v in free_s:
            pairs.append((v, w))
            free_r.discard(w)
            free_s.discard(v)
    for p in sorted(free_s & free_r):
        pairs.append((p, p))
    free_s -= {p for p, _ in pairs}
    free_r -= {q for _, q in pairs}
    pairs += [(v, -1) for v in sorted(free_s)] + [(-1, w) for w in sorted(free_r)]
    return pairs


def _fmt_loc(loc: Loc | None) -> tuple[str, int]:
    return ("o", -1) if loc is None else (loc.buf, loc.off)


_BUFS = ("i", "o", "s")
_BUF_INDEX = {b: i for i, b in enumerate(_BUFS)}


@dataclass(frozen=True)
class _Transfers:
    """The logical transfers as numpy columns (one row per transfer, schedule order).

    ``k`` is the chunk's index in the layout's chunk order; ranks, not node ids.
    """

    k: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    send_key: np.ndarray
    recv_key: np.ndarray
    reduce: np.ndarray

    def __len__(self) -> int:
        return len(self.k)


def _transfer_columns(
    instance: Instance, schedule: Schedule, switches: str, chunk_idx: Mapping[Chunk, int]
) -> _Transfers:
    """:func:`logical_transfers` as columns; sends between GPUs are read without an object each."""
    if switches not in SWITCH_POLICIES:
        raise ValidationError(f"switches must be one of {SWITCH_POLICIES}, got {switches!r}")
    topo = instance.topology
    sends = schedule.sends
    nodes = max(topo.kind, default=-1) + 1
    is_switch = np.zeros(max(nodes, 1), dtype=bool)
    for node, kind in topo.kind.items():
        is_switch[node] = kind == "switch"
    count = len(sends)
    src = np.fromiter((s.src for s in sends), dtype=np.int64, count=count)
    dst = np.fromiter((s.dst for s in sends), dtype=np.int64, count=count)
    in_range = bool(count == 0 or (src.max() < nodes and dst.max() < nodes))
    if not in_range or is_switch[src].any() or is_switch[dst].any():
        out = logical_transfers(instance, schedule, switches)
        return _Transfers(
            k=np.fromiter((chunk_idx[t.chunk] for t in out), dtype=np.int64, count=len(out)),
            src=np.fromiter((t.src for t in out), dtype=np.int64, count=len(out)),
            dst=np.fromiter((t.dst for t in out), dtype=np.int64, count=len(out)),
            send_key=np.fromiter((t.send_key for t in out), dtype=np.int64, count=len(out)),
            recv_key=np.fromiter((t.recv_key for t in out), dtype=np.int64, count=len(out)),
            reduce=np.fromiter((t.reduce for t in out), dtype=bool, count=len(out)),
        )
    # GPU to GPU only: every send is one transfer with keys (t, t + L), as logical_transfers.
    link_index = topo.link_index
    link = np.empty(count, dtype=np.int64)
    for i, s in enumerate(sends):
        e = link_index.get((s.src, s.dst))
        if e is None:
            raise ValidationError(f"schedule: {s.describe()} uses a link the topology does not have")
        link[i] = e
    rank_of = np.full(max(nodes, 1), -1, dtype=np.int64)
    rank_of[list(topo.gpus)] = np.arange(len(topo.gpus))
    slot = np.fromiter((s.slot for s in sends), dtype=np.int64, count=count)
    latency = np.asarray(instance.latency, dtype=np.int64)
    return _Transfers(
        k=np.fromiter((chunk_idx[s.chunk] for s in sends), dtype=np.int64, count=count),
        src=rank_of[src],
        dst=rank_of[dst],
        send_key=slot,
        recv_key=slot + latency[link],
        reduce=np.fromiter((s.reduce for s in sends), dtype=bool, count=count),
    )


def _check_fifo(tr: _Transfers, channels: int) -> None:
    """Both ends of every connection must list its transfers in the same order.

    A send's key is ``(send slot, 1, 0, k, dst)`` and a receive's ``(arrival, 0, reduce, k,
    src)``; on one connection dst and src are fixed, so the orders compare the rest.
    """
    n = len(tr)
    if not n:
        return
    ids = np.arange(n)
    ch = tr.k % channels
    by_send = np.lexsort((ids, tr.k, tr.send_key, ch, tr.dst, tr.src))
    by_recv = np.lexsort((ids, tr.k, tr.reduce, tr.recv_key, ch, tr.dst, tr.src))
    # Both orders group the connections the same way (same leading keys), so the groups line
    # up position by position; a position where they name different transfers is a mismatch.
    bad = np.flatnonzero(by_send != by_recv)
    if not len(bad):
        return
    # Report the connection whose first transfer comes first, as a dict in transfer order would.
    conn = np.stack([tr.src[by_send[bad]], tr.dst[by_send[bad]], ch[by_send[bad]]], axis=1)
    first_of: dict[tuple[int, int, int], int] = {}
    for i in range(n):
        first_of.setdefault((int(tr.src[i]), int(tr.dst[i]), int(ch[i])), i)
    rows = [(int(row[0]), int(row[1]), int(row[2])) for row in conn]
    u, v, c = min(rows, key=lambda key: first_of[key])
    raise ValidationError(
        f"connection GPU {u} -> GPU {v} channel {c}: transfers arrive in a different order than "
        "they leave (direct link and switch relays mixed on one connection); MSCCL connections are "
        "FIFO -- "
        "use more --channels or --switches refuse"
    )


@dataclass
class _RankPlan:
    """One rank's thread blocks and numbered, fused programs (``programs[b]``)."""

    tbs: list[_TB]
    programs: dict[int, list[_Op]]
    scratch: int
    first_key: dict[int, tuple[Any, ...]]
    """Per thread block, the sort key of its first op (orders the steps-limit message)."""


class _Planner:
    """Builds the program of one rank at a time (module doc, items 1-7).

    Everything a rank's steps depend on is its own transfers and buffer layout, except two
    facts about each transfer that its other end decides: where the receiver stores it (a
    sender's ``dstbuf/dstoff``) and what the sender sends (a receiver's ``srcbuf/srcoff``).
    :meth:`link` records both for every transfer in a first pass over the ranks, so the
    second pass (rendering) needs one rank's objects at a time.
    """

    def __init__(self, layout: BufferLayout, tr: _Transfers, channels: int, instances: int) -> None:
        self.layout = layout
        self.tr = tr
        self.channels = channels
        self.instances = instances
        self.chunks = layout.chunk_order
        self.chunk_idx = {c: k for k, c in enumerate(layout.chunk_order)}
        self.sorted_chunks = sorted(layout.chunk_order)
        n = layout.ngpus
        self.out_of = _group(tr.src, n)
        self.in_of = _group(tr.dst, n)
        t = len(tr)
        # (buffer index, offset) per transfer; buffer -1 is "none" (a reduce-and-forward)
        self.sent = np.full((t, 2), -1, dtype=np.int64)
        self.landed = np.full((t, 2), -1, dtype=np.int64)
        self.copies_before = 0

    def plan(self, r: int, copy_seq: int) -> _RankPlan:
        """The program of rank ``r``; ``copy_seq`` numbers its copies after all transfers."""
        layout, tr, channels = self.layout, self.tr, self.channels
        n = layout.ngpus
        ntr = len(tr)
        ops: list[_Op] = []
        seq: dict[int, int] = {}
        out_ids, in_ids = self.out_of[r], self.in_of[r]
        for t, k, dst, key in zip(
            out_ids.tolist(),
            tr.k[out_ids].tolist(),
            tr.dst[out_ids].tolist(),
            tr.send_key[out_ids].tolist(),
            strict=True,
        ):
            op = _Op(
                "s", r, (key, 1, 0, k, dst), self.chunks[k], send_peer=dst, channel=k % channels, transfer=t
            )
            seq[id(op)] = 2 * t
            ops.append(op)
        for t, k, src, key, red in zip(
            in_ids.tolist(),
            tr.k[in_ids].tolist(),
            tr.src[in_ids].tolist(),
            tr.recv_key[in_ids].tolist(),
            tr.reduce[in_ids].tolist(),
            strict=True,
        ):
            op = _Op(
                "r",
                r,
                # Same-slot arrivals: copies before reductions, as the combining verifier applies them.
                (key, 0, int(red), k, src),
                self.chunks[k],
                recv_peer=src,
                channel=k % channels,
                reduce=red and layout.combining,
                transfer=t,
            )
            seq[id(op)] = 2 * t + 1
            ops.append(op)
        rops = sorted(ops, key=lambda o: (o.key, seq[id(o)]))

        # ----------------------------------------------------------- thread blocks
        recv_by_chunk: dict[tuple[int, Chunk], int] = {}
        for op in rops:
            if op.type == "r":
                recv_by_chunk[(op.channel, op.chunk)] = op.recv_peer  # type: ignore[index]
        blocks: list[_TB] = []
        for ch in range(channels):
            sends = {o.send_peer for o in rops if o.type == "s" and o.channel == ch}
            recvs = {o.recv_peer for o in rops if o.type == "r" and o.channel == ch}
            forwards: dict[tuple[int, int], int] = defaultdict(int)
            for o in rops:
                if o.type == "s" and o.channel == ch and (ch, o.chunk) in recv_by_chunk:
                    forwards[(recv_by_chunk[(ch, o.chunk)], o.send_peer)] += 1  # type: ignore[index]
            blocks += [_TB(s, w, ch) for s, w in _pair_streams(sends, recvs, forwards)]
        big = n + 1
        blocks.sort(key=lambda x: (x.send if x.send >= 0 else big, x.recv if x.recv >= 0 else big, x.chan))
        index: dict[tuple[str, int, int], int] = {}
        for b_id, blk in enumerate(blocks):
            if blk.send >= 0:
                index[("s", blk.send, blk.chan)] = b_id
            if blk.recv >= 0:
                index[("r", blk.recv, blk.chan)] = b_id
        for op in rops:
            peer = op.send_peer if op.type == "s" else op.recv_peer
            op.tb = index[(op.type, peer, op.channel)]

        # ----------------------------------------------------------- buffer locations
        scratch: dict[Chunk, Loc] = {}
        cur: dict[Chunk, Loc] = {}
        home, dest = layout.home, layout.dest
        for chunk in self.chunks:
            loc = home.get((r, chunk))
            if loc is not None:
                cur[chunk] = loc
        for op in rops:
            assert op.chunk is not None
            if op.type == "s":
                if op.chunk not in cur:
                    raise ValidationError(
                        f"schedule: GPU {layout.gpus[r]} sends chunk {list(op.chunk)} it never holds"
                    )
                op.src = cur[op.chunk]
                continue
            target = dest.get((r, op.chunk))
            if target is None:
                target = scratch.get(op.chunk)
                if target is None:
                    target = scratch[op.chunk] = Loc("s", len(scratch))
            if op.reduce and op.chunk in cur:
                op.type, op.src, op.dst = "rrc", cur[op.chunk], target
            else:
                op.dst = target
            cur[op.chunk] = target
        # Results that are not where the postcondition wants them: copy (own shard of an
        # out-of-place AllGather, a combined value that ended in the input buffer, ...).
        copies: list[_Op] = []
        for chunk in self.sorted_chunks:
            want = dest.get((r, chunk))
            if want is None or chunk not in cur or cur[chunk] == want:
                continue
            held = cur[chunk] == home.get((r, chunk))
            k = self.chunk_idx[chunk]
            key = (-1, -1, 0, k, 0) if held else (float("inf"), 2, 0, k, 0)
            op = _Op("cpy", r, key, chunk, src=cur[chunk], dst=want)
            seq[id(op)] = 2 * ntr + copy_seq + len(copies)
            copies.append(op)
        copy_tb = -1
        if copies:
            copy_tb = len(blocks)
            blocks.append(_TB(-1, -1, 0))
            for op in copies:
                op.tb = copy_tb
        all_ops = sorted(rops + copies, key=lambda o: (o.key, seq[id(o)]))

        # ----------------------------------------------------------- programs and fusion
        programs: dict[int, list[_Op]] = defaultdict(list)
        first_key: dict[int, tuple[Any, ...]] = {}
        for op in all_ops:
            if op.tb not in programs:
                first_key[op.tb] = (op.key, seq[id(op)])
            programs[op.tb].append(op)
        writes_at: dict[Loc, list[tuple[Any, ...]]] = defaultdict(list)
        reads_after: dict[Loc, list[tuple[Any, ...]]] = defaultdict(list)
        for op in all_ops:
            for loc in op.writes():
                writes_at[loc].append(op.key)
            for loc in op.reads():
                reads_after[loc].append(op.key)
        for b, prog in list(programs.items()):
            fused: list[_Op] = []
            i = 0
            while i < len(prog):
                op = prog[i]
                nxt = prog[i + 1] if i + 1 < len(prog) else None
                if (
                    nxt is not None
                    and op.type in ("r", "rrc")
                    and nxt.type == "s"
                    and nxt.chunk == op.chunk
                    and nxt.src == op.dst
                    and _no_write_between(writes_at, op, nxt)
                ):
                    _fuse(op, nxt, reads_after)
                    fused.append(op)
                    i += 2
                    continue
                fused.append(op)
                i += 1
            if self.instances == 1 and b == copy_tb:
                fused = _merge_copies(fused)
            programs[b] = fused
            for pos, op in enumerate(fused):
                op.pos = pos

        # ----------------------------------------------------------- dependencies
        ordered = sorted((op for prog in programs.values() for op in prog), key=lambda o: (o.key, seq[id(o)]))
        last_writer: dict[Loc, _Op] = {}
        readers: dict[Loc, list[_Op]] = defaultdict(list)
        for op in ordered:
            need: list[_Op] = []
            for loc in op.reads():
                if loc in last_writer:
                    need.append(last_writer[loc])
            for loc in op.writes():
                if loc in last_writer:
                    need.append(last_writer[loc])
                need += readers[loc]
            latest: dict[int, _Op] = {}
            for d in need:
                if d.tb != op.tb and (d.tb not in latest or d.pos > latest[d.tb].pos):
                    latest[d.tb] = d
            op.deps = [latest[b] for b in sorted(latest)]
            for d in op.deps:
                d.hasdep = True
            for loc in op.reads():
                readers[loc].append(op)
            for loc in op.writes():
                last_writer[loc] = op
                readers[loc] = []

        # ----------------------------------------------------------- numbering
        for prog in programs.values():
            s = 0
            for op in prog:
                s += max(0, len(op.deps) - 1)
                op.step = s
                s += 1
        return _RankPlan(blocks, dict(programs), len(scratch), first_key)

    def link(self, plan: _RankPlan) -> None:
        """Record what each transfer of this rank sends and where each it receives lands."""
        for prog in plan.programs.values():
            for op in prog:
                if op.type == "s":
                    self.sent[op.transfer] = _loc_pair(op.src)
                elif op.type != "cpy":
                    self.landed[op.transfer] = _loc_pair(op.dst)
                    if op.out_transfer >= 0:
                        # a fused receive-and-forward sends what it stores (nothing for rrs)
                        self.sent[op.out_transfer] = _loc_pair(op.dst)

    def loc(self, table: np.ndarray, t: int) -> Loc | None:
        buf, off = (int(x) for x in table[t])
        return None if buf < 0 else Loc(_BUFS[buf], off)


def _loc_pair(loc: Loc | None) -> tuple[int, int]:
    return (-1, -1) if loc is None else (_BUF_INDEX[loc.buf], loc.off)


def _group(values: np.ndarray, n: int) -> list[np.ndarray]:
    """Indices of ``values`` equal to 0, 1, ..., n-1 (each in increasing order)."""
    order = np.argsort(values, kind="stable")
    bounds = np.searchsorted(values[order], np.arange(n + 1))
    return [order[bounds[r] : bounds[r + 1]] for r in range(n)]


@dataclass(frozen=True)
class _Built:
    """A program ready to render: every limit checked, each transfer's two ends linked.

    The steps themselves are not kept: :func:`_render` plans each rank again (the plan is
    deterministic), so the peak holds one rank's objects rather than one per step.
    """

    name: str
    proto: str
    channels: int
    instances: int
    inplace: bool
    dialect: Dialect
    layout: BufferLayout
    planner: _Planner
    s_chunks: tuple[int, ...]
    copy_seq: tuple[int, ...]
    transfers: int
    thread_blocks: int
    describe: str


def _render(built: _Built) -> Iterator[str]:
    """The XML of ``built``, one newline-terminated line at a time (section 1.1 element order).

    A generator, so a writer holds one line (and one rank's plan) at a time rather than the
    whole document: the text of a 1,024-GPU schedule is several times the size of its steps.
    """
    layout, inst_count, channels = built.layout, built.instances, built.channels
    planner = built.planner
    n = layout.ngpus
    k_total = layout.nchunks * inst_count
    yield (
        f'<algo name="{built.name}" proto="{built.proto}" nchannels="{channels * inst_count}" '
        f'nchunksperloop="{k_total}" '
        f'ngpus="{n}" coll="{built.dialect.coll_names[layout.kind]}" inplace="{int(built.inplace)}" '
        f'outofplace="{int(not built.inplace)}" minBytes="0" maxBytes="{MAX_BYTES}">\n'
    )
    for r in range(n):
        plan = planner.plan(r, built.copy_seq[r])
        ntb = len(plan.tbs)
        yield (
            f'  <gpu id="{r}" i_chunks="{layout.i_chunks[r] * inst_count}" '
            f'o_chunks="{layout.o_chunks[r] * inst_count}" s_chunks="{built.s_chunks[r] * inst_count}">\n'
        )
        for inst in range(inst_count):
            for b, block in enumerate(plan.tbs):
                chan = inst * channels + block.chan
                tb_id = inst * ntb + b
                yield f'    <tb id="{tb_id}" send="{block.send}" recv="{block.recv}" chan="{chan}">\n'
                for op in plan.programs.get(b, ()):
                    for line in _render_op(op, planner, inst, inst_count, inst * ntb):
                        yield line + "\n"
                yield "    </tb>\n"
        yield "  </gpu>\n"
    yield "</algo>\n"
    log.debug(
        "msccl export %s: %d transfers, %d thread blocks",
        built.describe,
        built.transfers,
        built.thread_blocks,
    )


def _build(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str,
    proto: str,
    channels: int,
    instances: int,
    inplace: bool,
    name: str,
    switches: str,
    max_tbs: int,
) -> _Built:
    """Everything :func:`to_msccl_xml` checks and decides, short of the text (module doc, 1-7).

    Every runtime limit is checked here, so a caller that renders the result afterwards
    (:func:`write_msccl_xml` streams it to a file) has nothing left that can fail on the
    schedule's account. The ranks are planned one at a time; only each transfer's two
    linked locations (a few integers per transfer) outlive a rank's plan.
    """
    try:
        dia = DIALECTS[dialect]
    except KeyError:
        raise ValidationError(f"dialect must be one of {tuple(DIALECTS)}, got {dialect!r}") from None
    if proto not in PROTOCOLS:
        raise ValidationError(f"proto must be one of {PROTOCOLS}, got {proto!r}")
    for what, value in (("channels", channels), ("instances", instances), ("max_tbs", max_tbs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValidationError(f"{what} must be a positive integer, got {value!r}")
    if channels * instances > MAX_CHANNELS:
        raise ValidationError(
            f"channels*instances = {channels * instances} exceeds MAXCHANNELS = {MAX_CHANNELS}; "
            "lower --channels or --instances"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,200}", name):
        raise ValidationError(f"name must be 1-200 letters, digits, '_', '.', '-', got {name!r}")

    topo = instance.topology
    coll = instance.collective
    layout = buffer_layout(coll, topo.gpus, inplace)
    if layout.combining and not coll.combining:
        raise ValidationError(f"collective {coll.kind!r}: layout is combining but the collective is not")
    n = layout.ngpus
    chunk_idx = {c: k for k, c in enumerate(layout.chunk_order)}
    tr = _transfer_columns(instance, schedule, switches, chunk_idx)
    _check_fifo(tr, channels)
    planner = _Planner(layout, tr, channels, instances)

    # One pass over the ranks: link the transfers' ends, note the first violation of each
    # limit in the order the checks below report them.
    steps_bad: tuple[tuple[Any, ...], str] | None = None
    tbs_bad: str | None = None
    s_chunks: list[int] = []
    copy_seq: list[int] = []
    ntbs: list[int] = []
    copies = 0
    for r in range(n):
        copy_seq.append(copies)
        plan = planner.plan(r, copies)
        planner.link(plan)
        # a merged copy stands for cnt copies, each of which took a sequence number
        copies += sum(op.cnt for prog in plan.programs.values() for op in prog if op.type == "cpy")
        s_chunks.append(plan.scratch)
        ntbs.append(len(plan.tbs))
        for b, prog in plan.programs.items():
            s = prog[-1].step + 1 if prog else 0
            if s > dia.max_steps and (steps_bad is None or plan.first_key[b] < steps_bad[0]):
                steps_bad = (
                    plan.first_key[b],
                    f"steps per thread block: GPU {r} thread block {b} needs {s} steps but the {dia.name} "
                    "runtime "
                    f"allows MSCCL_MAX_NUM_STEPS = {dia.max_steps}; spread chunks over more channels "
                    f"(--channels {channels * 2}), use fewer chunks, or --dialect legacy (256 steps)",
                )
        if tbs_bad is None:
            tbs_bad = _tb_limits(r, plan.tbs, channels, instances, max_tbs, dia)
    if steps_bad is not None:
        raise ValidationError(steps_bad[1])
    if tbs_bad is not None:
        raise ValidationError(tbs_bad)
    for r in range(n):
        size = max(layout.i_chunks[r], layout.o_chunks[r], s_chunks[r]) * instances
        if size - 1 > MAX_OFFSET:
            raise ValidationError(
                f"offsets: GPU {r} buffers need {size} chunks but offsets are int16 (max {MAX_OFFSET}); "
                "use fewer chunks or instances"
            )

    return _Built(
        name=name,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        dialect=dia,
        layout=layout,
        planner=planner,
        s_chunks=tuple(s_chunks),
        copy_seq=tuple(copy_seq),
        transfers=len(tr),
        thread_blocks=sum(ntbs) * instances,
        describe=instance.describe(),
    )


def _tb_limits(
    r: int, tbs: list[_TB], channels: int, instances: int, max_tbs: int, dia: Dialect
) -> str | None:
    """The first thread-block limit rank ``r`` breaks (co-residency, ``int8`` depid, per channel)."""
    count = len(tbs) * instances
    if count > max_tbs or count > dia.max_tb_id or count - 1 > MAX_DEP_TB:
        return (
            f"thread blocks: GPU {r} needs {count} thread blocks but at most "
            f"{min(max_tbs, MAX_DEP_TB + 1)} "
            "can be co-resident/addressed (int8 depid); lower --channels or --instances"
        )
    for ch in range(channels):
        ns = sum(1 for b in tbs if b.chan == ch and b.send >= 0)
        nr = sum(1 for b in tbs if b.chan == ch and b.recv >= 0)
        if max(ns, nr) > MAX_TBS_PER_CHANNEL:
            return (
                f"thread blocks per channel: GPU {r} channel {ch} has {max(ns, nr)} send or receive "
                "thread "
                f"blocks, the runtime allows {MAX_TBS_PER_CHANNEL}; use more channels"
            )
    return None


def to_msccl_xml(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str = "executor",
    proto: str = "Simple",
    channels: int = 1,
    instances: int = 1,
    inplace: bool = True,
    name: str = "ccplan",
    switches: str = "collapse",
    max_tbs: int = DEFAULT_MAX_TBS,
) -> str:
    """Render ``schedule`` as an MSCCL algorithm XML (recipe of section 1.3, see module doc).

    Parameters
    ----------
    instance, schedule
        A schedule that passes :func:`ccplan.schedule.verify` (not re-checked here).
    dialect : {"executor", "legacy"}
        ``executor`` for Azure/msccl-executor-nccl and RCCL (64 steps per thread block,
        ``reducescatter``), ``legacy`` for microsoft/msccl (256 steps, ``reduce_scatter``).
    proto : {"Simple", "LL", "LL128"}
    channels : int
        Channels of one instance; chunk k uses channel ``k mod channels``.
    instances : int
        Replicate the program (interleaved chunks, fresh channels).
    inplace : bool
        Emit the in-place variant (``inplace="1" outofplace="0"``) or the out-of-place one.
    name : str
        ``name`` attribute (letters, digits, ``_ . -``).
    switches : {"collapse", "refuse"}
        How relays through switch nodes are handled (module doc).
    max_tbs : int
        Thread blocks per GPU allowed (co-residency; 108 = A100 SMs).

    Returns
    -------
    str
        The XML text (no prolog, one element per line: the executor's tokenizer needs it).

    Raises
    ------
    ValidationError
        Bad option; a collective without MSCCL mapping; a schedule that cannot be expressed
        within a runtime limit (steps per thread block, thread blocks, channels, offsets) --
        the message names the limit and the option that helps.
    """
    built = _build(
        instance,
        schedule,
        dialect=dialect,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        name=name,
        switches=switches,
        max_tbs=max_tbs,
    )
    return "".join(_render(built))


def _no_write_between(writes_at: Mapping[Loc, list[tuple[Any, ...]]], recv: _Op, send: _Op) -> bool:
    """Fusing moves the send back to the receive; no other op may change the value meanwhile."""
    assert send.src is not None
    return all(not recv.key < key < send.key for key in writes_at.get(send.src, []))


def _fuse(recv: _Op, send: _Op, reads_after: Mapping[Loc, list[Any]]) -> None:
    """Turn ``recv`` into a receive-and-forward step carrying ``send`` (``rcs``/``rrcs``/``rrs``)."""
    assert recv.chunk is not None and recv.dst is not None
    recv.send_peer = send.send_peer
    recv.out_transfer = send.transfer
    if recv.type == "r":
        recv.type = "rcs"
        return
    only_reader = all(k == send.key for k in reads_after.get(recv.dst, []))
    if recv.dst.buf == "s" and only_reader:
        # The partial sum is only forwarded: reduce and send without storing it.
        recv.type, recv.dst = "rrs", None
    else:
        recv.type = "rrcs"


def _merge_copies(prog: list[_Op]) -> list[_Op]:
    """Merge runs of copies between contiguous locations into one ``cpy`` with ``cnt > 1``."""
    out: list[_Op] = []
    for op in prog:
        prev = out[-1] if out else None
        if (
            prev is not None
            and op.type == prev.type == "cpy"
            and not op.deps
            and not prev.hasdep
            and not op.hasdep
            and prev.src is not None
            and prev.dst is not None
            and op.src is not None
            and op.dst is not None
            and op.src == Loc(prev.src.buf, prev.src.off + prev.cnt)
            and op.dst == Loc(prev.dst.buf, prev.dst.off + prev.cnt)
            and prev.cnt + 1 < MAX_COUNT
        ):
            prev.cnt += 1
            continue
        out.append(op)
    return out


def _shift(loc: Loc | None, inst: int, instances: int) -> tuple[str, int]:
    buf, off = _fmt_loc(loc)
    return buf, (off if off < 0 else off * instances + inst)


def _render_op(op: _Op, planner: _Planner, inst: int, instances: int, tb_base: int) -> list[str]:
    """The ``<step>`` lines of ``op`` (with its leading ``nop``s) for replica ``inst``."""
    lines = []
    deps = op.deps
    first = op.step - max(0, len(deps) - 1)
    for k, d in enumerate(deps[:-1]):
        lines.append(
            f'      <step s="{first + k}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" '
            f'depid="{tb_base + d.tb}" deps="{d.step}" hasdep="0"/>'
        )
    src: Loc | None
    dst: Loc | None
    if op.type == "s":
        # the receiver's side: where it stores the chunk
        src, dst = op.src, planner.loc(planner.landed, op.transfer)
    elif op.type in ("r", "rcs"):
        # the sender's side: what it sends
        src, dst = planner.loc(planner.sent, op.transfer), op.dst
    else:
        src, dst = op.src, op.dst
    sbuf, soff = _shift(src, inst, instances)
    dbuf, doff = _shift(dst, inst, instances)
    depid, dstep = (tb_base + deps[-1].tb, deps[-1].step) if deps else (-1, -1)
    lines.append(
        f'      <step s="{op.step}" type="{op.type}" srcbuf="{sbuf}" srcoff="{soff}" dstbuf="{dbuf}" '
        f'dstoff="{doff}" cnt="{op.cnt}" depid="{depid}" deps="{dstep}" hasdep="{int(op.hasdep)}"/>'
    )
    return lines


@dataclass(frozen=True)
class ExportChoice:
    """The settings :func:`export_msccl` settled on, and the XML text."""

    text: str
    channels: int
    inplace: bool
    tried: tuple[str, ...]
    """One line per rejected setting and why (for the log and the CLI's note)."""


def _choose(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str,
    proto: str,
    channels: int | None,
    instances: int,
    inplace: bool | None,
    switches: str,
) -> tuple[_Built, tuple[str, ...]]:
    """The first setting :func:`export_msccl` accepts, built, and the rejected ones."""
    places = [inplace] if inplace is not None else [True, False]
    if channels is not None:
        widths = [channels]
    else:
        widths = []
        c = 1
        while c * instances <= MAX_CHANNELS:
            widths.append(c)
            c *= 2
        widths = widths or [1]
    tried: list[str] = []
    last: ValidationError | None = None
    for place in places:
        for width in widths:
            try:
                built = _build(
                    instance,
                    schedule,
                    dialect=dialect,
                    proto=proto,
                    channels=width,
                    instances=instances,
                    inplace=place,
                    name="ccplan",
                    switches=switches,
                    max_tbs=DEFAULT_MAX_TBS,
                )
            except ValidationError as exc:
                msg = str(exc)
                last = exc
                tried.append(f"channels={width} {'in' if place else 'out-of'}-place: {msg}")
                if msg.startswith("inplace:") and len(places) > 1:
                    break  # the layout, not the width: try out-of-place
                if msg.startswith("steps per thread block") and width != widths[-1]:
                    continue
                if msg.startswith("steps per thread block"):
                    break
                raise
            return built, tuple(tried)
    assert last is not None
    raise last


def export_msccl(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str = "executor",
    proto: str = "Simple",
    channels: int | None = None,
    instances: int = 1,
    inplace: bool | None = None,
    switches: str = "collapse",
) -> ExportChoice:
    """:func:`to_msccl_xml` with the settings the runtime accepts chosen automatically.

    ``inplace=None`` takes the in-place variant where the collective's buffer layout allows it
    (not AllToAll, not a ReduceScatter with chunks out of rank order) and out-of-place
    otherwise. ``channels=None`` takes the fewest channels (1, 2, 4, ...) whose thread blocks
    fit the dialect's ``MSCCL_MAX_NUM_STEPS`` (64 for the executor): chunk ``k`` runs on
    channel ``k mod channels``, so more channels mean fewer steps per thread block. Given
    values are used as they are. Errors that no such choice can cure are raised at once.

    Raises
    ------
    ValidationError
        As :func:`to_msccl_xml`, for the last setting tried.
    """
    built, tried = _choose(
        instance,
        schedule,
        dialect=dialect,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        switches=switches,
    )
    return ExportChoice("".join(_render(built)), built.channels, built.inplace, tried)


@dataclass(frozen=True)
class WrittenExport:
    """What :func:`write_msccl_export` wrote: the file, its size and the settings chosen."""

    path: Path
    bytes: int
    channels: int
    inplace: bool
    tried: tuple[str, ...]
    """One line per rejected setting and why (as :attr:`ExportChoice.tried`)."""


def write_msccl_export(
    path: str | Path,
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str = "executor",
    proto: str = "Simple",
    channels: int | None = None,
    instances: int = 1,
    inplace: bool | None = None,
    switches: str = "collapse",
) -> WrittenExport:
    """:func:`export_msccl`, streamed to ``path`` instead of returned as one string.

    The settings are chosen and every runtime limit checked before the file is opened; the
    XML is then written line by line to a staged file next to ``path`` and renamed into
    place when complete (all or none: a failure or Ctrl-C leaves ``path`` as it was). The
    bytes are those of ``export_msccl(...).text``, but the document never exists in memory
    as a whole, which is what makes a 1,024-GPU schedule exportable in bounded memory.

    Raises
    ------
    ValidationError
        As :func:`export_msccl`; or ``path`` is a directory.
    """
    built, tried = _choose(
        instance,
        schedule,
        dialect=dialect,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        switches=switches,
    )
    size = _stream(path, built)
    return WrittenExport(Path(path), size, built.channels, built.inplace, tried)


def write_msccl_xml(path: str | Path, instance: Instance, schedule: Schedule, **options: Any) -> int:
    """:func:`to_msccl_xml` with the same keyword options, streamed atomically to ``path``.

    Returns
    -------
    int
        Bytes written (the length of ``to_msccl_xml(...)``, which is ASCII).

    Raises
    ------
    ValidationError
        As :func:`to_msccl_xml` (before ``path`` is touched); ``path`` is a directory.
    """
    settings: dict[str, Any] = {
        "dialect": "executor",
        "proto": "Simple",
        "channels": 1,
        "instances": 1,
        "inplace": True,
        "name": "ccplan",
        "switches": "collapse",
        "max_tbs": DEFAULT_MAX_TBS,
    }
    unknown = sorted(set(options) - set(settings))
    if unknown:
        raise ValidationError(f"write_msccl_xml: unknown option(s) {', '.join(unknown)}")
    settings.update(options)
    return _stream(path, _build(instance, schedule, **settings))


def _stream(path: str | Path, built: _Built) -> int:
    """Write the lines of :func:`_render` to a staged file and rename it to ``path``."""
    target = Path(path)
    if target.is_dir():
        raise ValidationError(f"cannot write {str(target)!r}: it is a directory")
    tmp = staging_path(target)
    size = 0
    try:
        # newline="" keeps "\n" as is on every platform: the bytes equal to_msccl_xml's text.
        with tmp.open("w", encoding="ascii", newline="") as fh:
            for line in _render(built):
                fh.write(line)
                size += len(line)
        with sigint_blocked():
            tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return size
