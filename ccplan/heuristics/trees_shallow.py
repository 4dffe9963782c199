r"""Shallow trees at the optimal rate: the second phase of the ``trees`` packing.

The column generation of :func:`~ccplan.heuristics.trees_pack.pack_trees` reaches the optimal
rate ``x*`` with whatever trees the duals price out, and its Chu-Liu/Edmonds pricing does not
see depth: a chain and a star of the same links cost the same. Chains are common (on AMD 16 GCDs
the trees had up to 15 hops, 77 slots of latency from root to the last leaf; on an 8 x 8 torus
32 hops), and a pipelined schedule pays the latency depth of its deepest tree once as fill
(the first chunk must reach the last leaf): 1-2 % of a 1 GB AllGather.

This phase keeps the rate and minimises depth. The LP over the trees found so far plus new ones

.. math:: \min \sum_T d_T^2 \, y_T \quad \text{s.t.} \quad \sum_{T \ni e} y_T \le c_e,
   \quad \sum_{T \text{ of } r} y_T \ge z \;\; \forall r

(``d_T`` the latency depth of ``T``: the longest root-to-leaf sum of link latencies ``L`` in
slots; squared so that one deep tree costs more than two half as deep) is solved by column
generation with a heuristic pricing: shortest-path trees from every root under the link costs
``|pi_e| + mu L_e`` for a few ``mu`` (the capacity duals ``pi`` steer away from full links,
``mu`` towards shallow paths); a tree enters when its exact reduced cost
``d_T^2 + sum_{e in T} |pi_e| - sigma_r`` is negative. The phase stops when no candidate prices
out or at its deadline; the rate ``z`` is the first phase's, so the rate never drops.

:func:`latency_capped_packing` is the step after it for a given chunk count: the rate may
drop when a cap on the depth shortens ``C / z + depth`` (small sizes, where alpha is many
slots).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from ccplan.heuristics.trees_pack import Network, Packing, Tree, link_loads
from ccplan.limits import NEVER, Deadline

log = logging.getLogger(__name__)

# latency weights of the pricing, in units of the mean |pi|
_MUS = (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 16.0)
_RESTARTS = 4  # restarts of the shallow phase's column generation (shallow_packing)
_RESTART_GAIN = 0.01  # a restart whose objective falls less than this share is the last
_RATE_SLACK = 1e-7  # the phase keeps every root's rate within this relative slack of the packing's


def _cost(d: float) -> float:
    """A tree's cost in the shallow phase's LP: its depth squared (module docstring; cubes
    overflow the LP's tolerances, HiGHS ends "unknown" on AMD x2)."""
    return d * d


def depth(tree: Tree, src: Sequence[int], dst: Sequence[int], latency: Sequence[float] | np.ndarray) -> float:
    """Latency depth of ``tree``: the largest sum of link latencies from its root to a node."""
    at = {tree.root: 0.0}
    deepest = 0.0
    for e in tree.links:
        d = at[src[e]] + float(latency[e])
        at[dst[e]] = d
        deepest = max(deepest, d)
    return deepest


def _spt(net: Network, root: int, cost: np.ndarray, terminals: np.ndarray) -> tuple[int, ...]:
    """Links of the shortest-path tree from ``root`` under ``cost``, pruned to the paths that
    reach terminals, in topological order."""
    return _spts(net, [root], cost, terminals)[0]


def _spts(
    net: Network, roots: Sequence[int], cost: np.ndarray, terminals: np.ndarray
) -> list[tuple[int, ...]]:
    """:func:`_spt` of every root in ``roots``, from one Dijkstra call (one graph for all:
    building it was most of the shallow phase's time, 32 roots times 10 weights a round)."""
    graph = sp.csr_array((cost, (np.asarray(net.src), np.asarray(net.dst))), shape=(net.n, net.n))
    dist, pred = dijkstra(graph, directed=True, indices=list(roots), return_predecessors=True)
    return [_pruned(net, root, dist[i], pred[i], terminals) for i, root in enumerate(roots)]


def _pruned(
    net: Network, root: int, dist: np.ndarray, pred_row: np.ndarray, terminals: np.ndarray
) -> tuple[int, ...]:
    pred = pred_row.tolist()
    keep = [False] * net.n
    keep[root] = True
    for v in terminals.tolist():
        while not keep[v]:
            keep[v] = True
            v = pred[v]
    # by distance, ties by hop count in the tree: with large duals the tiny per-link cost that
    # separates a child's distance from its parent's can round away (a float sum never drops)
    hops = [-1] * net.n
    hops[root] = 0
    for v in (u for u in range(net.n) if keep[u]):
        chain = []
        while hops[v] < 0:
            chain.append(v)
            v = pred[v]
        for u in reversed(chain):
            hops[u] = hops[v] + 1
            v = u
    order = np.lexsort((np.asarray(hops), dist))
    return tuple(net.index[(pred[v], v)] for v in order.tolist() if keep[v] and v != root)


class _Pricing:
    """The shortest-path trees of every root under a cost, with their latency depths: one
    Dijkstra call and one compiled pass (:func:`~ccplan.heuristics.trees_jit.pruned_trees`;
    in Python the pass was two thirds of the shallow phase on AMD x4)."""

    def __init__(self, net: Network, roots: Sequence[int], terminals: np.ndarray, lat: np.ndarray) -> None:
        self.net = net
        self.roots = np.asarray(roots, dtype=np.int64)
        self.terminals = np.asarray(terminals, dtype=np.int64)
        self.link_of = np.full((net.n, net.n), -1, dtype=np.int64)
        self.link_of[np.asarray(net.src), np.asarray(net.dst)] = np.arange(net.num_links)
        self.lat = np.asarray(lat, dtype=np.float64)
        self.graph_rows = np.asarray(net.src)
        self.graph_cols = np.asarray(net.dst)

    def __call__(self, cost: np.ndarray) -> tuple[list[tuple[int, ...]], list[float]]:
        from ccplan.heuristics.trees_jit import pruned_trees

        net = self.net
        graph = sp.csr_array((cost, (self.graph_rows, self.graph_cols)), shape=(net.n, net.n))
        dist, pred = dijkstra(graph, directed=True, indices=self.roots, return_predecessors=True)
        r = len(self.roots)
        links = np.zeros(r * net.n, dtype=np.int64)
        ptr = np.zeros(r + 1, dtype=np.int64)
        deep = np.zeros(r, dtype=np.float64)
        pruned_trees(np.ascontiguousarray(dist), np.ascontiguousarray(pred, dtype=np.int64), self.roots,
                     self.terminals, self.link_of, self.lat, links, ptr, deep)
        flat = links.tolist()
        bounds = ptr.tolist()
        return [tuple(flat[bounds[i]: bounds[i + 1]]) for i in range(r)], deep.tolist()


class DepthLP:
    """The shallow phase's LP (module docstring), kept warm between rounds (columns are only
    added): minimise ``sum_T cost_T y_T`` with every root's weights at least ``z`` and every
    link's load within its capacity. A column's load on a link is the number of its paths that
    use it (the arc trees of :mod:`~ccplan.heuristics.trees_reduce_shallow` charge each arc)."""

    def __init__(self, roots: int, cap: np.ndarray, z: float) -> None:
        import highspy

        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "off")  # keep the basis: each round adds columns only
        h.setOptionValue("simplex_strategy", 4)  # primal: added columns keep the basis primal feasible
        self.inf = highspy.kHighsInf
        self.nr = roots
        lower = np.concatenate([np.full(roots, z), np.full(len(cap), -self.inf)])
        upper = np.concatenate([np.full(roots, self.inf), cap])
        h.addRows(roots + len(cap), lower, upper, 0, np.zeros(1, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(0))
        h.changeObjectiveSense(highspy.ObjSense.kMinimize)
        self.h = h
        self.costs: list[float] = []

    def add(self, row: int, loads: dict[int, float], cost: float) -> None:
        """A column of root ``row`` with ``loads`` per link and objective ``cost``."""
        idx = np.array([row] + [self.nr + e for e in loads], dtype=np.int32)
        vals = np.array([1.0, *loads.values()])
        self.h.addCol(cost, 0.0, self.inf, len(idx), idx, vals)
        self.costs.append(cost)

    def solve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(weights, sigma per root, pi per link)`` (duals as non-negative prices), or None
        when the LP did not end optimal."""
        import highspy

        self.h.run()
        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            log.info("trees: the shallow phase's LP ended %s; the first packing stays",
                     self.h.getModelStatus())
            return None
        sol = self.h.getSolution()
        duals = np.asarray(sol.row_dual)
        return (np.asarray(sol.col_value), np.maximum(duals[: self.nr], 0.0),
                np.abs(np.minimum(duals[self.nr:], 0.0)))


def priced_costs(pi: np.ndarray, lat: np.ndarray, floor: float = 1e-9) -> list[tuple[float, np.ndarray]]:
    """The pricing's latency weights ``mu`` (:data:`_MUS` in units of the mean positive ``pi``)
    with their link costs ``pi + mu L``, plus ``floor`` per link so that zero costs stay edges
    (a graph that adds its own per-hop cost passes 0)."""
    scale = float(pi[pi > 0].mean()) if (pi > 0).any() else 1.0
    return [(mu * scale, pi + mu * scale * lat + floor) for mu in _MUS]


def shallow_packing(
    net: Network,
    packing: Packing,
    terminals: Sequence[int],
    latency: Sequence[float],
    deadline: Deadline = NEVER,
    max_rounds: int = 40,
    relays: frozenset[int] = frozenset(),
) -> Packing:
    """The packing's rate with shallower trees (module docstring).

    The column generation is restarted from the trees it kept while a restart lowers the
    objective by :data:`_RESTART_GAIN` (at most :data:`_RESTARTS` times): the LP is degenerate
    (many links full at once), the heuristic pricing sees only the duals the simplex happens to
    return, and a new LP over the kept trees returns others (AMD x2 AllGather at 64 MB, C =
    1024: mean squared depth 4.63e7 -> 3.28e7 -> 3.22e7 slots^2 over three runs, makespan
    20,205 -> 19,929 slots).

    Parameters
    ----------
    net : Network
        Capacities in chunks per slot.
    packing : Packing
        The first phase's result; its trees are the starting columns.
    terminals : sequence of int
    latency : sequence of float
        Link latencies ``L`` in slots (by link position).
    relays : frozenset of int
        Switches whose paths a tree's load does not merge
        (:func:`~ccplan.heuristics.trees_pack.link_loads`).

    Returns
    -------
    Packing
        Same rate, method ``"<method>+shallow"``; ``packing`` itself when the LP fails or
        nothing is gained.
    """
    best, best_cost = _shallow_once(net, packing, terminals, latency, deadline, max_rounds, relays)
    for _ in range(_RESTARTS):
        if best is packing or deadline.expired:
            break
        found, cost = _shallow_once(net, replace(best, rate=packing.rate), terminals, latency, deadline,
                                    max_rounds, relays)
        if found is best or cost > best_cost * (1 - _RESTART_GAIN):
            if cost < best_cost:
                best, best_cost = found, cost
            break
        best, best_cost = found, cost
    if best is packing:
        return packing
    method = packing.method if packing.method.endswith("+shallow") else f"{packing.method}+shallow"
    return replace(best, method=method)


def _shallow_once(
    net: Network,
    packing: Packing,
    terminals: Sequence[int],
    latency: Sequence[float],
    deadline: Deadline,
    max_rounds: int,
    relays: frozenset[int],
) -> tuple[Packing, float]:
    """One column generation of :func:`shallow_packing` from ``packing``'s trees, with the
    objective it reached (``inf`` when it returns ``packing`` itself)."""
    start = time.perf_counter()
    roots = list(packing.trees)
    if not roots or packing.rate <= 0:
        return packing, float("inf")
    lat = np.asarray(latency, dtype=float)
    term = np.asarray(sorted(terminals), dtype=np.int64)
    row_of = {r: i for i, r in enumerate(roots)}
    lp = DepthLP(len(roots), np.array([float(c) for c in net.cap]), packing.rate * (1 - _RATE_SLACK))
    columns: list[Tree] = []
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def add(tree: Tree) -> bool:
        key = (tree.root, tuple(sorted(tree.links)))
        if key in seen:
            return False
        seen.add(key)
        loads = link_loads(tree, net.src, net.dst, relays)
        lp.add(row_of[tree.root], {e: float(loads[e]) for e in tree.links},
               _cost(depth(tree, net.src, net.dst, lat)))
        columns.append(Tree(tree.root, tree.links))
        return True

    pricing = _Pricing(net, roots, term, lat)
    for r in roots:
        for t in packing.trees[r]:
            add(t)
    before = sum(t.weight * _cost(depth(t, net.src, net.dst, lat)) for r in roots for t in packing.trees[r])
    before = float(before)
    rounds = 0
    weights = np.zeros(0)
    while True:
        solved = lp.solve()
        if solved is None:
            return packing, float("inf")
        weights, sigma, pi = solved
        rounds += 1
        if rounds > max_rounds or deadline.expired:
            break
        added = 0
        found = [pricing(cost) for _, cost in priced_costs(pi, lat)]
        for i, r in enumerate(roots):
            for links_of, depths in found:
                tree = Tree(r, links_of[i])
                if relays:
                    loads = link_loads(tree, net.src, net.dst, relays)
                    priced = float(np.dot(pi[list(loads)], list(loads.values())))
                else:  # every link counts once
                    priced = float(pi[list(tree.links)].sum())
                d = depths[i]
                if _cost(d) + priced < sigma[row_of[r]] - 1e-9 and add(tree):
                    added += 1
            if deadline.expired:
                break
        if not added:
            break
    trees: dict[int, list[Tree]] = {r: [] for r in roots}
    for t, y in zip(columns, weights.tolist(), strict=True):
        if y > 1e-12:
            trees[t.root].append(Tree(t.root, t.links, y))
    if any(not trees[r] for r in roots):
        return packing, float("inf")
    after = float(np.dot(weights, lp.costs))
    rates = [sum(t.weight for t in trees[r]) for r in roots]
    log.info(
        "trees: shallow phase, %d rounds, %d columns, mean squared depth %.4g -> %.4g (%.2f s)",
        rounds, len(columns), before / max(packing.rate, 1e-300), after / max(packing.rate, 1e-300),
        time.perf_counter() - start,
    )
    return Packing(
        trees, min(rates), packing.optimal, packing.method, packing.iterations + rounds,
        packing.seconds + time.perf_counter() - start,
    ), after


_CAP_STEPS = 8  # depth caps tried between the shallowest possible depth and the packing's own
_CAP_ROUNDS = 6  # column-generation rounds per depth cap
_CAP_GAIN = 0.01  # a capped packing replaces the packing when its estimate is this much shorter (the
# estimate is rough: on AMD x2 at 64 MB a cap estimated 0.4 % shorter placed 0.2 % longer)


def _capped_rate(
    net: Network, roots: Sequence[int], pool: list[tuple[Tree, float, dict[int, int]]], cap_depth: float,
    pricing: _Pricing, lat: np.ndarray, relays: frozenset[int], deadline: Deadline,
) -> tuple[float, dict[int, list[Tree]]]:
    """The largest common rate of trees no deeper than ``cap_depth`` (column generation over
    ``pool``, priced by shortest-path trees kept when shallow enough), with its trees; rate 0
    when a root has no tree that shallow. New trees are appended to ``pool``."""
    import highspy

    nr = len(roots)
    row_of = {r: i for i, r in enumerate(roots)}
    cap = np.array([float(c) for c in net.cap])
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("presolve", "off")
    inf = highspy.kHighsInf
    # rows: per root sum y - z >= 0, per link load <= cap; column 0 is z
    lower = np.concatenate([np.zeros(nr), np.full(net.num_links, -inf)])
    upper = np.concatenate([np.full(nr, inf), cap])
    h.addRows(nr + net.num_links, lower, upper, 0, np.zeros(1, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    h.addCol(-1.0, 0.0, inf, nr, np.arange(nr, dtype=np.int32), np.full(nr, -1.0))
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    columns: list[Tree] = []
    seen: set[tuple[int, tuple[int, ...]]] = set()

    def add(tree: Tree, loads: dict[int, int]) -> bool:
        key = (tree.root, tuple(sorted(tree.links)))
        if key in seen:
            return False
        seen.add(key)
        idx = np.array([row_of[tree.root]] + [nr + e for e in tree.links], dtype=np.int32)
        h.addCol(0.0, 0.0, inf, len(idx), idx, np.array([1.0] + [float(loads[e]) for e in tree.links]))
        columns.append(tree)
        return True

    covered = set()
    for tree, d, loads in pool:
        if d <= cap_depth and tree.root in row_of:
            add(tree, loads)
            covered.add(tree.root)
    if len(covered) < nr:
        return 0.0, {}
    values = np.zeros(0)
    for _ in range(_CAP_ROUNDS):
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return 0.0, {}
        sol = h.getSolution()
        values = np.asarray(sol.col_value)
        duals = np.asarray(sol.row_dual)
        sigma = np.abs(duals[:nr])
        pi = np.abs(duals[nr:])
        if deadline.expired:
            break
        scale = float(pi[pi > 0].mean()) if (pi > 0).any() else 1.0
        # per root, the candidate of least reduced cost over the weights (one column a root
        # and round: every candidate that priced out made the LPs ten times as long)
        chosen: dict[int, tuple[float, Tree, float, dict[int, int]]] = {}
        for mu in _MUS[::2]:
            links_of, depths = pricing(pi + mu * scale * lat + 1e-9)
            for i, r in enumerate(roots):
                if depths[i] > cap_depth:
                    continue
                tree = Tree(r, links_of[i])
                loads = link_loads(tree, net.src, net.dst, relays)
                reduced = float(sum(pi[e] * x for e, x in loads.items())) - sigma[i]
                if reduced < -1e-12 and (i not in chosen or reduced < chosen[i][0]):
                    chosen[i] = (reduced, tree, depths[i], loads)
        added = 0
        for _, tree, d, loads in chosen.values():
            if add(tree, loads):
                pool.append((tree, d, loads))
                added += 1
        if not added:
            break
    trees: dict[int, list[Tree]] = {r: [] for r in roots}
    # columns added in the last round after the last solve have no value
    for t, y in zip(columns, values[1:].tolist(), strict=False):
        if y > 1e-12:
            trees[t.root].append(Tree(t.root, t.links, y))
    if any(not trees[r] for r in roots):
        return 0.0, {}
    return min(sum(t.weight for t in trees[r]) for r in roots), trees


def latency_capped_packing(
    net: Network,
    packing: Packing,
    terminals: Sequence[int],
    latency: Sequence[float],
    chunks: int,
    deadline: Deadline = NEVER,
    relays: frozenset[int] = frozenset(),
) -> Packing:
    r"""Trade rate for depth when the fill counts: the packing whose estimated makespan
    ``chunks / z + D`` (slots) is least, over depth caps ``D``.

    A pipelined schedule of ``chunks`` chunks per root at rate ``z`` ends about
    ``chunks / z`` slots after it starts, plus the latency depth ``D`` of its deepest tree (the
    last chunk still has to reach the farthest leaf). :func:`shallow_packing` keeps the
    optimal rate ``x*``; where the links that keep the rate at ``x*`` are only reachable by
    deep trees (AMD x2 at 64 MB: the xGMI links are nearly as busy as the NIC uplinks, so the
    trees inside the far chassis are chains of 6-12 xGMI hops of 72 slots each, against
    about 19,000 slots of transfer), giving up a little rate for a much shallower deepest
    tree ends earlier. For caps ``D`` between the shallowest depth any tree can have (the
    latency-shortest path trees) and the packing's own, the largest rate ``z(D)`` of trees no
    deeper than ``D`` is an LP (columns: the trees seen so far plus shortest-path trees
    under ``|pi| + mu L`` kept when shallow enough); the cap with the least
    ``chunks / z(D) + D`` wins if it beats the packing's own estimate by :data:`_CAP_GAIN`.
    At large sizes ``chunks / z`` dwarfs any depth and the packing stays.

    Returns
    -------
    Packing
        ``packing`` itself, or the capped one (method ``"<method>+capped"``, its rate below
        the packing's).
    """
    start = time.perf_counter()
    roots = list(packing.trees)
    if not roots or packing.rate <= 0 or chunks <= 0:
        return packing
    lat = np.asarray(latency, dtype=float)
    term = np.asarray(sorted(terminals), dtype=np.int64)
    pricing = _Pricing(net, roots, term, lat)
    own_depth = max(depth(t, net.src, net.dst, lat) for r in roots for t in packing.trees[r])
    own = chunks / packing.rate + own_depth
    spt_links, shallowest = pricing(lat + 1e-9)
    low = max(shallowest)
    log.debug("trees: depth %.0f slots, shallowest %.0f, estimate %.0f", own_depth, low, own)
    if own_depth <= low or (own_depth - low) < _CAP_GAIN * own:
        return packing  # no depth to gain, or none worth the estimate's margin
    pool: list[tuple[Tree, float, dict[int, int]]] = []
    for r in roots:
        for t in packing.trees[r]:
            kept = Tree(r, t.links)
            pool.append((kept, depth(t, net.src, net.dst, lat), link_loads(t, net.src, net.dst, relays)))
    # the latency-shortest trees: every cap from ``low`` up has a column per root
    for i, r in enumerate(roots):
        t = Tree(r, spt_links[i])
        pool.append((t, shallowest[i], link_loads(t, net.src, net.dst, relays)))
    best: tuple[float, float, float, dict[int, list[Tree]]] | None = None
    # from the deepest cap down: the rate falls ever faster as the cap drops (the estimate is
    # about convex in the cap), so the first cap whose estimate is worse than the best so far
    # ends the scan
    for step in range(_CAP_STEPS - 1, -1, -1):
        if deadline.expired:
            break
        cap_depth = low + (own_depth - low) * step / _CAP_STEPS
        rate, trees = _capped_rate(net, roots, pool, cap_depth + 1e-9, pricing, lat, relays, deadline)
        if rate <= 0:
            break
        deepest = max(depth(t, net.src, net.dst, lat) for r in roots for t in trees[r])
        estimate = chunks / rate + deepest
        log.debug("trees: depth cap %.0f slots: rate %.6g, estimate %.0f slots", cap_depth, rate, estimate)
        if best is not None and estimate > best[0]:
            break
        best = (estimate, rate, deepest, trees)
    if best is None or best[0] > own * (1 - _CAP_GAIN):
        log.info("trees: no depth cap beats the packing's estimate %.0f slots (%.2f s)", own,
                 time.perf_counter() - start)
        return packing
    estimate, rate, deepest, trees = best
    log.info(
        "trees: depth capped %.0f -> %.0f slots at rate %.6g (%.4f of the packing's), estimate %.0f -> %.0f "
        "slots (%.2f s)", own_depth, deepest, rate, rate / packing.rate, own, estimate,
        time.perf_counter() - start,
    )
    return Packing(
        trees, rate, packing.optimal, f"{packing.method}+capped", packing.iterations,
        packing.seconds + time.perf_counter() - start,
    )


WINDOW_GRAIN = 1024
"""Window shares are rounded to multiples of ``1 / grain`` (a power of two keeps the exact
max-flows' integers small; where they still overflow, :data:`WINDOW_GRAIN_COARSE`)."""
WINDOW_GRAIN_COARSE = 256


def windowed_network(
    net: Network, latency: Sequence[float], roots: Sequence[int], terminals: Sequence[int],
    horizon: float, scale: float = 1.0, grain: int = WINDOW_GRAIN, cuts: np.ndarray | None = None,
) -> Network:
    r"""``net`` with each link's capacity cut to the share of ``horizon`` slots it can be used.

    A byte crosses link ``e = (u, v)`` no earlier than ``a(u)`` (the latency distance from the
    nearest root to ``u``) and must still reach a terminal after it, ``L_e + b(v)`` (``b``:
    distance to the nearest terminal); so in a schedule of ``horizon`` slots the link carries
    at most ``c_e (horizon - a(u) - L_e - b(v)) / horizon`` on average -- the ``windowed`` part
    of the physical bound (:mod:`ccplan.physical`) in slot units. A packing at the optimal rate
    saturates every link of the binding cut, including NIC links whose window is several alphas
    shorter than the xGMI links' beside them, and the schedule then ends a full NIC path late;
    packed on the windowed capacities (``scale`` multiplies the cut), the short-window links
    are left the slack their window lacks and the long-window ones carry the difference (AMD x2
    AllGather 64 MB, C = 1,024: 19,929 -> 19,565 slots with the priority placement of
    :func:`~ccplan.heuristics.trees_jit.place_by_priority`). Shares are rounded to multiples of
    ``1 / grain``; ``cuts`` are :func:`window_cuts` of the same arguments when already known.
    """
    if cuts is None:
        cuts = window_cuts(net, latency, roots, terminals)
    caps = []
    for cap, cut in zip(net.cap, cuts, strict=True):
        share = max(0.0, 1.0 - scale * cut / horizon) if np.isfinite(cut) and horizon > 0 else 0.0
        caps.append(cap * Fraction(round(share * grain), grain))
    return replace(net, cap=tuple(caps))


def window_cuts(
    net: Network, latency: Sequence[float], roots: Sequence[int], terminals: Sequence[int]
) -> np.ndarray:
    """Per link ``e = (u, v)``: ``a(u) + L_e + b(v)`` in slots (:func:`windowed_network`), inf
    where no root reaches ``u`` or ``v`` reaches no terminal."""
    n = net.n
    lat = np.asarray(latency, dtype=float)
    graph = sp.csr_array((lat + 1e-12, (list(net.src), list(net.dst))), shape=(n, n))
    a = dijkstra(graph, directed=True, indices=list(roots), min_only=True)
    b = dijkstra(graph.T.tocsr(), directed=True, indices=list(terminals), min_only=True)
    return np.asarray(a[list(net.src)] + lat + b[list(net.dst)], dtype=float)
