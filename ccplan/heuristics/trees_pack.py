r"""Optimal tree-packing rate and spanning-tree packing for the ``trees`` engine.

The method is ForestColl's (Zhao et al., "ForestColl: Efficient Collective Communications on
Heterogeneous Network Fabrics", 2024), written from the paper:

**Optimal rate.** Every root ``r`` of ``R`` (all GPUs for AllGather, the root for Broadcast)
sends at rate ``x`` to every terminal. A cut argument bounds ``x``: the roots inside a node set
``S`` that leaves a terminal out must push their data out of ``S``, so
``x <= B+(S) / |S ∩ R|``. The bound is attained (the paper's theorem), so

.. math:: x^* = \min_{S \not\supseteq T} B^+(S) / |S \cap R|.

It is computed without enumerating cuts: add a super-source ``s`` with an arc ``s -> r`` of
capacity ``x`` for every root; ``x`` is feasible iff every terminal ``v`` has
``maxflow(s, v) >= |R| x`` (a minimum ``s``-``v`` cut with source side ``{s} ∪ S`` has value
``x |R \ S| + B+(S)``, which is ``>= |R| x`` iff ``x <= B+(S) / |S ∩ R|``). :func:`optimal_rate`
runs this test as a Newton (Dinkelbach) iteration: a violated cut ``S`` gives the next,
strictly smaller, candidate ``x = B+(S) / |S ∩ R|``; at the first ``x`` without a violated cut
``x = x*`` exactly. Capacities are rationals scaled to integers, so the max-flows are exact.

**Packing.** ForestColl splits switches off (Bang-Jensen et al. splitting preserving the
terminal-to-terminal connectivity) and packs ``k`` out-arborescences per root with Edmonds'
branching theorem. Here the packing is *fractional*, by column generation
(:func:`pack_trees`): the master LP maximises the common rate ``z`` of all roots over
weighted trees under the link capacities; the pricing problem of root ``r`` is a minimum-cost
spanning arborescence (Chu-Liu/Edmonds, :func:`min_arborescence`) on the terminals, where the
arc ``u -> v`` costs the dual length of the cheapest path from ``u`` to ``v`` through relay
nodes (switches) only. That is the splitting-off done implicitly: a terminal-level tree arc is
a path through switches, each path paying for its own links, exactly the arcs that splitting
off would create, so the LP optimum is ``x*`` whenever the splitting theorem applies (every
switch with equal in- and out-capacity). Mapped back, two paths of one tree that meet at a
switch are merged (the switch stores the chunk and copies it), which only frees capacity.

**Switches that cannot reduce** (``relays``: the reduction built from these trees, reversed in
time, relays every partial sum through such a switch instead of adding it there): two paths
of one tree through such a switch are not merged in the load a tree puts on a link
(:func:`link_loads`), so the LP charges each terminal-level arc for its own links, exactly
the splitting-off accounting, and the rate stays ``x*`` wherever splitting-off applies.

Large instances (more terminals than :data:`PACK_LIMIT`) get one load-balanced shortest-path
tree per root instead (:func:`greedy_trees`): no optimality claim, linear work.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, dijkstra, maximum_flow

from ccplan.limits import NEVER, Deadline

log = logging.getLogger(__name__)

PACK_LIMIT = 160
"""Terminal count above which :func:`pack_trees` is replaced by :func:`greedy_trees`."""

_EPS_HOP = 1e-6  # per-link cost added to the duals: ties go to fewer hops, zero duals stay edges
_PROGRESS_EVERY = 5.0  # seconds between progress notes on the log
_MWU_ETA = 4.0  # steepness of the seed rounds' link lengths (exp(eta * used share))


@dataclass(frozen=True)
class Network:
    """A directed graph with rational link capacities, nodes by position ``0 .. n-1``.

    Parameters
    ----------
    n : int
        Number of nodes.
    src, dst : sequence of int
        Link endpoints (positions); at most one link per ordered pair.
    cap : sequence of Fraction
        Link capacities (any unit; the rate comes out in the same unit).
    """

    n: int
    src: tuple[int, ...]
    dst: tuple[int, ...]
    cap: tuple[Fraction, ...]
    index: dict[tuple[int, int], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pairs = zip(self.src, self.dst, strict=True)
        object.__setattr__(self, "index", {(u, v): e for e, (u, v) in enumerate(pairs)})

    @property
    def num_links(self) -> int:
        """Number of links."""
        return len(self.src)

    def out_capacity(self, nodes: set[int]) -> Fraction:
        """``B+(S)``: total capacity of the links leaving ``nodes``."""
        return sum(
            (c for u, v, c in zip(self.src, self.dst, self.cap, strict=True)
             if u in nodes and v not in nodes),
            Fraction(0),
        )


def _integer_scale(values: Sequence[Fraction]) -> int:
    scale = 1
    for v in values:
        scale = scale * v.denominator // math.gcd(scale, v.denominator)
    return scale


def optimal_rate(
    net: Network, roots: Sequence[int], terminals: Sequence[int], deadline: Deadline = NEVER
) -> tuple[Fraction, frozenset[int] | None]:
    """The optimal per-root rate ``x*`` and a cut ``S`` that attains it (module docstring).

    Parameters
    ----------
    net : Network
    roots : sequence of int
        Nodes that each send their own data to every terminal.
    terminals : sequence of int
        Nodes that must receive every root's data (the roots among them).

    Returns
    -------
    (Fraction, frozenset or None)
        ``x*`` in the unit of ``net.cap`` and the node set ``S`` whose ratio
        ``B+(S) / |S ∩ R|`` equals it (None when the start value, a terminal's in-capacity
        over the roots it lacks, is already feasible and no cut was needed).
    """
    root_set = set(roots)
    n = net.n
    scale = _integer_scale(net.cap)
    icap = [int(c * scale) for c in net.cap]
    # Start above x*: the cut "everything but terminal v" (its in-capacity over the roots it lacks).
    incap = [Fraction(0)] * n
    for v, c in zip(net.dst, net.cap, strict=True):
        incap[v] += c
    starts = {v: incap[v] / len(root_set - {v}) for v in terminals if root_set - {v}}
    if not starts:
        return Fraction(0), None
    first = min(starts, key=lambda v: starts[v])
    x = starts[first]
    cut: frozenset[int] | None = frozenset(set(range(n)) - {first})
    s = n
    rows = list(net.src) + [s] * len(roots)
    cols = list(net.dst) + list(roots)
    order = list(terminals)
    k = 0
    checked = 0
    graph = None
    while checked < len(order):
        deadline.check()
        if graph is None:
            # x = a / b in capacity units; integers: links icap * b, source arcs a * scale
            a, b = x.numerator, x.denominator
            data = np.array([c * b for c in icap] + [a * scale] * len(roots), dtype=np.int64)
            if data.max() >= 2**31:
                raise ValueError(f"capacities too fine for exact max-flows (rate {x})")
            graph = sp.csr_array((data, (rows, cols)), shape=(n + 1, n + 1))
            graph = sp.csr_array(
                (graph.data.astype(np.int32), graph.indices, graph.indptr), shape=graph.shape
            )
        v = order[k % len(order)]
        need = len(root_set) * a * scale
        res = maximum_flow(graph, s, v)
        if res.flow_value >= need:
            checked += 1
            k += 1
            continue
        side = _source_side(graph, res.flow, s)
        S = frozenset(int(u) for u in side if u != s)
        inside = len(S & root_set)
        x_new = net.out_capacity(set(S)) / inside
        if not x_new < x:  # pragma: no cover - the min cut is violated, so its ratio is smaller
            raise RuntimeError(f"rate iteration did not decrease ({x_new} >= {x})")
        x, cut, checked, graph = x_new, S, 0, None
        log.debug("trees: violated cut of %d nodes, rate now %s", len(S), x)
    return x, cut


def _source_side(graph: sp.csr_array, flow: sp.csr_array, s: int) -> np.ndarray:
    """Nodes reachable from ``s`` in the residual graph of a maximum flow."""
    # flow is antisymmetric; the residual of (i, j) is cap(i, j) - flow(i, j), on both directions
    cap = graph.astype(np.int64)
    pattern = cap + cap.T
    resid = (cap - flow.astype(np.int64)).tocsr()
    resid = resid + 0 * pattern
    resid.data = np.where(resid.data > 0, 1, 0).astype(np.int8)
    resid.eliminate_zeros()
    return breadth_first_order(resid, s, directed=True, return_predecessors=False)


def min_arborescence(weights: np.ndarray, root: int) -> np.ndarray:
    """Minimum-cost spanning arborescence rooted at ``root`` (Chu-Liu/Edmonds, dense).

    Parameters
    ----------
    weights : numpy.ndarray
        ``(n, n)``, ``weights[u, v]`` the cost of arc ``u -> v``, ``inf`` where there is none.
    root : int

    Returns
    -------
    numpy.ndarray
        ``parent[v]`` for every node, ``-1`` at the root.

    Raises
    ------
    ValueError
        A node is unreachable from the root.
    """
    n = weights.shape[0]
    w = np.array(weights, dtype=float)
    np.fill_diagonal(w, np.inf)
    w[:, root] = np.inf
    par = np.argmin(w, axis=0)
    best = w[par, np.arange(n)]
    par[root] = -1
    best[root] = 0.0
    if np.isinf(best).any():
        raise ValueError(f"node {int(np.flatnonzero(np.isinf(best))[0])} is unreachable from {root}")
    state = np.zeros(n, dtype=np.int8)
    cycles: list[list[int]] = []
    for v0 in range(n):
        path = []
        v = v0
        while v != -1 and state[v] == 0:
            state[v] = 1
            path.append(v)
            v = int(par[v])
        if v != -1 and state[v] == 1:
            cycles.append(path[path.index(v):])
        for u in path:
            state[u] = 2
    if not cycles:
        return par
    label = np.full(n, -1, dtype=np.int64)
    for i, cyc in enumerate(cycles):
        label[cyc] = i
    rest = np.flatnonzero(label < 0)
    label[rest] = np.arange(len(cycles), len(cycles) + len(rest))
    m = len(cycles) + len(rest)
    in_cycle = label < len(cycles)
    # entering a cycle node v replaces its cycle arc: pay the difference
    adj = w - np.where(in_cycle, best, 0.0)[None, :]
    order = np.argsort(label, kind="stable")
    starts = np.searchsorted(label[order], np.arange(m))
    shrunk = np.minimum.reduceat(np.minimum.reduceat(adj[order][:, order], starts, axis=0), starts, axis=1)
    np.fill_diagonal(shrunk, np.inf)
    sub = min_arborescence(shrunk, int(label[root]))
    members = [order[starts[c]: starts[c + 1] if c + 1 < m else n] for c in range(m)]
    out = par.copy()
    for c in range(m):
        p = int(sub[c])
        if p < 0:
            continue
        mp, mc = members[p], members[c]
        if len(mc) == 1:
            v = int(mc[0])
            out[v] = mp[0] if len(mp) == 1 else mp[int(np.argmin(adj[mp, v]))]
            continue
        block = adj[mp][:, mc]
        i, j = divmod(int(np.argmin(block)), len(mc))
        out[mc[j]] = mp[i]
    out[root] = -1
    return out


@dataclass
class Tree:
    """One out-tree of a packing: ``links`` in topological order (a link's tail is the root
    or the head of an earlier link), ``weight`` its rate."""

    root: int
    links: tuple[int, ...]
    weight: float = 0.0


@dataclass
class Packing:
    """Trees per root and what the packing reached."""

    trees: dict[int, list[Tree]]
    rate: float
    optimal: float
    method: str
    iterations: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        """Figures for an Outcome's details."""
        return {
            "packing": self.method,
            "rate": self.rate,
            "optimal_rate": self.optimal,
            "rate_ratio": self.rate / self.optimal if self.optimal > 0 else None,
            "trees": sum(len(t) for t in self.trees.values()),
            "iterations": self.iterations,
            "packing_seconds": self.seconds,
        }


def link_loads(
    tree: Tree, src: Sequence[int], dst: Sequence[int], relays: frozenset[int] = frozenset()
) -> dict[int, int]:
    """Per link of ``tree``, the number of terminal-level arcs that use it: 1 for a link into
    a node outside ``relays``, the sum over the tree links out of it for a link into a relay
    (module docstring). Every link counts 1 when ``relays`` is empty."""
    if not relays:
        return dict.fromkeys(tree.links, 1)
    below: dict[int, int] = {}
    out: dict[int, int] = {}
    for e in reversed(tree.links):
        b = dst[e]
        out[e] = below.get(b, 0) if b in relays else 1
        below[src[e]] = below.get(src[e], 0) + out[e]
    return out


class _Paths:
    """Cheapest paths between terminals through relay nodes only, under per-link costs.

    Every terminal is split into an out-copy (position ``v``, its out-links) and an in-copy
    (``n + v``, its in-links, no way out), so a path never passes through a terminal.
    """

    def __init__(self, net: Network, terminals: Sequence[int]) -> None:
        self.net = net
        self.terminals = list(terminals)
        n = net.n
        term = set(terminals)
        self.head = np.array([n + v if v in term else v for v in net.dst], dtype=np.int64)
        self.tail = np.array(net.src, dtype=np.int64)
        self.size = 2 * n
        self.pos = {v: i for i, v in enumerate(self.terminals)}
        pairs = zip(self.tail.tolist(), self.head.tolist(), strict=True)
        self.link_of = {(a, b): e for e, (a, b) in enumerate(pairs)}

    def matrix(self, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(W, pred)``: terminal-to-terminal path costs and Dijkstra predecessors."""
        graph = sp.csr_array((cost + _EPS_HOP, (self.tail, self.head)), shape=(self.size, self.size))
        dist, pred = dijkstra(graph, directed=True, indices=self.terminals, return_predecessors=True)
        n = self.net.n
        ins = np.array(self.terminals) + n
        return dist[:, ins], pred

    def tree(self, parent: np.ndarray, root_pos: int, pred: np.ndarray) -> tuple[int, ...]:
        """Physical links of a terminal-level arborescence, paths merged at shared relays."""
        n = self.net.n
        terms = self.terminals
        children: list[list[int]] = [[] for _ in terms]
        for v, p in enumerate(parent.tolist()):
            if p >= 0:
                children[p].append(v)
        inside = {terms[root_pos]}
        links: list[int] = []
        queue = [root_pos]
        for p in queue:
            for c in children[p]:
                queue.append(c)
                # walk the predecessor chain of row p back from c's in-copy
                nodes = [n + terms[c]]
                while nodes[-1] != terms[p]:
                    nodes.append(int(pred[p, nodes[-1]]))
                nodes.reverse()
                cur = terms[p]
                for b in nodes[1:]:
                    real = b - n if b >= n else b
                    if real not in inside:
                        links.append(self.link_of[(cur, b)])
                        inside.add(real)
                    cur = real
        return tuple(links)


class _Master:
    """Master LP, kept warm between rounds (HiGHS adds columns to the last basis):
    max z s.t. z <= the sum of root r's tree weights (dual sigma_r), link loads <= cap (pi_e)."""

    def __init__(self, roots: list[int], cap: np.ndarray) -> None:
        import highspy

        self.nr = len(roots)
        self.row_of = {r: i for i, r in enumerate(roots)}
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "off")  # keep the basis: each round adds columns only
        inf = highspy.kHighsInf
        rows = self.nr + len(cap)
        upper = np.concatenate([np.zeros(self.nr), cap])
        h.addRows(rows, np.full(rows, -inf), upper, 0, np.zeros(1, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(0))
        h.addCol(1.0, 0.0, inf, self.nr, np.arange(self.nr, dtype=np.int32), np.ones(self.nr))
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
        self.h = h
        self.inf = inf

    def add(self, tree: Tree, loads: dict[int, int] | None = None) -> None:
        idx = np.array([self.row_of[tree.root]] + [self.nr + e for e in tree.links], dtype=np.int32)
        vals = np.ones(len(idx))
        vals[0] = -1.0
        if loads is not None:
            vals[1:] = [loads[e] for e in tree.links]
        self.h.addCol(0.0, 0.0, self.inf, len(idx), idx, vals)

    def solve(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """``(z, tree weights, sigma per root, pi per link)``."""
        self.h.run()
        sol = self.h.getSolution()
        duals = np.asarray(sol.row_dual)
        col = np.asarray(sol.col_value)
        return float(col[0]), col[1:], duals[: self.nr], np.maximum(duals[self.nr:], 0.0)

    def maximise_rate(self, columns: int) -> None:
        """The objective back to the common rate ``z`` over all ``columns`` trees (after
        :meth:`prefer`)."""
        self.h.changeColBounds(0, 0.0, self.inf)
        self.h.changeColCost(0, 1.0)
        for j in range(1, columns + 1):
            self.h.changeColCost(j, 0.0)

    def prefer(self, rate_floor: float, costs: Sequence[float]) -> None:
        """Keep ``z >= rate_floor`` and maximise ``sum_j costs[j] y_j`` over the trees instead
        (e.g. minus their squared depths: the shallowest packing at that rate)."""
        self.h.changeColBounds(0, rate_floor, self.inf)
        self.h.changeColCost(0, 0.0)
        for j, c in enumerate(costs, start=1):
            self.h.changeColCost(j, float(c))


def price_rounds(
    master: _Master,
    state: tuple[float, np.ndarray, np.ndarray, np.ndarray],
    price: Callable[[np.ndarray, np.ndarray], int],
    optimal: float,
    gap: float,
    deadline: Deadline,
    max_iterations: int,
    on_round: Callable[[int, float], None] | None = None,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, int]:
    """Column generation (ForestColl's packing LP): from the master's solution ``state`` =
    ``(z, weights, sigma, pi)``, ``price(pi, sigma)`` adds the trees whose reduced cost is
    positive and returns how many; rounds go on until ``z`` is within ``gap`` of ``optimal``,
    no tree prices in, the deadline passes or ``max_iterations`` rounds ran. Returns the last
    solution and the number of rounds."""
    z, weights, sigma, pi = state
    rounds = 0
    for rounds in range(1, max_iterations + 1):
        if z >= optimal * (1 - gap) or deadline.expired:
            break
        if not price(pi, sigma):
            break
        z, weights, sigma, pi = master.solve()
        if on_round is not None:
            on_round(rounds, z)
    return z, weights, sigma, pi, rounds


def pack_trees(
    net: Network,
    roots: Sequence[int],
    terminals: Sequence[int],
    optimal: float,
    deadline: Deadline = NEVER,
    gap: float = 1e-3,
    max_iterations: int = 500,
    seed_rounds: int = 6,
    relays: frozenset[int] = frozenset(),
) -> Packing:
    """Fractional tree packing by column generation (module docstring).

    Parameters
    ----------
    net : Network
    roots, terminals : sequence of int
    optimal : float
        ``x*`` from :func:`optimal_rate`; the generation stops once the LP is within ``gap``
        of it (relative), when no tree prices out, or at the deadline.
    relays : frozenset of int
        Switches (positions) whose paths are not merged in the loads (:func:`link_loads`).

    Returns
    -------
    Packing
        Trees with positive weight per root; ``rate`` is the LP's common rate ``z``.
    """
    start = time.perf_counter()
    cap = np.array([float(c) for c in net.cap])
    paths = _Paths(net, terminals)
    roots = list(roots)
    columns: list[Tree] = []
    master = _Master(roots, cap)
    seen: set[tuple[int, tuple[int, ...]]] = set()
    sigma = np.ones(len(roots))
    pi = np.zeros(net.num_links)
    z = 0.0
    weights = np.zeros(0)
    last_note = start
    # Seed: rounds of multiplicative-weights trees (link length grows exponentially with the
    # share of its capacity already used), so that the LP starts near a balanced packing
    # instead of climbing from min-hop trees one dual step at a time.
    load = np.zeros(net.num_links)
    for k in range(1, seed_rounds + 1):
        for r in roots:
            length = np.exp(np.minimum(_MWU_ETA * load * optimal / (k * cap), 50.0)) / cap
            w, pred = paths.matrix(length)
            rp = paths.pos[r]
            links = paths.tree(min_arborescence(w, rp), rp, pred)
            loads = link_loads(Tree(r, links), net.src, net.dst, relays)
            load[list(loads)] += list(loads.values())
            key = (r, tuple(sorted(links)))
            if key not in seen:
                seen.add(key)
                columns.append(Tree(r, links))
                master.add(columns[-1], loads)
        if deadline.expired:
            break
    if columns:
        z, weights, sigma, pi = master.solve()
        log.debug("trees: %d seed trees, rate %.6g", len(columns), z)
    def price(pi: np.ndarray, sigma: np.ndarray) -> int:
        w, pred = paths.matrix(pi)
        added = 0
        for i, r in enumerate(roots):
            rp = paths.pos[r]
            parent = min_arborescence(w, rp)
            links = paths.tree(parent, rp, pred)
            loads = link_loads(Tree(r, links), net.src, net.dst, relays)
            if float(np.dot(pi[list(loads)], list(loads.values()))) >= sigma[i] - 1e-9:
                continue
            key = (r, tuple(sorted(links)))
            if key in seen:
                continue
            seen.add(key)
            columns.append(Tree(r, links))
            master.add(columns[-1], loads)
            added += 1
        return added

    def on_round(it: int, z: float) -> None:
        nonlocal last_note
        now = time.perf_counter()
        log.debug("trees: round %d, %d trees, rate %.6g", it, len(columns), z)
        if now - last_note >= _PROGRESS_EVERY:
            log.info("trees: packing iteration %d, %d trees, rate %.6g of %.6g", it, len(columns), z, optimal)
            last_note = now

    z, weights, sigma, pi, it = price_rounds(
        master, (z, weights, sigma, pi), price, optimal, gap, deadline, max_iterations, on_round
    )
    trees: dict[int, list[Tree]] = {r: [] for r in roots}
    for t, y in zip(columns, weights.tolist(), strict=True):
        if y > 1e-9:
            trees[t.root].append(Tree(t.root, t.links, y))
    for r in roots:
        if not trees[r]:  # a root the LP starved (z = 0): keep its first tree
            trees[r].append(Tree(r, next(t.links for t in columns if t.root == r), 0.0))
    return Packing(trees, z, optimal, "column-generation", it, time.perf_counter() - start)


def greedy_trees(net: Network, roots: Sequence[int], terminals: Sequence[int], optimal: float) -> Packing:
    """One shortest-path tree per root, link costs growing with the load already placed.

    The cost of a link is ``(1 + load / cap)``, its load counted in trees; a tree is the
    shortest-path tree from its root (relays allowed, only links on paths to terminals kept).
    Returns the trees with the rate they reach: ``1 / max(load / cap)``.
    """
    start = time.perf_counter()
    cap = np.array([float(c) for c in net.cap])
    load = np.zeros(net.num_links)
    src = np.array(net.src, dtype=np.int64)
    dst = np.array(net.dst, dtype=np.int64)
    term = np.zeros(net.n, dtype=bool)
    term[list(terminals)] = True
    trees: dict[int, list[Tree]] = {}
    for r in roots:
        graph = sp.csr_array((1.0 + load / cap, (src, dst)), shape=(net.n, net.n))
        _, pred = dijkstra(graph, directed=True, indices=r, return_predecessors=True)
        keep = np.zeros(net.n, dtype=bool)
        keep[r] = True
        for v in np.flatnonzero(term).tolist():
            while not keep[v]:
                keep[v] = True
                v = int(pred[v])
        nodes = np.flatnonzero(keep & (np.arange(net.n) != r))
        parents = pred[nodes]
        dist_order = _topological(r, nodes, parents)
        links = tuple(net.index[(int(parents[i]), int(nodes[i]))] for i in dist_order)
        load[list(links)] += 1.0
        trees[r] = [Tree(r, links, 1.0)]
    rate = float(1.0 / np.max(load / cap)) if load.any() else 0.0
    return Packing(trees, rate, optimal, "greedy-shortest-path", 1, time.perf_counter() - start)


def _topological(root: int, nodes: np.ndarray, parents: np.ndarray) -> list[int]:
    """Positions of ``nodes`` ordered so that every node comes after its parent."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents.tolist()):
        children.setdefault(p, []).append(i)
    order: list[int] = []
    stack = [root]
    node_list = nodes.tolist()
    while stack:
        u = stack.pop()
        for i in children.get(u, ()):
            order.append(i)
            stack.append(node_list[i])
    return order


def integral_counts(
    net: Network,
    packing: Packing,
    rate: Fraction,
    deadline: Deadline = NEVER,
    loss: float = 0.004,
    sizes: Sequence[int] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128),
    multiple: int = 1,
) -> tuple[int, dict[int, list[int]]] | None:
    """A period ``P`` and integer chunk counts per tree for a periodic schedule.

    In ``P`` slots every root sends ``n`` chunks; tree ``T`` of root ``r`` gets ``n_T`` of
    them (``sum n_T = n`` per root). An integer program over the packing's trees (HiGHS
    through scipy) minimises the largest link load relative to capacity, ``P`` is the
    smallest period in which every link fits its load (``load * l / omega`` slots), rounded
    up to a ``multiple`` (the occupancies' least common multiple, so that sends of ``l``
    slots tile the period), and ``n / P`` is the rate. ``n`` runs over ``sizes`` until
    ``n / P >= (1 - loss) * rate``.

    Returns
    -------
    (int, dict) or None
        ``P`` and, per root position, ``n_T`` for each of its trees (same order as
        ``packing.trees[root]``): the fastest found; None when no program was solved.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    if rate <= 0:
        return None
    roots = list(packing.trees)
    cols = [(r, t) for r in roots for t in packing.trees[r]]
    nr, k = len(roots), len(cols)
    row_of = {r: i for i, r in enumerate(roots)}
    cap = np.array([float(c) for c in net.cap])
    rows, idx, vals = [], [], []
    for j, (r, t) in enumerate(cols):
        rows.append(row_of[r])
        idx.append(j)
        vals.append(1.0)
        for e in t.links:
            rows.append(nr + e)
            idx.append(j)
            vals.append(1.0 / cap[e])
    # link rows: load / cap - lam <= 0 (lam is the last variable)
    rows.extend(range(nr, nr + net.num_links))
    idx.extend([k] * net.num_links)
    vals.extend([-1.0] * net.num_links)
    a = sp.csr_array((vals, (rows, idx)), shape=(nr + net.num_links, k + 1))
    objective = np.zeros(k + 1)
    objective[k] = 1.0
    usage = np.zeros((net.num_links, k))
    for j, (_, t) in enumerate(cols):
        usage[list(t.links), j] = 1.0
    best: tuple[float, int, list[int]] | None = None
    weights = np.array([t.weight for _, t in cols])
    share = np.zeros(k)
    for r in roots:
        mine = [j for j, (q, _) in enumerate(cols) if q == r]
        total = weights[mine].sum()
        share[mine] = weights[mine] / total if total > 0 else 1.0 / len(mine)
    mine_of = {r: [j for j, (q, _) in enumerate(cols) if q == r] for r in roots}

    def period_of(counts: np.ndarray) -> int:
        load = usage @ counts
        period = max(1, int(np.max(np.ceil(load / cap - 1e-9))))
        return -(-period // multiple) * multiple

    for n in sizes:
        if deadline.expired:
            break
        # cheap first: largest-remainder rounding of the LP weights, root by root
        counts = np.floor(share * n).astype(np.int64)
        for mine in mine_of.values():
            short = n - int(counts[mine].sum())
            rest = sorted(mine, key=lambda j: counts[j] - share[j] * n)[:short]
            counts[rest] += 1
        candidates = [counts]
        if n / period_of(counts) < (1 - loss) * float(rate):
            lo = np.concatenate([np.full(nr, float(n)), np.full(net.num_links, -np.inf)])
            hi = np.concatenate([np.full(nr, float(n)), np.zeros(net.num_links)])
            res = milp(
                objective, constraints=LinearConstraint(a, lo, hi),
                integrality=np.concatenate([np.ones(k), [0]]),
                bounds=Bounds(0, np.concatenate([np.full(k, float(n)), [np.inf]])),
                options={"time_limit": max(0.2, min(1.0, deadline.remaining())), "mip_rel_gap": loss / 2},
            )
            if res.x is not None:
                candidates.append(np.rint(res.x[:k]).astype(np.int64))
        for counts in candidates:
            period = period_of(counts)
            got = n / period
            if best is None or got > best[0]:
                best = (got, period, counts.tolist())
        log.debug("trees: %d chunks per root, best period so far %d (%.4f of the rate)",
                  n, best[1] if best else 0, best[0] / float(rate) if best else 0.0)
        if best is not None and best[0] >= (1 - loss) * float(rate):
            break
    if best is None:
        return None
    out: dict[int, list[int]] = {r: [] for r in roots}
    for (r, _), c in zip(cols, best[2], strict=True):
        out[r].append(int(c))
    return best[1], out
