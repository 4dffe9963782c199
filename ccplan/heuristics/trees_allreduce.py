r"""AllReduce from tree packing: the trees ReduceScatter, then the trees AllGather overlapped.

ForestColl's AllReduce is a reduce-scatter by reduce trees followed by an all-gather by
broadcast trees; each half reaches its own throughput limit as ``C`` grows, so their sum
approaches the sum of the limits, which is the physical bound of an AllReduce whose switches
do not reduce wherever its gossip part is the cut of the two halves (DGX-1, NDv2, AMD, tori,
fat trees). Here both halves are built by the ``trees`` engine's own parts:

1. **ReduceScatter**: where switches relay partial sums, the reduction of
   :mod:`~ccplan.heuristics.trees_reduce` (arcs through the relaying switches placed on the
   reversed topology and reflected); where there are none, the ``trees`` AllGather of the
   reversed topology reflected by the same :func:`~ccplan.heuristics.trees_reduce.reflect`
   (one constant per link: capacity and, where :func:`~ccplan.schedule.combining.ports_reflect`
   holds, the ports are kept).
2. **AllGather**: the ``trees`` AllGather of the topology.
3. **Overlap**: the AllGather's sends are re-placed in their own slot order into the slots
   the ReduceScatter leaves free (:func:`overlap_sends`): each as early as its link
   (``omega``) and, single-port, its ports have room, once its sender holds the full sum (the
   owner once the chunk's last partial sum arrived) and its receiver has sent its own partial
   sum on (a copy of the full sum must not be folded into a partial one). The chunks of a
   shard are first renumbered in the order they are reduced, which is the order the trees
   AllGather sends them (:func:`combine`). The concatenation (the AllGather after the
   ReduceScatter's last arrival) is kept where it is shorter. Where both halves saturate
   every link (DGX-1) there is nothing to win; on AMD x2 the ReduceScatter's drain and the
   AllGather's fill overlap by 41 of 1,433 slots at C = 32 and 19 of 9,753 at C = 256.

Both halves are the ``trees`` engine's and :mod:`~ccplan.heuristics.trees_reduce`'s own
functions (their packings kept across chunk counts there, so ``--chunks auto`` pays for the
column generation once per topology). Outages, cut-through switches (the pipeline's
store-and-forward twin reaches here instead) and single-port with unequal delays at a node
are declined (:func:`applies`): the generic reversal of :mod:`ccplan.pipeline.combining`
handles them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ccplan.contract import Outcome, SolveOptions, register, run_constructor
from ccplan.errors import ValidationError
from ccplan.heuristics.trees import trees_schedule
from ccplan.heuristics.trees_reduce import reduction_schedule, reflect
from ccplan.instances.collectives import allgather
from ccplan.instances.combining import reducescatter
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline
from ccplan.schedule.combining import ports_reflect
from ccplan.schedule.core import Schedule
from ccplan.schedule.relays import relaying_switches
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

METHOD = "trees-allreduce"

_RS_SHARE = 0.5
"""Share of the time left that the ReduceScatter half may use (the AllGather gets the rest)."""


def applies(instance: Instance) -> bool:
    """Whether :func:`trees_allreduce_schedule` builds ``instance``: an AllReduce without
    outages on store-and-forward switches whose ports (single-port) the reflection keeps."""
    return (
        instance.collective.kind == "allreduce"
        and not instance.outages
        and not instance.bufferless
        and ports_reflect(instance)
    )


def reducescatter_part(instance: Instance, deadline: Deadline, extra: Any = None) -> Schedule:
    """The ReduceScatter half of the AllReduce ``instance`` (step 1 of the module docstring),
    on ``instance``'s slots.

    Raises
    ------
    ValidationError
        The trees reduction declines (:func:`~ccplan.heuristics.trees_reduce.reduction_schedule`).
    OutOfTimeError
        The deadline passed.
    """
    topo = instance.topology
    chunks = instance.collective.chunks
    rs = replace(instance, collective=reducescatter(topo, chunks))
    if relaying_switches(rs):
        return reduction_schedule(rs, deadline, extra)
    rev = topo.reversed()
    twin = replace(instance, topology=rev, collective=allgather(rev, chunks=chunks), outages=())
    gather = trees_schedule(twin, deadline, extra)
    cols = gather.columns()
    link = rev.links_between(cols["src"], cols["dst"])
    return reflect(rs, cols["slot"], cols["chunk_source"], cols["chunk_index"], link, frozenset())


def _busy(instance: Instance, start: np.ndarray, link: np.ndarray, horizon: int) -> np.ndarray:
    """Sends per (link, slot) over each send's occupancy window, ``horizon`` slots."""
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    out = np.zeros((instance.topology.num_links, horizon), dtype=np.int32)
    for k in range(int(occ.max()) if len(occ) else 0):
        live = occ[link] > k
        np.add.at(out, (link[live], start[live] + k), 1)
    return out


def _ports(instance: Instance, busy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node and slot: sends out of it and receptions into it (from ``busy``)."""
    topo = instance.topology
    pos = topo.node_index
    n = len(topo.node_ids)
    src = np.array([pos[lk.src] for lk in topo.links], dtype=np.int64)
    dst = np.array([pos[lk.dst] for lk in topo.links], dtype=np.int64)
    out = np.zeros((n, busy.shape[1]), dtype=np.int32)
    into = np.zeros((n, busy.shape[1]), dtype=np.int32)
    np.add.at(out, src, busy)
    np.add.at(into, dst, busy)
    return out, into


def allgather_part(instance: Instance, deadline: Deadline, extra: Any = None) -> Schedule:
    """The AllGather half of the AllReduce ``instance`` (step 2 of the module docstring)."""
    chunks = instance.collective.chunks
    ag = replace(instance, collective=allgather(instance.topology, chunks=chunks), outages=())
    return trees_schedule(ag, deadline, extra)


def combine(instance: Instance, rs: Schedule, ag: Schedule) -> Schedule:
    """The AllReduce of a ReduceScatter ``rs`` and an AllGather ``ag`` of ``instance``'s chunks
    (step 3 of the module docstring), unverified.

    A reflected ReduceScatter finishes a shard's chunks in the reverse of the order its
    AllGather on the reversed topology sent them (the last chunk placed there is reduced
    first); the chunks of a shard are interchangeable, so they are renumbered to the order
    in which they are reduced (by the arrival of their last partial sum), which is the order
    in which the trees AllGather sends them, and each broadcast may start as soon as the
    chunk it needs is reduced.
    """
    chunks = instance.collective.chunks
    r = rs.columns()
    lat = np.asarray(instance.latency, dtype=np.int64)
    arrive = r["slot"] + lat[instance.topology.links_between(r["src"], r["dst"])]
    # per shard, its chunks by when their last partial sum arrives
    width = int(r["chunk_source"].max()) + 1 if len(arrive) else 1
    done = np.full(width * chunks, -1, dtype=np.int64)
    np.maximum.at(done, r["chunk_source"] * chunks + r["chunk_index"], arrive)
    rank = np.zeros(width * chunks, dtype=np.int64)
    for owner in range(width):
        part = done[owner * chunks:(owner + 1) * chunks]
        rank[owner * chunks + np.argsort(part, kind="stable")] = np.arange(chunks)
    index = rank[r["chunk_source"] * chunks + r["chunk_index"]]
    rs = Schedule.from_columns(
        slot=r["slot"], chunk_source=r["chunk_source"], chunk_index=index,
        src=r["src"], dst=r["dst"], reduce=r["reduce"], method=rs.method,
    )
    r, a = rs.columns(), ag.columns()
    # the concatenation (the AllGather after the ReduceScatter's last arrival) is always valid
    shift = rs.last_arrival(instance)
    shifted = Schedule.from_columns(
        slot=np.concatenate([r["slot"], a["slot"] + shift]),
        chunk_source=np.concatenate([r["chunk_source"], a["chunk_source"]]),
        chunk_index=np.concatenate([r["chunk_index"], a["chunk_index"]]),
        src=np.concatenate([r["src"], a["src"]]),
        dst=np.concatenate([r["dst"], a["dst"]]),
        reduce=np.concatenate([r["reduce"], np.zeros(len(a["slot"]), dtype=bool)]),
        method=METHOD,
    )
    start = time.perf_counter()
    moved = overlap_sends(instance, rs, ag)
    whole, each = shifted.last_arrival(instance), moved.last_arrival(instance)
    log.info(
        "trees-allreduce: AllGather after ReduceScatter (slot %d): %d slots; send by send: %d (%.2f s)",
        shift, whole, each, time.perf_counter() - start,
    )
    return moved if each < whole else shifted


def overlap_sends(instance: Instance, rs: Schedule, ag: Schedule) -> Schedule:
    """The AllReduce of ``rs`` and ``ag`` with every AllGather send moved as early as its
    inputs allow (step 3 of the module docstring, send by send), unverified.

    The sends of ``ag`` are re-placed in their own slot order into the slots ``rs`` leaves
    free: each at the first slot, not before its sender holds the full sum (the owner once
    the chunk's last partial sum arrived, any other GPU once its copy arrived) nor before the
    receiver has sent its own partial sum on, at which its link (``omega``) and, single-port,
    both ports have room for its ``l`` slots. A slot's fullness is one byte per link and port,
    searched with ``bytearray.find``.
    """
    topo = instance.topology
    lat = np.asarray(instance.latency, dtype=np.int64)
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    cap = np.asarray(instance.link_capacity, dtype=np.int64)
    r, a = rs.columns(), ag.columns()
    r_link = topo.links_between(r["src"], r["dst"])
    a_link = topo.links_between(a["src"], a["dst"])
    r_arrive = r["slot"] + lat[r_link]
    d_rs = int(r_arrive.max()) if len(r_arrive) else 0
    a_span = int((a["slot"] + lat[a_link]).max()) + 1 if len(a_link) else 1
    horizon = d_rs + a_span + int(occ.max()) + 1
    width = max(topo.node_ids) + 1
    chunks = int(max(r["chunk_index"].max(), a["chunk_index"].max())) + 1 if len(a_link) else 1
    # per (chunk, node): the slot from which it holds the full sum, and its last reduction event
    r_chunk = r["chunk_source"] * chunks + r["chunk_index"]
    a_chunk = a["chunk_source"] * chunks + a["chunk_index"]
    done = np.zeros(width * chunks, dtype=np.int64)
    np.maximum.at(done, r_chunk, r_arrive)
    last = np.full(width * chunks * width, -1, dtype=np.int64)
    np.maximum.at(last, r_chunk * width + r["src"], r["slot"])
    np.maximum.at(last, r_chunk * width + r["dst"], r_arrive)
    full_at = np.full(width * chunks * width, -1, dtype=np.int64)
    owners = np.unique(a_chunk)
    full_at[owners * width + owners // chunks] = done[owners]
    count = _busy(instance, r["slot"], r_link, horizon)
    table = [bytearray((count[e] >= cap[e]).astype(np.uint8).tobytes()) for e in range(topo.num_links)]
    counts = [row.tolist() for row in count]
    ports = instance.single_port
    pos = topo.node_index
    if ports:
        p_out, p_in = _ports(instance, count)
        send_port = [bytearray((row >= 1).astype(np.uint8).tobytes()) for row in p_out]
        recv_port = [bytearray((row >= 1).astype(np.uint8).tobytes()) for row in p_in]
    free = [b"\x00" * int(k) for k in range(int(occ.max()) + 1)]
    lat_l, occ_l, cap_l = lat.tolist(), occ.tolist(), cap.tolist()
    full_l, last_l = full_at.tolist(), last.tolist()
    out = np.empty(len(a_link), dtype=np.int64)
    for i, (e, c, u, v) in enumerate(zip(a_link.tolist(), a_chunk.tolist(), a["src"].tolist(),
                                        a["dst"].tolist(), strict=True)):
        k, L = occ_l[e], lat_l[e]
        t = max(full_l[c * width + u], last_l[c * width + v] + 1 - L, 0)
        row, gap = table[e], free[k]
        if ports:
            sp, rp = send_port[pos[u]], recv_port[pos[v]]
            while True:
                t0 = t
                t = row.find(gap, t)
                t = sp.find(gap, t)
                t = rp.find(gap, t)
                if t == t0 or t < 0:
                    break
        else:
            t = row.find(gap, t)
        if t < 0 or t + L >= horizon:
            raise ValidationError("trees-allreduce: the overlap ran past its horizon")
        cnt = counts[e]
        for x in range(t, t + k):
            cnt[x] += 1
            if cnt[x] >= cap_l[e]:
                row[x] = 1
            if ports:
                sp[x] = 1
                rp[x] = 1
        full_l[c * width + v] = t + L
        out[i] = t
    return Schedule.from_columns(
        slot=np.concatenate([r["slot"], out]),
        chunk_source=np.concatenate([r["chunk_source"], a["chunk_source"]]),
        chunk_index=np.concatenate([r["chunk_index"], a["chunk_index"]]),
        src=np.concatenate([r["src"], a["src"]]),
        dst=np.concatenate([r["dst"], a["dst"]]),
        reduce=np.concatenate([r["reduce"], np.zeros(len(a_link), dtype=bool)]),
        method=METHOD,
    )


def trees_allreduce_schedule(instance: Instance, deadline: Deadline, extra: Any = None) -> Schedule:
    """The AllReduce of ``instance`` by trees (module docstring), unverified.

    Raises
    ------
    ValidationError
        The instance is not one :func:`applies` to, or the reduction declines.
    OutOfTimeError
        The deadline passed.
    """
    if not applies(instance):
        raise ValidationError(
            "trees-allreduce: needs an allreduce without outages, store-and-forward switches and "
            "ports the reflection keeps"
        )
    start = time.perf_counter()
    half = Deadline(min(deadline.at, start + _RS_SHARE * deadline.remaining()))
    rs = reducescatter_part(instance, half, extra)
    t_rs = time.perf_counter() - start
    ag = allgather_part(instance, deadline, extra)
    t_ag = time.perf_counter() - start - t_rs
    log.info("trees-allreduce: ReduceScatter %.2f s, AllGather %.2f s", t_rs, t_ag)
    return combine(instance, rs, ag)


@register(METHOD)
def trees_allreduce_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``trees-allreduce``: the AllReduce by trees (module docstring), verified before
    it is handed out (raises :class:`ValidationError` where it does not apply or does not
    verify, so that a portfolio keeps its other candidates) unless
    ``extra["trees_allreduce_verify"]`` is False (a caller that verifies what it keeps: the
    replay of a million sends takes seconds). Status ``feasible``."""
    if instance.collective.kind != "allreduce":
        raise ValidationError(f"{METHOD} schedules allreduce only, got {instance.collective.kind!r}")
    start = time.perf_counter()
    schedule, failed = run_constructor(
        lambda deadline: trees_allreduce_schedule(instance, deadline, options.extra),
        options.time_limit,
        METHOD,
    )
    if failed is not None:
        return failed
    if options.extra.get("trees_allreduce_verify", True):
        report = verify(instance, schedule)
        if not report.ok:
            name = instance.topology.name
            raise ValidationError(f"{METHOD} does not apply to {name!r}: {report.violations[0]}")
    details = {"variant": METHOD, "seconds": time.perf_counter() - start}
    return Outcome(schedule=schedule, status="feasible", details=details)
