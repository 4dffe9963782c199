r"""Engine ``trees``: pipelined spanning-tree packing (ForestColl's method) in the slot model.

1. **Rate.** The slot model's link capacity is ``omega / l`` chunks per slot. The optimal
   common rate ``x*`` (chunks per slot per root) of AllGather (roots: every GPU) or Broadcast
   (root: the root) is computed exactly by max-flows (:func:`~ccplan.heuristics.trees_pack.
   optimal_rate`): ``1 / x* = max_S |S ∩ R| / B+(S)`` over node sets ``S`` leaving a GPU out.
2. **Packing.** Trees per root with weights whose sum per root is the rate, by column
   generation (:func:`~ccplan.heuristics.trees_pack.pack_trees`), or one load-balanced
   shortest-path tree per root on large instances.
3. **Slots.** Chunk ``i`` of root ``r`` rides one of ``r``'s trees, chosen by stride
   scheduling so that every prefix of chunk indices splits over the trees in proportion to
   their weights. Chunks are placed in the order (index, root), and each tree link's send at
   the earliest slot at which the sender holds the chunk and the link (and, under
   ``single_port``, both ports) has room, in a reservation table that knows the outages: the
   chunks of a tree follow each other down it (pipelining), and links shared by several trees
   are shared in the proportion of the chunks the trees carry. Without outages or
   single-port constraints the placement is compiled (:mod:`~ccplan.heuristics.trees_jit`:
   the same sends, a second for a million).

4. **Shallow trees** (:mod:`~ccplan.heuristics.trees_shallow`): at the optimal rate, a second
   LP phase trades the packing's trees for shallower ones, since a pipelined schedule pays the
   latency depth of its deepest tree once. Where that depth is a large share of the
   makespan (small sizes: alpha against few slots of transfer), a depth cap trades rate
   for depth, keeping the cap with the least ``C / z + depth`` slots
   (:func:`~ccplan.heuristics.trees_shallow.latency_capped_packing`).
5. **Periodic copies** (:mod:`~ccplan.heuristics.trees_period`): with integer chunk counts
   per tree for a period of ``P`` slots, one group of chunks is placed in a modulo table and
   copied ``ceil(C / n)`` times, so large ``C`` costs as little as one group; ``"auto"`` uses
   it above :data:`_FULL_TABLE_SENDS` sends (:data:`_FULL_TABLE_SENDS_COMPILED` where the
   compiled placement applies) and step 3 (the full table, 0.5-2 % shorter where both were
   measured, 7 % on AMD x2) below.

6. **Windowed packings, priority placement** (where latency counts: some link's window, the
   slots left after the latency from the nearest root to it and from it to the nearest
   terminal, is 1 % or more shorter than ``C / x*``): a packing at ``x*`` saturates every link
   of the binding cut, NIC links whose window is several alphas shorter than the xGMI links'
   beside them included, so the schedule ends a NIC path late. Packings on the windowed
   capacities (:func:`~ccplan.heuristics.trees_shallow.windowed_network`, the physical bound's
   ``windowed`` part in slots, at three scales) leave those links the slack their window
   lacks; they are placed by list scheduling with a per-link priority
   (:func:`~ccplan.heuristics.trees_jit.place_by_priority`: at each block a link starts the
   ready sends of least ``k / rate - beta x latency left``), so the long ways cross the shared
   links first. The shortest of all placements is kept (AMD x2 AllGather 64 MB, C = 1,024:
   19,929 -> 19,565 slots, 0.956 -> 0.973 of the physical bound; the ReduceScatter of
   :mod:`~ccplan.heuristics.trees_reduce` takes the windowed packings with its own order).

The makespan is about ``C / z + depth`` slots for rate ``z``: the throughput term is within the
packing's ratio of the limit and the fill term (tree depth times ``L``) is paid once, so the
ratio to the throughput limit approaches ``z / x*`` as ``C`` grows.

ReduceScatter, Reduce and AllReduce come from :mod:`ccplan.pipeline.combining` (this is a
data-movement engine): the trees of the reversed topology, reversed in time (reduce trees),
and for AllReduce the reduce trees followed by the broadcast trees, overlapped there.
Cut-through instances are solved on their store-and-forward twin by the registry.

``options.extra``: ``trees_gap`` (the packing stops within this relative gap of ``x*``,
default 1e-3), ``trees_pack`` (``"auto"``, ``"lp"`` or ``"greedy"``), ``trees_shallow``
(default True: the second packing phase, :mod:`~ccplan.heuristics.trees_shallow`),
``trees_capped`` (default True: the depth cap of step 4 for AllGather and Broadcast, per
chunk count, kept when its placement is shorter),
``trees_placement`` (``"auto"``, ``"periodic"`` or ``"full"``, see below), ``trees_symmetry``
(default True: a 2-D torus AllGather is scheduled by translation of one root's schedule,
:mod:`~ccplan.heuristics.trees_symmetry`), ``trees_windowed`` (default True: step 6).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from ccplan.contract import Outcome, SolveOptions, register, run_constructor
from ccplan.errors import ValidationError
from ccplan.heuristics.mteg import Reservations
from ccplan.heuristics.trees_pack import (
    PACK_LIMIT,
    Network,
    Packing,
    greedy_trees,
    integral_counts,
    optimal_rate,
    pack_trees,
)
from ccplan.heuristics.trees_period import copy_pattern, min_period, place_pattern
from ccplan.heuristics.trees_shallow import (
    WINDOW_GRAIN,
    WINDOW_GRAIN_COARSE,
    depth,
    latency_capped_packing,
    shallow_packing,
    window_cuts,
    windowed_network,
)
from ccplan.heuristics.trees_symmetry import symmetric_schedule
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline, OutOfTimeError
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = ("allgather", "broadcast")
"""Collectives the engine schedules directly (the combining ones go through reversal)."""

_PROGRESS_EVERY = 5.0  # seconds between progress notes while placing chunks
_PACK_SHARE = 0.5  # share of the time limit the packing may use; the rest places the sends
_SHALLOW_SHARE = 0.3  # share of what is left for the shallow phase (trees_shallow)
_CAPPED_SHARE = 0.2  # share of what is left for the depth caps (trees_shallow.latency_capped_packing)
_COUNTS_SHARE = 0.2  # share of what is left for the integer chunk counts per tree
_PERIOD_SHARE = 0.3  # share of what is left for the periodic schedule's sizes
_PERIOD_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)  # chunks per root and period
_FULL_TABLE_SENDS = 1_500_000  # sends above which the periodic schedule replaces the full table
_FULL_TABLE_SENDS_COMPILED = 6_000_000  # the same for the compiled placement (trees_jit)
_WINDOW_SCALES = (1.0, 1.5, 2.0)  # window cuts tried by step 6 (multiples of a + L + b)
_WINDOW_BETAS = (1.0, 2.0, 3.0)  # priority weights of the latency left, per windowed packing
_WINDOW_MIN_SHARE = 0.01  # step 6 runs when some link's window is this share shorter than C / x*
_WINDOW_MIN_SLOTS = 256  # ... and C / x* is at least this many slots (below, slot rounding is the fill)
_WINDOW_LEAST_SHARE = 0.5  # ... and none is cut below this share (latency dominates: step 4's regime)
_COMPILED_BLOCKS = 50_000_000  # link blocks (12 bytes each) above which the Python placement runs


_PACKINGS_KEPT = 4
_PACKINGS: dict[tuple[Any, ...], tuple[Packing, Packing | None]] = {}
"""The last packings (first phase, last shallow phase) by slot network, roots, terminals and
gap, newest last: ``--chunks auto`` solves one topology at C = 1, 2, 4, ..., whose slot
capacities ``omega / l`` are the same wherever the occupancies keep their ratios, so the
column generation runs once and each shallow phase starts from the previous one's trees
(the latencies ``L`` change with ``C``; the rate does not)."""


def slot_network(instance: Instance) -> Network:
    """The instance's topology with slot-model capacities ``omega / l`` (chunks per slot),
    nodes by their position in ``topology.node_ids``."""
    topo = instance.topology
    pos = topo.node_index
    occ = instance.occupancy
    omega = instance.link_capacity
    return Network(
        n=topo.num_nodes,
        src=tuple(pos[lk.src] for lk in topo.links),
        dst=tuple(pos[lk.dst] for lk in topo.links),
        cap=tuple(Fraction(int(omega[e]), int(occ[e])) for e in range(topo.num_links)),
    )


def bandwidth_network(topology: Any) -> Network:
    """The topology with its link bandwidths (GB/s, as exact rationals) as capacities."""
    pos = topology.node_index
    return Network(
        n=topology.num_nodes,
        src=tuple(pos[lk.src] for lk in topology.links),
        dst=tuple(pos[lk.dst] for lk in topology.links),
        cap=tuple(Fraction(lk.bandwidth_GBps).limit_denominator(10**6) for lk in topology.links),
    )


def roots_and_terminals(instance: Instance) -> tuple[list[int], list[int]]:
    """Root and terminal node ids of an AllGather or Broadcast instance.

    Raises
    ------
    ValidationError
        Another collective, or one whose chunks are not each held by exactly one GPU.
    """
    coll = instance.collective
    if coll.kind not in KINDS:
        raise ValidationError(
            f"method 'trees' schedules {', '.join(KINDS)} (and by reversal reducescatter, reduce, "
            f"allreduce), not {coll.kind!r}"
        )
    roots: set[int] = set()
    for chunk, holders in coll.holders.items():
        if len(holders) != 1:
            raise ValidationError(
                f"method 'trees': chunk {list(chunk)} has {len(holders)} holders, expects one"
            )
        roots |= holders
    terminals: set[int] = set()
    for _, nodes in coll.post:
        terminals |= set(nodes)
    return sorted(roots), sorted(terminals | roots)


def _ticking(
    order: list[tuple[int, int]], deadline: Deadline, note: Callable[[int], None]
) -> Iterator[tuple[int, tuple[int, int]]]:
    """``enumerate(order)`` for a placement loop: every 256 chunks the deadline is checked and,
    every :data:`_PROGRESS_EVERY` seconds, ``note(chunks placed)`` writes a progress line."""
    last_note = time.perf_counter()
    for n_done, item in enumerate(order):
        if n_done % 256 == 0:
            deadline.check()
            now = time.perf_counter()
            if now - last_note >= _PROGRESS_EVERY:
                note(n_done)
                last_note = now
        yield n_done, item


@dataclass
class TreePlan:
    """What the engine decided before placing sends."""

    packing: Packing
    optimal: Fraction
    node_ids: tuple[int, ...]


def plan_trees(
    instance: Instance, deadline: Deadline, extra: Any = None, relays: frozenset[int] = frozenset(),
    net: Network | None = None,
) -> TreePlan:
    """Rate and packing of ``instance`` (steps 1 and 2 of the module docstring); ``relays``
    (node positions) are switches whose paths the packing's loads do not merge
    (:func:`~ccplan.heuristics.trees_pack.link_loads`: the trees of a reduction whose switches
    cannot add). ``net`` replaces the slot network's capacities (the windowed ones of step 6);
    its packing is not kept for other chunk counts."""
    extra = extra or {}
    roots, terminals = roots_and_terminals(instance)
    keep = net is None
    net = slot_network(instance) if net is None else net
    pos = instance.topology.node_index
    r_pos = [pos[r] for r in roots]
    t_pos = [pos[t] for t in terminals]
    start = time.perf_counter()
    x_star, _ = optimal_rate(net, r_pos, t_pos, deadline)
    log.info("trees: optimal rate %s chunks/slot per root (%.2f s)", x_star, time.perf_counter() - start)
    mode = str(extra.get("trees_pack", "auto"))
    if mode not in ("auto", "lp", "greedy"):
        raise ValidationError(f"extra.trees_pack must be 'auto', 'lp' or 'greedy', got {mode!r}")
    if mode == "greedy" or (mode == "auto" and len(terminals) > PACK_LIMIT):
        packing = greedy_trees(net, r_pos, t_pos, float(x_star))
    else:
        gap = float(extra.get("trees_gap", 1e-3))
        key = (net.src, net.dst, net.cap, tuple(r_pos), tuple(t_pos), gap, tuple(sorted(relays)))
        first, seed = _PACKINGS.pop(key, (None, None))
        if first is None:
            share = Deadline(min(deadline.at, time.perf_counter() + _PACK_SHARE * deadline.remaining()))
            first = pack_trees(net, r_pos, t_pos, float(x_star), share, gap=gap, relays=relays)
        else:
            log.info("trees: the packing of an earlier instance with these capacities (another C)")
        packing = first
        if extra.get("trees_shallow", True):
            share = Deadline(min(deadline.at, time.perf_counter() + _SHALLOW_SHARE * deadline.remaining()))
            start_from = first if seed is None else replace(seed, rate=first.rate)
            packing = shallow_packing(
                net, start_from, t_pos, [float(x) for x in instance.latency], share, relays=relays
            )
            seed = packing if packing is not start_from else seed
        if keep:
            _PACKINGS[key] = (first, seed)
        while len(_PACKINGS) > _PACKINGS_KEPT:
            _PACKINGS.pop(next(iter(_PACKINGS)))
    log.info(
        "trees: %s packing, %d trees, rate %.6g = %.4f of optimal (%.2f s)",
        packing.method, sum(len(t) for t in packing.trees.values()), packing.rate,
        packing.rate / float(x_star) if x_star else 0.0, packing.seconds,
    )
    return TreePlan(packing, x_star, instance.topology.node_ids)


def capped_plan(instance: Instance, plan: TreePlan, deadline: Deadline, extra: Any = None) -> TreePlan | None:
    """The plan with the depth cap of step 4 (:func:`~ccplan.heuristics.trees_shallow.
    latency_capped_packing`) for the instance's chunk count, or None when no cap is estimated
    shorter (or ``extra.trees_capped`` is False)."""
    if not (extra or {}).get("trees_capped", True) or plan.packing.method.startswith("greedy"):
        return None
    _, terminals = roots_and_terminals(instance)
    pos = instance.topology.node_index
    most = max((len(v) for v in _chunks_by_root(instance).values()), default=0)
    share = Deadline(min(deadline.at, time.perf_counter() + _CAPPED_SHARE * deadline.remaining()))
    capped = latency_capped_packing(
        slot_network(instance), plan.packing, [pos[t] for t in terminals],
        [float(x) for x in instance.latency], most, share,
    )
    return None if capped is plan.packing else replace(plan, packing=capped)


def _place_best(
    instance: Instance, plan: TreePlan, deadline: Deadline, details: dict[str, Any], extra: Any, how: str
) -> Schedule:
    """:func:`_place` of the plan, the windowed candidates of step 6 (:func:`_windowed_best`)
    and, when the depth cap applies (:func:`capped_plan`), the capped plan too, keeping the
    shortest: the cap's estimate ``C / z + depth`` is rough (AMD x2 AllGather at 1 MB, C = 256:
    a cap estimated 1 % shorter placed 0.7 % longer), the placement is the judge."""
    began = time.perf_counter()
    schedule = _place(instance, plan, deadline, details, how)
    schedule = _windowed_best(instance, plan, deadline, details, extra, schedule,
                              plan.packing.seconds + len(_WINDOW_BETAS) * (time.perf_counter() - began))
    try:
        alt = capped_plan(instance, plan, deadline, extra)
        if alt is None:
            return schedule
        alt_details: dict[str, Any] = {}
        other = _place(instance, alt, deadline, alt_details, how)
    except OutOfTimeError:
        return schedule
    kept, capped = schedule.last_arrival(instance), other.last_arrival(instance)
    details["depth_cap"] = f"{'taken' if capped < kept else 'kept the rate'}: {kept} -> {capped} slots"
    if capped >= kept:
        return schedule
    details.update(alt_details)
    details.update(alt.packing.as_dict())
    return other


def window_applies(instance: Instance, plan: TreePlan) -> Callable[..., Network] | None:
    """The windowed networks of step 6 by scale
    (:func:`~ccplan.heuristics.trees_shallow.windowed_network` over the horizon ``C / x*``), or
    None where they do not apply: a greedy packing (large instances), a horizon under
    :data:`_WINDOW_MIN_SLOTS` slots (a few chunks: the slots' rounding is the fill), no link's window
    :data:`_WINDOW_MIN_SHARE` or more shorter than the horizon (latency does not count), or
    one cut below :data:`_WINDOW_LEAST_SHARE` at the largest scale (latency dominates: the
    depth cap of step 4 is the tool there, and a window of nothing would cut the network)."""
    if plan.packing.method.startswith("greedy") or plan.optimal <= 0:
        return None
    roots, terminals = roots_and_terminals(instance)
    pos = instance.topology.node_index
    per_root = max(len(v) for v in _chunks_by_root(instance).values())
    horizon = per_root / float(plan.optimal)
    if horizon < _WINDOW_MIN_SLOTS:
        return None
    net = slot_network(instance)
    r_pos, t_pos = [pos[r] for r in roots], [pos[t] for t in terminals]
    lat = [float(x) for x in instance.latency]
    cuts = window_cuts(net, lat, r_pos, t_pos)  # one pair of Dijkstras for every scale and grain
    shares = cuts[np.isfinite(cuts)] / horizon
    most = (1 - _WINDOW_LEAST_SHARE) / max(_WINDOW_SCALES)
    if not len(shares) or not _WINDOW_MIN_SHARE <= shares.max() <= most:
        return None

    def cut_for(scale: float, grain: int = WINDOW_GRAIN) -> Network:
        return windowed_network(net, lat, r_pos, t_pos, horizon, scale, grain, cuts)

    return cut_for


def _windowed_plan(
    instance: Instance, deadline: Deadline, extra: Any, relays: frozenset[int],
    cut_for: Callable[..., Network], scale: float,
) -> TreePlan | None:
    """The packing of step 6 at ``scale`` (shares in 1/:data:`WINDOW_GRAIN`, else in
    1/:data:`WINDOW_GRAIN_COARSE` where the exact max-flows' integers overflow), or None when
    neither fits them."""
    for grain in (WINDOW_GRAIN, WINDOW_GRAIN_COARSE):
        try:
            return plan_trees(instance, deadline, {**(extra or {}), "trees_capped": False}, relays,
                              net=cut_for(scale, grain))
        except ValueError as exc:  # "capacities too fine for exact max-flows"
            log.info("trees: windowed scale %g in 1/%d: %s", scale, grain, exc)
    return None


def _windowed_best(
    instance: Instance, plan: TreePlan, deadline: Deadline, details: dict[str, Any], extra: Any,
    schedule: Schedule, cost: float,
) -> Schedule:
    """``schedule`` or a shorter one from step 6: packings on the windowed capacities
    (:func:`~ccplan.heuristics.trees_shallow.windowed_network`, scales
    :data:`_WINDOW_SCALES`) placed by per-link priority (betas :data:`_WINDOW_BETAS`). Only
    where latency counts (some link's window is at least :data:`_WINDOW_MIN_SHARE` shorter
    than the horizon ``C / x*``), the full table is compiled, ``extra.trees_windowed`` is
    not False, and the run is not a ``--chunks auto`` probe (``extra.auto_probe``: a probe is
    meant to be cheap, and a windowed small ``C`` made the doubling stop early: AMD x1 64 MB
    chose C = 64 at 192.2 us over C = 512's 191.1). Each candidate's packing and placement are
    cheap next to the time limit (AMD x2, C = 1,024: 2 s and 0.5 s); a candidate starts only
    with twice its ``cost`` (seconds: the first estimated from the plan's packing and the
    placement, the others measured) left, so the engine ends well before its deadline and the
    verification after it stays within the time limit."""
    if (
        not (extra or {}).get("trees_windowed", True) or (extra or {}).get("auto_probe")
        or instance.outages or instance.single_port or details.get("placement") != "full table"
    ):
        return schedule
    cut_for = window_applies(instance, plan)
    if cut_for is None:
        return schedule
    best, best_slots = schedule, schedule.last_arrival(instance)
    start, what = best_slots, "kept"
    try:
        for scale in _WINDOW_SCALES:
            if deadline.remaining() < 2 * cost:
                break  # another packing and its placements might not fit: keep the time limit
            began = time.perf_counter()
            alt = _windowed_plan(instance, deadline, extra, frozenset(), cut_for, scale)
            if alt is None:
                continue
            for beta in _WINDOW_BETAS:
                found = schedule_trees(instance, alt, deadline, None, priority=beta)
                slots = found.last_arrival(instance)
                log.debug("trees: windowed scale %g, priority %g: %d slots", scale, beta, slots)
                if slots < best_slots:
                    best, best_slots, what = found, slots, f"scale {scale:g}, priority {beta:g}"
            cost = time.perf_counter() - began
    except OutOfTimeError:
        pass
    details["windowed"] = f"{what}: {start} -> {best_slots} slots"
    if best is not schedule:
        log.info("trees: windowed packing, %s: %d -> %d slots", what, start, best_slots)
    return best


def _stride(weights: list[float], count: int) -> list[int]:
    """Tree index per chunk ``0 .. count-1``: every prefix within one chunk of the weights."""
    total = sum(weights)
    if len(weights) == 1 or total <= 0:
        return [0] * count
    share = [w / total for w in weights]
    got = [0] * len(weights)
    out = []
    for i in range(count):
        k = max(range(len(weights)), key=lambda j: share[j] * (i + 1) - got[j])
        got[k] += 1
        out.append(k)
    return out


def _compile(instance: Instance, plan: TreePlan) -> dict[int, list[list[tuple[int, int]]]]:
    """Per root id, per tree: ``(link, position of the tail's hold time)`` in tree order; the
    root holds position 0 and the head of the j-th link position j + 1."""
    topo = instance.topology
    compiled: dict[int, list[list[tuple[int, int]]]] = {}
    for r_pos, trees in plan.packing.trees.items():
        r = plan.node_ids[r_pos]
        out = []
        for tree in trees:
            where = {r: 0}
            steps = []
            for e in tree.links:
                where[topo.links[e].dst] = len(where)
                steps.append((e, where[topo.links[e].src]))
            out.append(steps)
        compiled[r] = out
    return compiled


def _chunks_by_root(instance: Instance) -> dict[int, list[int]]:
    chunks_of: dict[int, list[int]] = {}
    for s, i in instance.collective.holders:
        chunks_of.setdefault(s, []).append(i)
    for idx in chunks_of.values():
        idx.sort()
    return chunks_of


def _columns(
    slot: list[int] | np.ndarray, source: list[int] | np.ndarray, index: list[int] | np.ndarray,
    links: list[int] | np.ndarray, instance: Instance,
) -> Schedule:
    topo = instance.topology
    link = np.asarray(links, dtype=np.int64)
    src = np.array([lk.src for lk in topo.links], dtype=np.int64)
    dst = np.array([lk.dst for lk in topo.links], dtype=np.int64)
    return Schedule.from_columns(
        slot=np.asarray(slot, dtype=np.int64), chunk_source=np.asarray(source, dtype=np.int64),
        chunk_index=np.asarray(index, dtype=np.int64), src=src[link], dst=dst[link], method="trees",
    )


def _placement_order(
    instance: Instance, plan: TreePlan, chunks_of: dict[int, list[int]], picks: dict[int, list[int]]
) -> list[tuple[int, int]]:
    """``(k, root)`` pairs in placement order: by ``k / rate - depth``, the slot at which the
    root's ``k``-th chunk leaves at the packing's rate less the latency depth of the tree it
    rides. Sends placed earlier take the earlier slots of a shared link, so a chunk on a deep
    tree passes the saturated links ahead of one on a shallow tree released about as late:
    the last chunks to cross them are the ones with the shortest way left (amd x2 at C = 512:
    9,585 -> 9,573 slots; dgx2 x2 ReduceScatter 15,900 -> 15,882; by (index, root) alone the
    last chunk over the NIC links was often one with three xGMI hops still to go)."""
    topo = instance.topology
    src = [topo.node_index[lk.src] for lk in topo.links]
    dst = [topo.node_index[lk.dst] for lk in topo.links]
    keyed: list[tuple[float, int, int]] = []
    for r, idx in chunks_of.items():
        trees = plan.packing.trees[topo.node_index[r]]
        rate = sum(t.weight for t in trees)
        if rate <= 0:  # a starved root (the LP gave it nothing): index order
            rate = 1.0
        deep = [depth(t, src, dst, instance.latency) for t in trees]
        keyed.extend((k / rate - deep[picks[r][k]], k, r) for k in range(len(idx)))
    keyed.sort()
    return [(k, r) for _, k, r in keyed]


def schedule_trees(
    instance: Instance, plan: TreePlan, deadline: Deadline, counts: dict[int, list[int]] | None = None,
    priority: float | None = None,
) -> Schedule:
    """Place the chunks on the trees in a reservation table (step 3 of the module docstring).

    ``counts`` (per root position, chunks per tree in a period) replaces the weights of the
    stride assignment when given. ``priority`` (``beta``): list scheduling by per-link priority
    instead (:func:`~ccplan.heuristics.trees_jit.place_by_priority`, key ``k / rate - beta x``
    the latency left below the send); compiled placement only, else the order placement.
    """
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    occ = [int(x) for x in instance.occupancy]
    res = Reservations(instance)
    compiled = _compile(instance, plan)
    chunks_of = _chunks_by_root(instance)
    picks = {}
    for r, idx in chunks_of.items():
        rp = topo.node_index[r]
        weights = [float(k) for k in counts[rp]] if counts else [t.weight for t in plan.packing.trees[rp]]
        picks[r] = _stride(weights, len(idx))
    order = _placement_order(instance, plan, chunks_of, picks)
    if not instance.outages and not instance.single_port:
        deadline.check()
        found = _compiled_placement(instance, plan, compiled, chunks_of, picks, order, priority)
        if found is not None:
            return found
    slot_c: list[int] = []
    cs_c: list[int] = []
    ci_c: list[int] = []
    link_c: list[int] = []
    free_start = res.free_start
    reserve = res.reserve
    def note(n_done: int) -> None:
        log.info("trees: placed %d of %d chunks, %d sends", n_done, len(order), len(slot_c))

    for _, (k, r) in _ticking(order, deadline, note):
        i = chunks_of[r][k]
        steps = compiled[r][picks[r][k]]
        hold = [0] * (len(steps) + 1)
        for j, (e, tail) in enumerate(steps, start=1):
            step = occ[e]
            t = free_start(e, hold[tail])
            while t % step:
                # a send of l slots starts on a multiple of l: no gap shorter than l is left
                t = free_start(e, t + step - t % step)
            reserve(e, t)
            hold[j] = t + lat[e]
            slot_c.append(t)
            link_c.append(e)
        cs_c.extend([r] * len(steps))
        ci_c.extend([i] * len(steps))
    return _columns(slot_c, cs_c, ci_c, link_c, instance)


def _compiled_placement(
    instance: Instance, plan: TreePlan, compiled: dict[int, list[list[tuple[int, int]]]],
    chunks_of: dict[int, list[int]], picks: dict[int, list[int]], order: list[tuple[int, int]],
    priority: float | None = None,
) -> Schedule | None:
    """:func:`schedule_trees`'s placement by :func:`~ccplan.heuristics.trees_jit.place_chunks`
    (same sends; no outages, no single-port), or None when the horizon guessed from the
    packing's rate is too short twice over."""
    from ccplan.heuristics.trees_jit import place_by_priority, place_chunks, steps_left

    topo_pos = instance.topology.node_index
    tree_id, step_ptr, link_arr, tail_arr = flat_steps(compiled)
    tree_of = np.array([tree_id[(r, picks[r][k])] for k, r in order], dtype=np.int64)
    sizes = np.diff(step_ptr)[tree_of]
    total = int(sizes.sum())
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    lat = np.asarray(instance.latency, dtype=np.int64)
    omega = np.asarray(instance.link_capacity, dtype=np.int64)
    rate = min((sum(t.weight for t in ts) for ts in plan.packing.trees.values()), default=0.0)
    most = max((len(v) for v in chunks_of.values()), default=0)
    horizon = int(most / rate) if rate > 0 else most * int(occ.max()) * len(link_arr)
    src = [topo_pos[lk.src] for lk in instance.topology.links]
    dst = [topo_pos[lk.dst] for lk in instance.topology.links]
    deepest = max(depth(t, src, dst, lat) for ts in plan.packing.trees.values() for t in ts)
    horizon = 2 * horizon + 4 * int(deepest) + 64
    out = np.zeros(total, dtype=np.int64)
    if priority is not None:
        left = priority * steps_left(step_ptr, link_arr, tail_arr, lat)
        rates = {r: sum(t.weight for t in plan.packing.trees[topo_pos[r]]) or 1.0 for r in chunks_of}
        release = np.array([k / rates[r] for k, r in order], dtype=np.float64)
    for _ in range(2):
        if int((horizon // occ + 2).sum()) > _COMPILED_BLOCKS:
            return None
        if priority is not None:
            none = np.full(len(occ), -1, dtype=np.int64)  # no switch that only relays
            placed = place_by_priority(tree_of, release, step_ptr, link_arr, tail_arr, left, occ, lat,
                                       omega, horizon, out, none, none)
        else:
            placed = place_chunks(tree_of, step_ptr, link_arr, tail_arr, occ, lat, omega, horizon, out)
        if placed == total:
            break
        horizon *= 4
    else:
        return None
    root_col, index_col, link_col = send_columns(order, chunks_of, step_ptr, tree_of, link_arr)
    return _columns(out, root_col, index_col, link_col, instance)


def flat_steps(
    compiled: dict[int, list[list[tuple[int, int]]]],
) -> tuple[dict[tuple[int, int], int], np.ndarray, np.ndarray, np.ndarray]:
    """The trees of every root (steps ``(link, tail)``, tail 0 the root, else one more than
    the position of the step into it) in the compiled placements' flat form: the number of
    each ``(root, k)``, the steps' start per tree (``step_ptr``), their links and tails."""
    tree_id: dict[tuple[int, int], int] = {}
    ptr = [0]
    links: list[int] = []
    tails: list[int] = []
    for r, trees in compiled.items():
        for k, steps in enumerate(trees):
            tree_id[(r, k)] = len(ptr) - 1
            links.extend(e for e, _ in steps)
            tails.extend(tail for _, tail in steps)
            ptr.append(len(links))
    return (tree_id, np.array(ptr, dtype=np.int64), np.array(links, dtype=np.int64),
            np.array(tails, dtype=np.int64))


def send_columns(
    order: list[tuple[int, int]], chunks_of: dict[int, list[int]], step_ptr: np.ndarray, tree_of: np.ndarray,
    link_arr: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root, chunk index and link of every send in the order the compiled placements write
    their slots: chunk after chunk (``order``: ``(k, root)``, the chunk riding tree
    ``tree_of``), each tree's steps ``step_ptr[tree] ..`` in order."""
    sizes = np.diff(step_ptr)[tree_of]
    total = int(sizes.sum())
    roots = np.array([r for _, r in order], dtype=np.int64)
    index = np.array([chunks_of[r][k] for k, r in order], dtype=np.int64)
    starts = np.repeat(step_ptr[tree_of] - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    return np.repeat(roots, sizes), np.repeat(index, sizes), link_arr[np.arange(total) + starts]


def _lanes(
    instance: Instance, plan: TreePlan, counts: dict[int, list[int]]
) -> dict[int, list[list[tuple[int, int]]]]:
    """Per root id, the tree of each lane of a period (stride order over the counts)."""
    compiled = _compile(instance, plan)
    out = {}
    for rp, per_tree in counts.items():
        r = plan.node_ids[rp]
        n = sum(per_tree)
        out[r] = [compiled[r][k] for k in _stride([float(x) for x in per_tree], n)]
    return out


def _periodic(
    instance: Instance, plan: TreePlan, deadline: Deadline, details: dict[str, Any]
) -> tuple[int, Schedule] | None:
    """The periodic schedule (:mod:`~ccplan.heuristics.trees_period`) with integer counts per
    tree, or None (no counts in the time, outages, or a send found no residue)."""
    if instance.outages or plan.packing.method.startswith("greedy"):
        return None
    chunks = instance.collective.chunks
    share = Deadline(min(deadline.at, time.perf_counter() + _PERIOD_SHARE * deadline.remaining()))
    net = slot_network(instance)
    chunks_of = _chunks_by_root(instance)
    best: tuple[int, Any, int] | None = None
    # Every size is a candidate: a long period loses less rate to rounding, a short one less
    # to the pattern's span (late lanes wait for residues the early ones took).
    for size in (x for x in _PERIOD_SIZES if x <= max(1, chunks // 2)):
        if share.expired:
            break
        found = integral_counts(net, plan.packing, plan.optimal, share, loss=0.0, sizes=(size,))
        if found is None:
            continue
        lanes = _lanes(instance, plan, found[1])
        per_link = np.zeros(instance.topology.num_links, dtype=np.int64)
        for trees in lanes.values():
            for steps in trees:
                for e, _ in steps:
                    per_link[e] += 1
        pattern = place_pattern(instance, lanes, min_period(instance, per_link))
        if pattern is None:
            continue
        span = pattern.makespan(chunks)
        log.debug("trees: period %d for %d chunks per root: pattern span %d, makespan %d",
                  pattern.period, pattern.lanes, pattern.span, span)
        if best is None or span < best[0]:
            best = (span, pattern, size)
    if best is None:
        return None
    span, pattern, _ = best
    n = pattern.lanes
    details.update(period=pattern.period, chunks_per_period=n, period_rate=n / pattern.period,
                   period_span=pattern.span)
    slot, root, index, link = copy_pattern(pattern, chunks_of)
    return span, _columns(slot, root, index, link, instance)


def _place(
    instance: Instance, plan: TreePlan, deadline: Deadline, details: dict[str, Any], how: str = "auto"
) -> Schedule:
    """Every chunk in the full reservation table with the packing's weights, or, above
    :data:`_FULL_TABLE_SENDS` sends (``how="auto"``) or when ``how="periodic"``, the periodic
    schedule (integer counts per tree, one group placed and copied; the full table when it
    does not apply). ``how="full"``: the full table only."""
    if how not in ("auto", "periodic", "full"):
        raise ValidationError(f"extra.trees_placement must be 'auto', 'periodic' or 'full', got {how!r}")
    per_chunk = sum(len(t.links) for trees in plan.packing.trees.values() for t in trees[:1])
    compiled = not instance.outages and not instance.single_port
    limit = _FULL_TABLE_SENDS_COMPILED if compiled else _FULL_TABLE_SENDS
    large = per_chunk * instance.collective.chunks > limit
    found = None
    if instance.collective.chunks >= 2 and (how == "periodic" or (how == "auto" and large)):
        try:
            found = _periodic(instance, plan, deadline, details)
        except OutOfTimeError:
            found = None
    if found is not None:
        details["placement"] = "periodic"
        details["periodic_slots"] = found[0]
        return found[1]
    details["placement"] = "full table"
    return schedule_trees(instance, plan, deadline, None)


def trees_schedule(instance: Instance, deadline: Deadline, extra: Any = None) -> Schedule:
    """The pipelined tree-packing schedule of an AllGather or Broadcast ``instance`` under
    ``deadline`` (raises :class:`~ccplan.limits.OutOfTimeError` when it passes)."""
    how = str((extra or {}).get("trees_placement", "auto"))
    found = _symmetric(instance, deadline, extra, {})
    if found is not None:
        return found
    return _place_best(instance, plan_trees(instance, deadline, extra), deadline, {}, extra, how)


def _symmetric(
    instance: Instance, deadline: Deadline, extra: Any, details: dict[str, Any]
) -> Schedule | None:
    """The schedule by symmetry (:mod:`~ccplan.heuristics.trees_symmetry`) unless
    ``extra.trees_symmetry`` is False or the instance has no symmetry known there."""
    if not (extra or {}).get("trees_symmetry", True):
        return None
    return symmetric_schedule(instance, deadline, details)


@register("trees")
def trees_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``trees``: pipelined tree packing (module docstring)."""
    roots_and_terminals(instance)  # bad collective: a ValidationError before any work
    start = time.perf_counter()
    details: dict[str, Any] = {"variant": "trees"}

    def build(deadline: Deadline) -> Schedule:
        found = _symmetric(instance, deadline, options.extra, details)
        if found is not None:
            return found
        plan = plan_trees(instance, deadline, options.extra)
        details.update(plan.packing.as_dict())
        details["optimal_rate"] = float(plan.optimal)
        details["optimal_rate_exact"] = str(plan.optimal)
        how = str(options.extra.get("trees_placement", "auto"))
        return _place_best(instance, plan, deadline, details, options.extra, how)

    schedule, failed = run_constructor(build, options.time_limit, "trees")
    if failed is not None:
        return failed
    details["seconds"] = time.perf_counter() - start
    return Outcome(schedule=schedule, status="feasible", details=details)
