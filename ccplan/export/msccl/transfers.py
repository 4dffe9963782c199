"""A schedule's GPU-to-GPU transfers, switch relays collapsed (the package doc, "Switches").

:func:`logical_transfers` gives them as objects; the exporter reads them as numpy columns
(:class:`_Transfers`) and checks that both ends of every connection list them in the same
(FIFO) order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import SWITCH_POLICIES
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


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
        partial sum that changes at its origin while it is in the switch; a partial sum
        reduced in a switch (MSCCL has no in-network reduction).
    """
    if switches not in SWITCH_POLICIES:
        raise ValidationError(f"switches must be one of {SWITCH_POLICIES}, got {switches!r}")
    topo = instance.topology
    kind = topo.kind
    rank = {g: r for r, g in enumerate(topo.gpus)}
    latency = instance.latency
    link_index = topo.link_index
    # (switch, chunk) -> arrivals: (usable from, bundle). A bundle lists the GPU-level parts the
    # switch's copy is made of, each (origin GPU, switches crossed, first-hop slot): one part,
    # since a schedule that reduces in a switch is refused (MSCCL cannot, and splitting the sum
    # into its parts would move more data than the schedule's time accounts for).
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
                raise ValidationError(
                    f"switches: {send.describe()} adds a partial sum in switch {send.dst}; MSCCL XML "
                    "cannot reduce in a switch (plan without --switch-reduce)"
                )
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
