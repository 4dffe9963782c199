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

1. **Packing** on the reversed topology. Where every switch relays and many GPUs sit behind
   one (DGX-2's NVSwitch, a leaf of a fat tree), by :func:`pack_arc_trees`: column generation
   over terminal-level arborescences whose *arcs* are whole paths through relaying switches,
   each arc charged on every link of its path (ForestColl's splitting-off accounting, priced
   exactly: a tree may pass one switch many times, so a chain through an NVSwitch, each GPU
   adding its partial sum and sending it on as NCCL's ring does, is a column as well as a
   star); then, among the columns found, the packing of least weighted squared depth at that
   rate. Otherwise (:data:`MAX_PASSES`) by the ``trees`` engine's packing with the loads of
   :func:`~ccplan.heuristics.trees_pack.link_loads` (one partial sum per terminal-level arc
   through a relaying switch).
2. **Placement** of every chunk's arcs (a path from a GPU, or a switch that may reduce,
   through relaying switches to the next such node) in the reversed direction, in a
   reservation table (:class:`_Blocks`: one byte per block of ``l`` slots, so the earliest
   free block is one ``bytearray.find``; the ``trees`` engine's table under single-port), in
   the order ``k / rate - depth``: each hop at the earliest slot after the previous one's
   arrival (a send of ``l`` slots at a multiple of ``l``), an arc after the one that reached
   its tail; two arcs of a chunk through one relaying switch stay there in disjoint slot
   intervals (the switch holds one partial sum of a chunk), and each hop into a switch is
   moved as late as the next hop allows.
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
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.heuristics.mteg import Reservations
from ccplan.heuristics.trees import (
    _WINDOW_BETAS,
    WINDOW_GRAIN,
    WINDOW_GRAIN_COARSE,
    TreePlan,
    _chunks_by_root,
    _stride,
    _ticking,
    _windowed_plan,
    flat_steps,
    plan_trees,
    roots_and_terminals,
    send_columns,
    slot_network,
    window_applies,
)
from ccplan.heuristics.trees_pack import (
    Network,
    Tree,
    _Master,
    _Paths,
    min_arborescence,
    optimal_rate,
    price_rounds,
)
from ccplan.heuristics.trees_reduce_shallow import arc_depth, arc_tree, shallow_arc_trees
from ccplan.instances.collectives import allgather, broadcast
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline, OutOfTimeError
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


ArcTrees = dict[int, list[list[tuple[int, list[int]]]]]
"""Per root id, per tree: its arcs (:func:`_arcs`'s form)."""

_PACK_SHARE = 0.4  # share of the deadline the arc packing may use; the rest places the sends
_RATE_KEPT = 1e-4  # relative rate the depth-minimising solve may give up
_MWU_ETA = 4.0  # steepness of the seed rounds' link lengths (as trees_pack's seeds)


@dataclass
class _ArcPool:
    """A column generation's state, kept for the next instance with the same capacities."""

    optimal: float
    master: _Master
    columns: list[tuple[int, list[tuple[int, list[int]]]]]
    seen: set[tuple[int, tuple[tuple[int, ...], ...]]]


_PACKINGS_KEPT = 2
_ARC_PACKINGS: dict[tuple[Any, ...], _ArcPool] = {}
"""The last column pools by slot network, roots, terminals and gap, newest last: ``--chunks
auto`` solves one topology at C = 1, 2, 4, ..., whose capacities ``omega / l`` stay the same
while the latencies ``L`` change, so the columns are generated once (and go on from where a
deadline stopped them) and only the depth-minimising solve is repeated."""


def pack_arc_trees(
    instance: Instance,
    deadline: Deadline,
    gap: float = 1e-3,
    max_iterations: int = 500,
    seed_rounds: int = 6,
) -> tuple[ArcTrees, dict[int, list[float]], float, float]:
    """Reduce trees of the reversed twin ``instance`` (every switch relays) as terminal-level
    arborescences whose arcs are whole paths through switches, packed by column generation.

    The master LP is :mod:`~ccplan.heuristics.trees_pack`'s (max common rate ``z`` under the
    link capacities ``omega / l``); a column's load on a link is the number of its arcs that
    use it, and the pricing (the cheapest path per terminal pair under the duals, then the
    minimum arborescence on the terminals) prices exactly that load: a tree whose arcs meet in
    a switch is not merged there, so a chain through one switch (each GPU adds its partial sum
    and sends it on, NCCL's ring through an NVSwitch) is a column as well as a star (every GPU
    sends to the owner). The generation stops within ``gap`` of ``x*``, when no tree prices
    out, or at the deadline. A last solve keeps that rate (to :data:`_RATE_KEPT`) and
    minimises the weighted latency depth over the columns found: a pipeline pays its deepest
    tree once (leaf-spine 64 at C = 16: 2,146 -> 2,122 slots for 2,016 of rate term).

    Returns
    -------
    (dict, dict, float, float)
        Arc trees and their weights per root id, the LP's rate and ``x*`` (chunks per slot).
    """
    net = slot_network(instance)
    topo = instance.topology
    pos = topo.node_index
    roots, terminals = roots_and_terminals(instance)
    r_pos = [pos[r] for r in roots]
    t_pos = [pos[t] for t in terminals]
    cap = np.array([float(c) for c in net.cap])
    lat = np.asarray(instance.latency, dtype=float)
    key = (net.src, net.dst, net.cap, tuple(r_pos), tuple(t_pos), gap)
    cached = _ARC_PACKINGS.pop(key, None)
    if cached is None:
        x_star, _ = optimal_rate(net, r_pos, t_pos, deadline)
        cached = _ArcPool(float(x_star), _Master(r_pos, cap), [], set())
    else:
        log.info("trees reduction: the columns of an earlier instance with these capacities (another C)")
    _ARC_PACKINGS[key] = cached
    while len(_ARC_PACKINGS) > _PACKINGS_KEPT:
        _ARC_PACKINGS.pop(next(iter(_ARC_PACKINGS)))
    optimal = cached.optimal
    master, columns, seen = cached.master, cached.columns, cached.seen
    paths = _Paths(net, t_pos)

    def add(rp: int, arcs: list[tuple[int, list[int]]], pi: np.ndarray | None, sigma: float) -> bool:
        loads: dict[int, int] = {}
        for _, path in arcs:
            for e in path:
                loads[e] = loads.get(e, 0) + 1
        if pi is not None and float(sum(pi[e] * k for e, k in loads.items())) >= sigma - 1e-9:
            return False
        key = (rp, tuple(sorted(tuple(p) for _, p in arcs)))
        if key in seen:
            return False
        seen.add(key)
        columns.append((rp, arcs))
        master.add(Tree(rp, tuple(loads)), loads)
        return True

    load = np.zeros(net.num_links)
    master.maximise_rate(len(columns))  # a cached master was left at the depth solve
    for k in range(1, seed_rounds + 1 if not columns else 0):
        for rp in r_pos:
            length = np.exp(np.minimum(_MWU_ETA * load * optimal / (k * cap), 50.0)) / cap
            w, pred = paths.matrix(length)
            i = paths.pos[rp]
            arcs = arc_tree(paths, min_arborescence(w, i), i, pred)
            for _, path in arcs:
                load[path] += 1
            add(rp, arcs, None, 0.0)
        if deadline.expired:
            break
    def price(pi: np.ndarray, sigma: np.ndarray) -> int:
        w, pred = paths.matrix(pi)
        added = 0
        for j, rp in enumerate(r_pos):
            i = paths.pos[rp]
            added += add(rp, arc_tree(paths, min_arborescence(w, i), i, pred), pi, float(sigma[j]))
        return added

    z, weights, _, _, rounds = price_rounds(
        master, master.solve(), price, optimal, gap, deadline, max_iterations
    )
    # among the columns found, the shallowest packing at this rate
    first = z
    master.prefer(first * (1 - _RATE_KEPT), [-arc_depth(arcs, lat) ** 2 for _, arcs in columns])
    z, weights, _, _ = master.solve()
    if z < first * (1 - 2 * _RATE_KEPT):  # the LP lost the rate (numerics): keep the first solve
        master.maximise_rate(len(columns))
        z, weights, _, _ = master.solve()
    log.info("trees reduction: arc packing rate %.6g = %.4f of x* after %d rounds, %d columns",
             z, z / optimal if optimal else 0.0, rounds, len(columns))
    compiled: ArcTrees = {r: [] for r in roots}
    out_w: dict[int, list[float]] = {r: [] for r in roots}
    ids = topo.node_ids
    for (rp, arcs), y in zip(columns, weights.tolist(), strict=True):
        if y > 1e-9:
            compiled[ids[rp]].append([(tail, [int(e) for e in path]) for tail, path in arcs])
            out_w[ids[rp]].append(y)
    for rp in r_pos:
        if not compiled[ids[rp]]:  # a root the LP starved (z = 0): keep its first tree
            compiled[ids[rp]].append(next(a for q, a in columns if q == rp))
            out_w[ids[rp]].append(0.0)
    return compiled, out_w, z, optimal


MAX_PASSES = 4.0
"""Where at most this many GPUs send into any relaying switch (and where some switches may
reduce), the trees are :func:`~ccplan.heuristics.trees.plan_trees`' packing (paths merged in
the pricing, then its shallow phase) and they are kept while their mean arcs through the
busiest relaying switch stay at most this many: AMD x2 has 1.2 (C = 512: 9,619 slots, the
arc packing 9,673), NDv2 x4 3. Above, or with more GPUs behind a switch, the arc packing
(:func:`pack_arc_trees`): the merged pricing does not see a tree that passes one switch many
times (DGX-2 x2: 0.72 of x*), which a star through one switch needs (DGX-2's NVSwitch: 14
arcs a tree; the merged packing with the relayed reflection reached 0.94 of the physical
bound at C = 128 in 478 s, the arc packing 0.991 in 4 s). With switches that may reduce the
arc packing does not apply (its arcs end at GPUs only) and the reduction declines."""
_WINDOW_TIME_MARGIN = 2.0  # a windowed packing starts only with this many times the last one's time left
_REDUCE_SCALES = (1.25, 1.5, 1.0, 2.0)
"""Window scales of the reduction's windowed packings (the ``trees`` engine's are 1, 1.5, 2), in
the order tried while time lasts: AMD x2 ReduceScatter 64 MB at C = 1,024, best over betas 1-3
of the priority placement: 19,649 (scale 1), 19,571 (1.25), 19,605 (1.5), 19,749 (2) slots."""
_REDUCE_BETAS = (1.0, 2.0)  # order weights of the depth per windowed packing, single-port (Python placement)


def _gpus_behind(instance: Instance, relays: frozenset[int]) -> int:
    """The most GPUs that send into one relaying switch of ``instance``."""
    gpus = set(instance.topology.gpus)
    count: dict[int, int] = {}
    for lk in instance.topology.links:
        if lk.dst in relays and lk.src in gpus:
            count[lk.dst] = count.get(lk.dst, 0) + 1
    return max(count.values(), default=0)


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


def _order(
    instance: Instance, compiled: ArcTrees, weights: dict[int, list[float]],
    chunks_of: dict[int, list[int]], picks: dict[int, list[int]], beta: float = 1.0,
) -> list[tuple[int, int]]:
    """``(k, root)`` pairs by ``k / rate - beta depth``: the slot at which the root's ``k``-th
    chunk leaves at its trees' rate, less the latency depth of the tree it rides (the order of
    :func:`ccplan.heuristics.trees._placement_order`, on arc trees); ``beta > 1`` sends deep
    trees further ahead."""
    lat = instance.latency
    keyed: list[tuple[float, int, int]] = []
    for r, idx in chunks_of.items():
        rate = sum(weights[r]) or 1.0  # a starved root (the LP gave it nothing): index order
        deep = [arc_depth(arcs, lat) for arcs in compiled[r]]
        keyed.extend((k / rate - beta * deep[picks[r][k]], k, r) for k in range(len(idx)))
    keyed.sort()
    return [(k, r) for _, k, r in keyed]


class _Table:
    """The full reservation table of the ``trees`` engine (outages and ports included), with
    the calls :func:`_place_chunk` makes: sends of ``l`` slots start on multiples of ``l``."""

    def __init__(self, instance: Instance) -> None:
        self.occ = [int(x) for x in instance.occupancy]
        res = Reservations(instance)
        self._free_start = res.free_start
        self.is_free = res.is_free
        self.reserve = res.reserve

    def earliest(self, e: int, t: int) -> int | None:
        step = self.occ[e]
        t = self._free_start(e, t)
        while t % step:
            t = self._free_start(e, t + step - t % step)
        return t

    def align_down(self, e: int, t: int) -> int:
        return t - t % self.occ[e]

    def latest(self, e: int, lo: int, hi: int) -> int:
        """The latest free start in ``lo .. hi`` (``lo`` is free and aligned)."""
        s = self.align_down(e, hi)
        while s > lo and not self.is_free(e, s):
            s = self.align_down(e, s - 1)
        return max(s, lo)


class _Blocks:
    """A full table without outages or ports, faster than :class:`_Table`: link ``e``'s
    time cut into blocks of ``l`` slots, one byte per block (full or not), so the earliest
    free block is one ``bytearray.find``."""

    def __init__(self, instance: Instance) -> None:
        self.occ = [int(x) for x in instance.occupancy]
        self.omega = [int(x) for x in instance.link_capacity]
        self.full = [bytearray(256) for _ in self.occ]
        self.count: dict[tuple[int, int], int] = {}

    def earliest(self, e: int, t: int) -> int | None:
        step = self.occ[e]
        b = -(-t // step)
        row = self.full[e]
        i = row.find(0, b)
        return (i if i >= 0 else max(b, len(row))) * step

    def align_down(self, e: int, t: int) -> int:
        return t - t % self.occ[e]

    def latest(self, e: int, lo: int, hi: int) -> int:
        """The latest free start in ``lo .. hi`` (``lo`` is free and aligned)."""
        step = self.occ[e]
        row = self.full[e]
        b = hi // step
        if b * step <= lo:
            return lo
        if b >= len(row):
            return b * step
        found = row.rfind(0, lo // step + 1, b + 1)
        return found * step if found >= 0 else lo

    def is_free(self, e: int, t: int) -> bool:
        row = self.full[e]
        b = t // self.occ[e]
        return b >= len(row) or not row[b]

    def reserve(self, e: int, t: int) -> None:
        row = self.full[e]
        b = t // self.occ[e]
        if b >= len(row):
            row.extend(bytes(max(b + 1 - len(row), len(row))))
        if self.omega[e] > 1:  # a link faster than the slot: omega sends per block
            k = self.count.get((e, b), 0) + 1
            self.count[(e, b)] = k
            if k < self.omega[e]:
                return
        row[b] = 1


def _place_chunk(
    table: _Table | _Blocks, arcs: list[tuple[int, list[int]]], release: int, lat: list[int], dst: list[int],
) -> list[int] | None:
    """Start slots of one chunk's hops (arcs in order, hops in path order) in ``table``, the
    root holding the chunk from ``release`` (step 2 of the module docstring)."""
    hold = [release] * (len(arcs) + 1)
    # relaying switch -> this chunk's stays there (disjoint: starts and ends sorted alike)
    stays: dict[int, tuple[list[int], list[int]]] = {}
    out: list[int] = []
    earliest, latest, reserve = table.earliest, table.latest, table.reserve
    for j, (tail, path) in enumerate(arcs, start=1):
        t0 = hold[tail]
        if len(path) == 1:  # no switch on the way: no stay to keep apart
            e = path[0]
            s = earliest(e, t0)
            if s is None:
                return None
            reserve(e, s)
            hold[j] = s + lat[e]
            out.append(s)
            continue
        while True:
            t = t0
            starts = []
            for e in path:
                s = earliest(e, t)
                if s is None:
                    return None
                starts.append(s)
                t = s + lat[e]
            # just in time: each hop into a switch as late as the next hop allows, so a
            # partial sum stays in the switch briefly (fewer clashes with the chunk's other
            # arcs there) and the earlier slot is left to later chunks
            for h in range(len(path) - 2, -1, -1):
                e = path[h]
                starts[h] = latest(e, starts[h], starts[h + 1] - lat[e])
            wait = 0
            for h in range(1, len(path)):
                lo = starts[h - 1] + lat[path[h - 1]]
                here = stays.get(dst[path[h - 1]])
                if here:
                    # the stays that overlap [lo, hi] are those from the first ending at or
                    # after lo to the last starting at or before hi
                    last = bisect_right(here[0], starts[h]) - 1
                    if last >= 0 and here[1][last] >= lo:
                        wait = max(wait, here[1][last] + 1 - lo)
            if not wait:
                break
            t0 = starts[0] + wait
        for h, (e, s) in enumerate(zip(path, starts, strict=True)):
            reserve(e, s)
            if h:
                a = starts[h - 1] + lat[path[h - 1]]
                here = stays.setdefault(dst[path[h - 1]], ([], []))
                k = bisect_right(here[0], a)
                here[0].insert(k, a)
                here[1].insert(k, s)
        hold[j] = t
        out.extend(starts)
    return out


def place_arcs(
    instance: Instance, compiled: ArcTrees, weights: dict[int, list[float]], deadline: Deadline,
    beta: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Columns ``(slot, root, index, link)`` of every chunk's arcs placed on ``instance`` (the
    reversed twin) in the full reservation table, step 2 of the module docstring; root
    ``r``'s chunks ride its trees ``compiled[r]`` in proportion to ``weights[r]``, placed in
    the order of :func:`_order` with its ``beta``."""
    lat = [int(x) for x in instance.latency]
    dst = [lk.dst for lk in instance.topology.links]
    fast = not (instance.single_port or instance.outages)
    table: _Table | _Blocks = _Blocks(instance) if fast else _Table(instance)
    chunks_of = _chunks_by_root(instance)
    picks = {r: _stride(weights[r], len(idx)) for r, idx in chunks_of.items()}
    order = _order(instance, compiled, weights, chunks_of, picks, beta)
    slot_c: list[int] = []
    root_c: list[int] = []
    index_c: list[int] = []
    link_c: list[int] = []
    def note(n_done: int) -> None:
        log.info("trees: placed the arcs of %d of %d chunks", n_done, len(order))

    for _, (k, r) in _ticking(order, deadline, note):
        arcs = compiled[r][picks[r][k]]
        starts = _place_chunk(table, arcs, 0, lat, dst)
        assert starts is not None  # the full table always has room
        slot_c.extend(starts)
        for _, path in arcs:
            link_c.extend(path)
        root_c.extend([r] * len(starts))
        index_c.extend([chunks_of[r][k]] * len(starts))
    as_array = np.asarray
    return (as_array(slot_c, dtype=np.int64), as_array(root_c, dtype=np.int64),
            as_array(index_c, dtype=np.int64), as_array(link_c, dtype=np.int64))


def _arc_steps(arcs: list[tuple[int, list[int]]]) -> list[tuple[int, int]]:
    """An arc tree as the ``trees`` engine's steps ``(link, tail)``: each arc a chain of hops,
    its first hop after the step that brought its tail (:func:`~ccplan.heuristics.trees.
    flat_steps`)."""
    steps: list[tuple[int, int]] = []
    held = [0]  # per hold index (root, then each arc's head): the step that brought it, + 1
    for tail, path in arcs:
        prev = held[tail]
        for e in path:
            steps.append((e, prev))
            prev = len(steps)
        held.append(prev)
    return steps


def place_arcs_by_priority(
    instance: Instance, compiled: ArcTrees, weights: dict[int, list[float]], relays: frozenset[int],
    beta: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`place_arcs`' columns from list scheduling by per-link priority instead of the
    chunk order (:func:`~ccplan.heuristics.trees_jit.place_by_priority`, key ``k / rate - beta
    x`` the latency left below the send, each arc's hops a chain of steps), a relaying switch
    holding one partial sum of a chunk at a time; None under single-port or outages (the
    compiled table has neither) or when the horizon guessed from the rate is too short twice
    over."""
    from ccplan.heuristics.trees_jit import place_by_priority, steps_left

    if instance.single_port or instance.outages:
        return None
    topo = instance.topology
    pos = topo.node_index
    chunks_of = _chunks_by_root(instance)
    picks = {r: _stride(weights[r], len(idx)) for r, idx in chunks_of.items()}
    tree_id, step_ptr, link_arr, tail_arr = flat_steps(
        {r: [_arc_steps(arcs) for arcs in trees] for r, trees in compiled.items()}
    )
    order = [(k, r) for r, idx in chunks_of.items() for k in range(len(idx))]
    tree_of = np.array([tree_id[(r, picks[r][k])] for k, r in order], dtype=np.int64)
    rates = {r: sum(weights[r]) or 1.0 for r in chunks_of}
    release = np.array([k / rates[r] for k, r in order], dtype=np.float64)
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    lat = np.asarray(instance.latency, dtype=np.int64)
    omega = np.asarray(instance.link_capacity, dtype=np.int64)
    below = steps_left(step_ptr, link_arr, tail_arr, lat)
    left = beta * below
    relay_pos = {pos[v] for v in relays}
    into = np.array([pos[lk.dst] if pos[lk.dst] in relay_pos else -1 for lk in topo.links], dtype=np.int64)
    out_of = np.array([pos[lk.src] if pos[lk.src] in relay_pos else -1 for lk in topo.links], dtype=np.int64)
    sizes = np.diff(step_ptr)[tree_of]
    total = int(sizes.sum())
    most = max((len(v) for v in chunks_of.values()), default=0)
    rate = min(rates.values(), default=1.0)
    deepest = int(below.max(initial=0))
    horizon = 2 * int(most / rate) + 4 * deepest + 64
    out = np.zeros(total, dtype=np.int64)
    for _ in range(2):
        placed = place_by_priority(tree_of, release, step_ptr, link_arr, tail_arr, left, occ, lat, omega,
                                   horizon, out, into, out_of)
        if placed == total:
            break
        horizon *= 4
    else:
        return None
    root_col, index_col, link_col = send_columns(order, chunks_of, step_ptr, tree_of, link_arr)
    return out, root_col, index_col, link_col


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
    compiled: ArcTrees | None = None
    plain: TreePlan | None = None  # the trees engine's packing, when it is the one placed
    if instance.reducing_switches or _gpus_behind(instance, relays) <= MAX_PASSES:
        plan = plan_trees(twin, deadline, extra, frozenset(pos[v] for v in relays))
        passes = serial_passes(twin, plan, relays)
        if passes <= MAX_PASSES:
            plain = plan
            compiled = _arcs(twin, plan, relays)
            weights = {r: [t.weight for t in plan.packing.trees[pos[r]]] for r in compiled}
        elif instance.reducing_switches:
            raise ValidationError(
                f"trees reduction: {passes:.1f} arcs of a tree pass one relaying switch on average "
                f"(more than {MAX_PASSES}): their partial sums would queue in its one buffer"
            )
    if compiled is None:
        share = Deadline(min(deadline.at, time.perf_counter() + _PACK_SHARE * deadline.remaining()))
        compiled, weights, _, _ = pack_arc_trees(twin, share, float((extra or {}).get("trees_gap", 1e-3)))
    compiled, weights = _shallower(twin, slot_network(twin), compiled, weights, deadline, extra)
    started = time.perf_counter()
    slot, root, index, link = place_arcs(twin, compiled, weights, deadline)
    if plain is not None:
        slot, root, index, link = _windowed(twin, plain, relays, deadline, extra, (slot, root, index, link),
                                            time.perf_counter() - started)
    return reflect(instance, slot, root, index, link, relays)


_SHALLOW_SHARE = 0.25  # share of the time left that the arc trees' shallow phase may use


def _shallower(
    twin: Instance, net: Network, compiled: ArcTrees, weights: dict[int, list[float]], deadline: Deadline,
    extra: Any,
) -> tuple[ArcTrees, dict[int, list[float]]]:
    """``compiled`` and ``weights``, or arc trees of the same rate and less weighted squared
    depth on ``net``'s capacities (:func:`~ccplan.heuristics.trees_reduce_shallow.
    shallow_arc_trees`), unless ``extra.trees_shallow`` is False."""
    if not (extra or {}).get("trees_shallow", True):
        return compiled, weights
    pos = twin.topology.node_index
    ids = twin.topology.node_ids
    _, terminals = roots_and_terminals(twin)
    share = Deadline(min(deadline.at, time.perf_counter() + _SHALLOW_SHARE * deadline.remaining()))
    trees, tree_w = shallow_arc_trees(
        net, np.asarray(twin.latency, dtype=float), {pos[r]: v for r, v in compiled.items()},
        {pos[r]: v for r, v in weights.items()}, [pos[t] for t in terminals], share,
    )
    return {ids[p]: v for p, v in trees.items()}, {ids[p]: v for p, v in tree_w.items()}


def _window_net(cut_for: Any, scale: float) -> Network:
    """The windowed capacities at ``scale`` (the LP takes them as floats: the grain of the
    exact max-flows does not matter)."""
    try:
        return cut_for(scale, WINDOW_GRAIN)
    except ValueError:  # "capacities too fine for exact max-flows"
        return cut_for(scale, WINDOW_GRAIN_COARSE)


def _windowed(
    twin: Instance, plan: TreePlan, relays: frozenset[int], deadline: Deadline, extra: Any,
    placed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], seconds: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``placed`` or a shorter placement of the twin from packings on windowed capacities
    (the ``trees`` engine's step 6, :func:`~ccplan.heuristics.trees_shallow.windowed_network`),
    their arc trees made shallow (:func:`_shallower`) and placed by per-link priority
    (:func:`place_arcs_by_priority`, betas :data:`_WINDOW_BETAS`; under single-port, in the
    order of :func:`_order` with betas :data:`_REDUCE_BETAS`). Only where latency counts
    (:func:`~ccplan.heuristics.trees.window_applies`), ``extra.trees_windowed`` is not False,
    the run is not a ``--chunks auto`` probe, and the arc trees keep within
    :data:`MAX_PASSES`. A scale starts only with :data:`_WINDOW_TIME_MARGIN` times the last
    one's time left (the first estimated from ``seconds``, the first placement's), so the time
    limit still holds. AMD x2 ReduceScatter 64 MB, C = 1,024: 20,049 slots in the order
    placement of the shallow trees, 19,605 at scale 1.5 and beta 3 (19,877 in the order
    placement at best)."""
    if not (extra or {}).get("trees_windowed", True) or (extra or {}).get("auto_probe"):
        return placed  # turned off, or a --chunks auto probe (the trees engine's rule)
    cut_for = window_applies(twin, plan)
    if cut_for is None:
        return placed
    pos = twin.topology.node_index
    lat = twin.latency

    def last(cols: tuple[np.ndarray, ...]) -> int:
        return int((cols[0] + lat[cols[3]]).max()) if len(cols[0]) else 0

    best, best_slots = placed, last(placed)
    start, what = best_slots, "kept"
    cost = seconds + plan.packing.seconds
    placing = seconds  # the last placement's seconds (the first estimated by the order placement's)
    compiled_table = not (twin.single_port or twin.outages)
    try:
        for scale in _REDUCE_SCALES:
            if deadline.remaining() < _WINDOW_TIME_MARGIN * cost:
                raise OutOfTimeError("no time for another windowed packing")
            began = time.perf_counter()
            alt = _windowed_plan(twin, deadline, extra, frozenset(pos[v] for v in relays), cut_for, scale)
            if alt is None or serial_passes(twin, alt, relays) > MAX_PASSES:
                continue
            compiled = _arcs(twin, alt, relays)
            weights = {r: [t.weight for t in alt.packing.trees[pos[r]]] for r in compiled}
            net = _window_net(cut_for, scale)
            compiled, weights = _shallower(twin, net, compiled, weights, deadline, extra)
            for beta in _WINDOW_BETAS if compiled_table else _REDUCE_BETAS:
                if deadline.remaining() < _WINDOW_TIME_MARGIN * placing:
                    # a compiled placement does not look at the deadline: AMD x3 ReduceScatter
                    # 64 MB ended at 61.1 s of a 60 s limit
                    raise OutOfTimeError("no time for another windowed placement")
                placed_at = time.perf_counter()
                found = (place_arcs_by_priority(twin, compiled, weights, relays, beta) if compiled_table
                         else place_arcs(twin, compiled, weights, deadline, beta))
                placing = time.perf_counter() - placed_at
                if found is None:
                    continue
                slots = last(found)
                if slots < best_slots:
                    how = "priority" if compiled_table else "order"
                    best, best_slots, what = found, slots, f"scale {scale:g}, {how} beta {beta:g}"
            cost = time.perf_counter() - began
    except OutOfTimeError:
        pass
    log.info("trees reduction: windowed packings: %s, %d -> %d slots", what, start, best_slots)
    return best
