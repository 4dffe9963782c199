r"""ReduceScatter and Reduce from tree packing when switches cannot add partial sums.

The time reversal of :mod:`ccplan.pipeline.combining` turns an AllGather on the reversed
topology into a ReduceScatter. A tree of the ``trees`` engine often branches in a switch (the
switch stores the chunk and copies it to two GPUs: one send into it, two out); reversed, two
partial sums enter the switch, and a switch that cannot reduce relays both on
(:mod:`ccplan.schedule.relays`), so the link out of it carries two sends where the AllGather
had one. On AMD x2 a quarter of the chunks branched in a NIC switch, the NIC uplinks are the
saturated cut, and the relayed reversal was 37 % above the bound at C = 32 (the relays' own
placement also scans slot by slot: minutes at C = 128).

Here the reduction is built as what it is:

1. **Packing** on the reversed topology with the loads of
   :func:`~ccplan.heuristics.trees_pack.link_loads`: a link into a relaying switch carries
   one partial sum per terminal-level arc through it (ForestColl's splitting-off accounting),
   so the rate is the optimal one wherever splitting-off applies.
2. **Placement** of every chunk's *arcs* (a path from a GPU, or a switch that may reduce,
   through relaying switches to the next such node) in the reversed direction, in the
   reservation table of the ``trees`` engine, in its chunk order: each hop at the earliest
   slot after the previous one's arrival (a send of ``l`` slots at a multiple of ``l``), an
   arc after the one that reached its tail; two arcs of a chunk through one relaying switch
   stay there in disjoint slot intervals (the switch holds one partial sum of a chunk).
3. **Reflection** (:mod:`ccplan.pipeline.combining`'s module docstring): the send in slot
   ``t`` on the reversed link ``e`` becomes the send in ``D - t - L_e`` on link ``e``, ``D``
   the last arrival; a hop into a relaying switch is a copy, every other a
   receive-and-reduce. Per link this is one reflection, so capacity holds; a node's partial
   sums arrive before the slot in which it sends its own (the arcs out of it left after the
   arc into it arrived), and the stays at a switch stay disjoint.

Single-port with unequal delays at a node and outages are left to the generic reversal
(:func:`applies` says False).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.heuristics.mteg import Reservations
from ccplan.heuristics.trees import (
    _PROGRESS_EVERY,
    TreePlan,
    _chunks_by_root,
    _placement_order,
    _stride,
    plan_trees,
)
from ccplan.instances.collectives import allgather, broadcast
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline
from ccplan.schedule.combining import ports_reflect
from ccplan.schedule.core import Schedule
from ccplan.schedule.relays import relaying_switches

log = logging.getLogger(__name__)

KINDS = ("reducescatter", "reduce")


def applies(instance: Instance) -> bool:
    """Whether :func:`reduction_schedule` builds ``instance``: a ReduceScatter or Reduce with
    switches that cannot reduce, no outages, and (under single-port) one ``delta`` on the
    links out of every node and one on those into it (the reflection keeps the ports)."""
    if instance.collective.kind not in KINDS or instance.outages or instance.bufferless:
        return False
    if not relaying_switches(instance):
        return False
    return ports_reflect(instance)


def _twin(instance: Instance) -> Instance:
    """The AllGather / Broadcast of ``instance`` on the reversed topology."""
    coll = instance.collective
    rev = instance.topology.reversed()
    if coll.kind == "reducescatter":
        twin = allgather(rev, chunks=coll.chunks)
    else:
        twin = broadcast(rev, chunks=coll.chunks, root=coll.root)
    return replace(instance, topology=rev, collective=twin, outages=())


def _arcs(
    instance: Instance, plan: TreePlan, relays: frozenset[int]
) -> dict[int, list[list[tuple[int, list[int]]]]]:
    """Per root id, per tree: its arcs as ``(index of the tail's hold time, links)``, in an
    order in which every arc comes after the arc into its tail (the root holds index 0, the
    head of the j-th arc index j + 1)."""
    topo = instance.topology
    out: dict[int, list[list[tuple[int, list[int]]]]] = {}
    for r_pos, trees in plan.packing.trees.items():
        r = plan.node_ids[r_pos]
        per_tree = []
        for tree in trees:
            into: dict[int, int] = {}  # node -> tree link into it
            where = {r: 0}
            arcs: list[tuple[int, list[int]]] = []
            for e in tree.links:
                a, b = topo.links[e].src, topo.links[e].dst
                into[b] = e
                if b in relays:
                    continue
                path = [e]
                while a in relays:
                    path.append(into[a])
                    a = topo.links[into[a]].src
                path.reverse()
                where[b] = len(arcs) + 1
                arcs.append((where[a], path))
            per_tree.append(arcs)
        out[r] = per_tree
    return out


MAX_PASSES = 4.0
"""Mean arcs of a tree through its busiest relaying switch above which :func:`reduction_schedule`
declines: the partial sums of a chunk pass a switch one at a time, so a star through one
switch (DGX-2's NVSwitch: 14 arcs per tree) serialises each chunk's reduction (0.72 of the
physical bound at C = 128 on DGX-2 x2, the relayed reflection 0.94); AMD x2 has 1.2, NDv2 x4
3 (0.998 of the bound at C = 64, the relayed reflection 0.937)."""


def serial_passes(instance: Instance, plan: TreePlan, relays: frozenset[int]) -> float:
    """Mean over the trees, weighted by their rates, of the number of arcs through the tree's
    busiest relaying switch (0 when no tree passes one)."""
    topo = instance.topology
    total = weight = 0.0
    pos = topo.node_index
    for r, per_tree in _arcs(instance, plan, relays).items():
        for tree, arcs in zip(plan.packing.trees[pos[r]], per_tree, strict=True):
            count: dict[int, int] = {}
            for _, path in arcs:
                for e in path[1:]:
                    count[topo.links[e].src] = count.get(topo.links[e].src, 0) + 1
            total += tree.weight * max(count.values(), default=0)
            weight += tree.weight
    return total / weight if weight > 0 else 0.0


def place_arcs(
    instance: Instance, plan: TreePlan, relays: frozenset[int], deadline: Deadline
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Columns ``(slot, root, index, link)`` of every chunk's arcs placed on ``instance`` (the
    reversed twin), step 2 of the module docstring."""
    lat = [int(x) for x in instance.latency]
    occ = [int(x) for x in instance.occupancy]
    dst = [lk.dst for lk in instance.topology.links]
    res = Reservations(instance)
    free_start = res.free_start
    is_free = res.is_free
    reserve = res.reserve
    compiled = _arcs(instance, plan, relays)
    chunks_of = _chunks_by_root(instance)
    picks = {}
    pos = instance.topology.node_index
    for r, idx in chunks_of.items():
        picks[r] = _stride([t.weight for t in plan.packing.trees[pos[r]]], len(idx))
    order = _placement_order(instance, plan, chunks_of, picks)
    slot_c: list[int] = []
    root_c: list[int] = []
    index_c: list[int] = []
    link_c: list[int] = []
    last_note = time.perf_counter()

    def earliest(e: int, t: int) -> int:
        step = occ[e]
        t = free_start(e, t)
        while t % step:
            t = free_start(e, t + step - t % step)
        return t

    for n_done, (k, r) in enumerate(order):
        if n_done % 256 == 0:
            deadline.check()
            now = time.perf_counter()
            if now - last_note >= _PROGRESS_EVERY:
                log.info("trees: placed the arcs of %d of %d chunks", n_done, len(order))
                last_note = now
        i = chunks_of[r][k]
        arcs = compiled[r][picks[r][k]]
        hold = [0] * (len(arcs) + 1)
        stays: dict[int, list[tuple[int, int]]] = {}  # relaying switch -> this chunk's stays
        for j, (tail, path) in enumerate(arcs, start=1):
            t0 = hold[tail]
            while True:
                t = t0
                starts = []
                for e in path:
                    s = earliest(e, t)
                    starts.append(s)
                    t = s + lat[e]
                # just in time: each hop into a switch as late as the next hop allows, so a
                # partial sum stays in the switch briefly (fewer clashes with the chunk's
                # other arcs there) and the earlier slot is left to later chunks
                for h in range(len(path) - 2, -1, -1):
                    e = path[h]
                    s = starts[h + 1] - lat[e]
                    s -= s % occ[e]
                    while s > starts[h] and not is_free(e, s):
                        s -= occ[e]
                    starts[h] = max(s, starts[h])
                wait = 0
                for h in range(1, len(path)):
                    lo = starts[h - 1] + lat[path[h - 1]]
                    hi = starts[h]
                    for a, b in stays.get(dst[path[h - 1]], ()):
                        if lo <= b and hi >= a:
                            wait = max(wait, b + 1 - lo)
                if not wait:
                    break
                t0 = starts[0] + wait
            for h, (e, s) in enumerate(zip(path, starts, strict=True)):
                reserve(e, s)
                if h:
                    stays.setdefault(dst[path[h - 1]], []).append((starts[h - 1] + lat[path[h - 1]], s))
            hold[j] = t
            slot_c.extend(starts)
            link_c.extend(path)
            root_c.extend([r] * len(path))
            index_c.extend([i] * len(path))
    as_array = np.asarray
    return (as_array(slot_c, dtype=np.int64), as_array(root_c, dtype=np.int64),
            as_array(index_c, dtype=np.int64), as_array(link_c, dtype=np.int64))


def reflect(
    instance: Instance, slot: np.ndarray, root: np.ndarray, index: np.ndarray, link: np.ndarray,
    relays: frozenset[int], method: str = "trees",
) -> Schedule:
    """The reduction on ``instance``'s topology from sends placed on its reversed twin (step 3
    of the module docstring), shifted so that the first send is in slot 0."""
    topo = instance.topology
    lat = np.asarray(instance.latency, dtype=np.int64)[link]
    if not len(slot):
        return Schedule((), method=method)
    end = int((slot + lat).max())
    out = end - slot - lat
    out -= int(out.min())
    src = np.array([lk.src for lk in topo.links], dtype=np.int64)[link]
    dst = np.array([lk.dst for lk in topo.links], dtype=np.int64)[link]
    into_relay = np.isin(dst, np.fromiter(relays, dtype=np.int64, count=len(relays)))
    return Schedule.from_columns(
        slot=out, chunk_source=root, chunk_index=index, src=src, dst=dst, method=method,
        reduce=~into_relay,
    )


def reduction_schedule(instance: Instance, deadline: Deadline, extra: Any = None) -> Schedule:
    """The ReduceScatter or Reduce of ``instance`` (module docstring).

    Raises
    ------
    ValidationError
        The instance is not one :func:`applies` to.
    OutOfTimeError
        The deadline passed.
    """
    if not applies(instance):
        raise ValidationError(
            "trees reduction: needs a reducescatter or reduce with switches that cannot reduce, "
            "no outages, store-and-forward switches and ports the reflection keeps"
        )
    twin = _twin(instance)
    relays = relaying_switches(instance)
    pos = twin.topology.node_index
    plan = plan_trees(twin, deadline, extra, frozenset(pos[v] for v in relays))
    passes = serial_passes(twin, plan, relays)
    if passes > MAX_PASSES:
        raise ValidationError(
            f"trees reduction: {passes:.1f} arcs of a tree pass one relaying switch on average "
            f"(more than {MAX_PASSES}): their partial sums would queue in its one buffer"
        )
    slot, root, index, link = place_arcs(twin, plan, relays, deadline)
    return reflect(instance, slot, root, index, link, relays)
