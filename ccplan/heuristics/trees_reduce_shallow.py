r"""Shallow reduce trees at the packing's rate: the shallow phase of
:mod:`~ccplan.heuristics.trees_shallow` for trees whose arcs pass switches that relay.

A reduction through switches that cannot add (:mod:`~ccplan.heuristics.trees_reduce`) is
placed as arc trees on the reversed twin: terminal-level arborescences whose arcs are whole
paths through the relaying switches, each arc charged on every link of its path. The shallow
phase of the ``trees`` engine prices shortest-path trees of the links; such a tree reaches
every GPU behind a spine by its own path from the root (the shortest way to each), so under
arc charges it loads the root's NIC uplink once per GPU and never prices out. On AMD x2 at
64 MB the phase ended after two rounds with nothing gained, and the reduce trees stayed
deeper than the AllGather's (weighted mean latency depth 1,596 slots against 999, deepest
2,638 against 1,241 at C = 1,024), which was most of the ReduceScatter's distance from the
physical bound (20,505 slots against the AllGather's 19,929).

Here the same LP (:class:`~ccplan.heuristics.trees_shallow.DepthLP`: minimise
:math:`\sum_T d_T^2 y_T` at every root's rate, links within capacity, a column's load the
number of its arcs on each link) is priced by trees grown on the terminals (Prim's order):
from the root, the next GPU is the one with the least ``cost(arc) + mu depth`` over the arcs
from GPUs already in the tree, ``cost`` the cheapest path under ``pi + mu L``
(:class:`~ccplan.heuristics.trees_pack._Paths`) and ``depth`` the latency depth the GPU would
have. An arc's price is what the LP charges it, so a second arc over a shared uplink costs
again, and ``mu`` trades the duals against depth (the ``mu`` of
:func:`~ccplan.heuristics.trees_shallow.priced_costs`). A tree enters when its exact reduced
cost ``d_T^2 + sum_e pi_e load_e - sigma_r`` is negative.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ccplan.heuristics.trees_jit import grow_arc_tree
from ccplan.heuristics.trees_pack import Network, _Paths
from ccplan.heuristics.trees_shallow import _RATE_SLACK, DepthLP, priced_costs
from ccplan.limits import Deadline

log = logging.getLogger(__name__)

Arcs = list[tuple[int, list[int]]]
"""One arc tree: ``(index of the tail's hold time, links)`` per arc (the root holds index 0,
the head of the j-th arc index j + 1), every arc after the arc into its tail."""


@dataclass(frozen=True)
class _Pool:
    """A shallow phase's outcome: its latencies and rate, the trees its LP kept, and what it
    returned."""

    lat: tuple[float, ...]
    rate: float
    kept: list[tuple[int, Arcs]]
    result: tuple[dict[int, list[Arcs]], dict[int, list[float]]]


_POOLS_KEPT = 4
_SAME_RATE = 1e-3  # a kept result serves a call whose rate is at most this much higher (the packings' gap)
_POOLS: dict[tuple[object, ...], _Pool] = {}
"""The last shallow phases by capacities, roots and terminals, newest last. ``--chunks auto``
solves one topology at C = 1, 2, 4, ..., whose capacities stay the same while the latencies
change a little, so each starts from the trees the last one kept (AMD x2 ReduceScatter 64 MB:
3 s a candidate without them); with the same latencies too (the same instance solved again,
e.g. the reduction alone and then within the pipeline) the last result is returned, so that
the second solve does not place other trees of the same depth."""


def arc_depth(arcs: Arcs, lat: np.ndarray) -> float:
    """Latency depth (slots) of an arc tree: the largest sum of ``L`` from the root to a node."""
    at = [0.0] * (len(arcs) + 1)
    for j, (tail, path) in enumerate(arcs, start=1):
        at[j] = at[tail] + float(lat[path].sum())
    return max(at)


def arc_path(paths: _Paths, pred: np.ndarray, p: int, c: int) -> list[int]:
    """Links of the cheapest path from terminal index ``p`` to ``c`` (Dijkstra row ``p``)."""
    n = paths.net.n
    terms = paths.terminals
    nodes = [n + terms[c]]
    while nodes[-1] != terms[p]:
        nodes.append(int(pred[p, nodes[-1]]))
    nodes.reverse()
    links = []
    cur = terms[p]
    for b in nodes[1:]:
        links.append(paths.link_of[(cur, b)])
        cur = b - n if b >= n else b
    return links


def arc_tree(paths: _Paths, parent: np.ndarray, root: int, pred: np.ndarray) -> Arcs:
    """The arcs of a terminal-level arborescence (``parent`` per terminal index, -1 at the
    root), every path kept whole (no merging at a relay: each arc pays for its links), in
    breadth-first order with the index of the tail's hold time (root 0, the head of arc j
    index j + 1)."""
    children: list[list[int]] = [[] for _ in paths.terminals]
    for v, p in enumerate(parent.tolist()):
        if p >= 0:
            children[p].append(v)
    where = {root: 0}
    arcs: Arcs = []
    queue = [root]
    for p in queue:
        for c in children[p]:
            queue.append(c)
            arcs.append((where[p], arc_path(paths, pred, p, c)))
            where[c] = len(arcs)
    return arcs


def shallow_arc_trees(
    net: Network,
    lat: np.ndarray,
    trees: dict[int, list[Arcs]],
    weights: dict[int, list[float]],
    terminals: list[int],
    deadline: Deadline,
    max_rounds: int = 200,
) -> tuple[dict[int, list[Arcs]], dict[int, list[float]]]:
    """Arc trees of the same rate and least weighted squared depth found (module docstring).

    Parameters
    ----------
    net : Network
        Capacities in chunks per slot (the slot network, or a windowed one).
    lat : numpy.ndarray
        Link latencies ``L`` in slots.
    trees, weights : dict
        Per root position: its arc trees and their weights (the rate is the least root's sum).
    terminals : list of int
        Terminal positions (every arc ends at one).

    Returns
    -------
    (dict, dict)
        The new trees and weights per root position; ``trees`` and ``weights`` themselves when
        the LP fails or nothing is gained.
    """
    start = time.perf_counter()
    roots = list(trees)
    rate = min((sum(weights[r]) for r in roots), default=0.0)
    if not roots or rate <= 0:
        return trees, weights
    lat = np.ascontiguousarray(lat, dtype=np.float64)
    key = (net.src, net.dst, net.cap, tuple(roots), tuple(terminals))
    lat_key = tuple(lat.tolist())
    cached = _POOLS.pop(key, None)
    if cached is not None:
        _POOLS[key] = cached
        if cached.lat == lat_key and cached.rate >= rate * (1 - _SAME_RATE):
            log.info("trees reduction: the shallow arc trees of an earlier instance with these latencies")
            return cached.result
    row_of = {r: i for i, r in enumerate(roots)}
    lp = DepthLP(len(roots), np.array([float(c) for c in net.cap]), rate * (1 - _RATE_SLACK))
    paths = _Paths(net, terminals)
    n = net.n
    terms = np.asarray(paths.terminals, dtype=np.int64)
    link_of = np.full((2 * n, 2 * n), -1, dtype=np.int64)
    for (a, b), e in paths.link_of.items():
        link_of[a, b] = e
    parent = np.empty(len(terms), dtype=np.int64)
    columns: list[tuple[int, Arcs]] = []
    seen: set[tuple[int, tuple[tuple[int, ...], ...]]] = set()

    def loads_of(arcs: Arcs) -> dict[int, float]:
        loads: dict[int, float] = {}
        for _, path in arcs:
            for e in path:
                loads[e] = loads.get(e, 0.0) + 1.0
        return loads

    def add(r: int, arcs: Arcs) -> bool:
        column = (r, tuple(sorted(tuple(p) for _, p in arcs)))
        if column in seen:
            return False
        seen.add(column)
        lp.add(row_of[r], loads_of(arcs), arc_depth(arcs, lat) ** 2)
        columns.append((r, arcs))
        return True

    before = 0.0
    for r in roots:
        for arcs, first in zip(trees[r], weights[r], strict=True):
            add(r, arcs)
            before += first * arc_depth(arcs, lat) ** 2
    if cached is not None:
        for r, arcs in cached.kept:  # the trees of another C: its latencies differ a little
            add(r, arcs)
    rounds = 0
    solved = None
    while True:
        got = lp.solve()
        if got is None:
            return trees, weights
        solved = got
        y, sigma, pi = got
        rounds += 1
        if rounds > max_rounds or deadline.expired:
            break
        added = 0
        for mu, cost in priced_costs(pi, lat, floor=0.0):  # the paths add their own per-hop cost
            w, pred = paths.matrix(cost)
            pred = np.ascontiguousarray(pred, dtype=np.int64)
            w = np.ascontiguousarray(w, dtype=np.float64)
            for r in roots:
                i = paths.pos[r]
                deep, priced = grow_arc_tree(w, pred, terms, n, link_of, lat, pi, i, mu, parent)
                if deep * deep + priced < sigma[row_of[r]] - 1e-9 and add(
                    r, arc_tree(paths, parent, i, pred)
                ):
                    added += 1
            if deadline.expired:
                break
        if not added:
            break
    y = solved[0]
    kept: list[tuple[int, Arcs]] = []
    out: dict[int, list[Arcs]] = {r: [] for r in roots}
    out_w: dict[int, list[float]] = {r: [] for r in roots}
    for (r, arcs), weight in zip(columns, y.tolist(), strict=True):
        if weight > 1e-12:
            kept.append((r, arcs))
            out[r].append(arcs)
            out_w[r].append(weight)
    after = float(np.dot(y, lp.costs))
    log.info(
        "trees reduction: shallow arc trees, %d rounds, %d columns, mean squared depth %.4g -> %.4g (%.2f s)",
        rounds, len(columns), before / rate, after / rate, time.perf_counter() - start,
    )
    lost = any(not out[r] for r in roots) or after >= before * (1 - 1e-9)
    result = (trees, weights) if lost else (out, out_w)
    _POOLS.pop(key, None)
    _POOLS[key] = _Pool(lat_key, rate, kept, result)
    while len(_POOLS) > _POOLS_KEPT:
        _POOLS.pop(next(iter(_POOLS)))
    return result
