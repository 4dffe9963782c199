"""The flow bound's symmetry shortcut: automorphisms of the network, proposed by colour
refinement and each one checked, that prove a destination's max-flow bound equal to one already
computed, so :func:`ccplan.bounds.slots._slot_bounds` may skip it (:class:`_Symmetry`). A
failed proposal or check costs time, never a value."""

from __future__ import annotations

import time

import numpy as np

from ccplan.bounds.movement import _DestView, _holder_matrix, _Movement

_SYMMETRY_FAILURES = 4
"""Searches for an automorphism that may fail before the searches stop for the run."""

_SYMMETRY_STEPS = 16
"""Individualisations one proposal may make before it gives up."""

_SYMMETRY_SHARE = 0.25
"""A search starts only while the searches so far took at most this share of the seconds
the flows took: symmetry costs a run without any at most about a quarter more."""


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class _Refiner:
    """Colour refinement (1-dimensional Weisfeiler-Leman) on a directed graph with link
    classes, vectorised: a node's new colour hashes its colour with the multisets of
    ``(link class, colour)`` over its out- and in-links. Used only to *propose* a node
    permutation; :class:`_Symmetry` checks every proposal before it is used."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, link_class: np.ndarray) -> None:
        self.n = n
        self.src = src
        self.dst = dst
        cls = link_class.astype(np.uint64)
        self.salt_out = _mix(cls * np.uint64(2) + np.uint64(1))
        self.salt_in = _mix(cls * np.uint64(2) + np.uint64(2))
        self.by_src = np.argsort(src, kind="stable")
        self.out_nodes, self.out_starts = np.unique(src[self.by_src], return_index=True)
        self.by_dst = np.argsort(dst, kind="stable")
        self.in_nodes, self.in_starts = np.unique(dst[self.by_dst], return_index=True)

    def refine(self, colour: np.ndarray) -> np.ndarray:
        """The stable refinement of ``colour`` (labels ``0 ..``, ordered by hash, so labels
        of two graphs refined together as one are comparable)."""
        classes = len(np.unique(colour))
        while True:
            c = _mix(colour.astype(np.uint64) + np.uint64(7))
            out = np.zeros(self.n, dtype=np.uint64)
            inn = np.zeros(self.n, dtype=np.uint64)
            if len(self.out_nodes):
                h = _mix(self.salt_out ^ c[self.dst])
                out[self.out_nodes] = np.add.reduceat(h[self.by_src], self.out_starts)
                h = _mix(self.salt_in ^ c[self.src])
                inn[self.in_nodes] = np.add.reduceat(h[self.by_dst], self.in_starts)
            key = _mix(c ^ _mix(out + np.uint64(3))) ^ _mix(inn + np.uint64(5))
            labels, new = np.unique(key, return_inverse=True)
            if len(labels) == classes:
                return new.astype(np.int64)
            classes = len(labels)
            colour = new


class _Symmetry:
    """Automorphisms that let a destination's max-flow be skipped, each one checked.

    A node permutation ``sigma`` is *checked* for destinations ``r`` and ``w`` when (a) it is
    a permutation of the nodes, (b) it maps every link ``(a, b)`` onto a link ``(sigma(a),
    sigma(b))`` of the same class (``l``, ``L``, ``omega``, outage slots, alpha, transfer
    time: :func:`_link_classes`; with no parallel links and ``sigma`` a bijection this is a
    bijection of the links), (c) ``sigma(r) = w`` and ``|K_w| = |K_r|``, and (d) ``w``'s view
    is ``r``'s carried over: ``source_w(sigma(u)) = source_r(u)``, ``e_w(sigma(u)) =
    e_r(u)``, ``dist(sigma(x), w) = dist(x, r)`` for every node. Then for every ``D`` the
    max-flow network of ``w`` (module docstring, "Cut (max-flow)") is the image of ``r``'s
    under ``sigma``: a link's capacity ``cap_e(D)`` is the count of starts in ``[e(tail),
    D - L_e - dist(head, dest)]`` under its own ``l``, ``omega`` and outages, all of which
    ``sigma`` preserves, and so are the source arcs. Isomorphic networks have equal
    max-flows, so ``w``'s flow bound equals ``r``'s, which the running bound already covers.

    Where the permutations come from does not matter to that argument: colour refinement
    with individualisation (:class:`_Refiner`, :meth:`_propose`: three ways of pairing the
    nodes of a cell, no backtracking) proposes one that maps ``r`` to ``w``, proposals that
    pass (a)-(b) become generators (with their inverses), and a destination reached from a
    computed one by a chain of generators is checked, (c)-(d), with the composed
    permutation (a product of permutations that pass (a)-(b) passes them). A proposal or a
    check that fails costs time, never a value: that destination's flow is computed.
    """

    def __init__(self, prob: _Movement, views: dict[int, _DestView]) -> None:
        self.prob = prob
        self.views = views
        self.n = prob.n
        self.link_class = _link_classes(prob)
        self.keys = prob.src * self.n + prob.dst
        self.key_order = np.argsort(self.keys)
        self.sorted_keys = self.keys[self.key_order]
        self.unique_links = bool(np.all(np.diff(self.sorted_keys) > 0))
        self.refiner = _Refiner(prob.n, prob.src, prob.dst, self.link_class)
        n = prob.n
        union_src = np.concatenate([prob.src, prob.src + n])
        union_dst = np.concatenate([prob.dst, prob.dst + n])
        self.union = _Refiner(2 * n, union_src, union_dst, np.concatenate([self.link_class] * 2))
        self.base: np.ndarray | None = None  # the stable colouring of the graph, on first search
        self.generators: list[np.ndarray] = []
        self.roots: list[int] = []  # destinations whose flow was computed
        self.parent = np.full(n, -1, dtype=np.int64)
        self.via = np.full(n, -1, dtype=np.int64)  # generator index: x = generators[via[x]][parent[x]]
        self.root_of = np.full(n, -1, dtype=np.int64)
        self.failures = 0
        self.ways = ["shift", "keep", "greedy"]
        self.search_seconds = 0.0
        self.skipped = 0

    # -- checks ---------------------------------------------------------------------------
    def _is_link_automorphism(self, sigma: np.ndarray) -> bool:
        n = self.n
        if len(sigma) != n or sigma.min() < 0 or sigma.max() >= n:
            return False
        if not np.array_equal(np.bincount(sigma, minlength=n), np.ones(n, dtype=np.int64)):
            return False
        want = sigma[self.prob.src] * n + sigma[self.prob.dst]
        pos = np.minimum(np.searchsorted(self.sorted_keys, want), len(want) - 1)
        found = self.sorted_keys[pos] == want
        if not found.all():
            return False
        return bool(np.array_equal(self.link_class[self.key_order[pos]], self.link_class))

    def _carries_view(self, sigma: np.ndarray, r: int, w: int) -> bool:
        a, b = self.views[r], self.views[w]
        return (
            int(sigma[r]) == w
            and a.need == b.need
            and np.array_equal(b.source[sigma], a.source)
            and np.array_equal(b.earliest[sigma], a.earliest)
            and np.array_equal(b.to_v[sigma], a.to_v)
        )

    # -- orbits under the generators ------------------------------------------------------
    def _grow(self, starts: list[int]) -> None:
        """Reach, breadth first under the generators, every node not yet reached, from the
        ``starts`` not yet reached (each the root of what it reaches)."""
        frontier = np.array([r for r in starts if self.root_of[r] < 0], dtype=np.int64)
        self.root_of[frontier] = frontier
        while len(frontier):
            found = []
            for i, g in enumerate(self.generators):
                image = g[frontier]
                fresh = self.root_of[image] < 0
                if not fresh.any():
                    continue
                image, first = np.unique(image[fresh], return_index=True)
                came = frontier[fresh][first]
                self.root_of[image] = self.root_of[came]
                self.parent[image] = came
                self.via[image] = i
                found.append(image)
            frontier = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def _regrow(self) -> None:
        self.root_of[:] = -1
        self.parent[:] = -1
        self.via[:] = -1
        self._grow(list(self.roots))

    def _composed(self, w: int) -> np.ndarray:
        """The product of the generators along ``w``'s path from its root."""
        chain = []
        x = w
        while self.parent[x] >= 0:
            chain.append(int(self.via[x]))
            x = int(self.parent[x])
        sigma = np.arange(self.n, dtype=np.int64)
        for i in reversed(chain):
            sigma = self.generators[i][sigma]
        return sigma

    # -- proposals ------------------------------------------------------------------------
    def _base(self) -> np.ndarray:
        if self.base is None:
            prob = self.prob
            kind = np.zeros(self.n, dtype=np.int64)
            need = np.zeros(self.n, dtype=np.int64)
            for v, cs in prob.needs.items():
                need[v] = len(cs)
            held = np.bincount(_holder_matrix(prob).indices, minlength=self.n)
            start = np.unique(np.stack([kind, need, held], axis=1), axis=0, return_inverse=True)[1]
            self.base = self.refiner.refine(start.reshape(-1).astype(np.int64))
        return self.base

    def _propose(self, r: int, w: int, how: str) -> np.ndarray | None:
        """A permutation with ``r -> w`` from refinement with individualisation, or None.

        After each refinement the cells of more than one node are split by pairing nodes of
        the two graphs: ``"greedy"`` pairs the first node of the smallest such cell;
        ``"shift"`` pairs every such cell's nodes in id order, all cells at once (a rotation
        of a ring of chassis shifts the ids); ``"keep"`` pairs with itself each node found in
        the same cell of both graphs (a chassis swap fixes the other chassis), and a cell
        without one in id order."""
        n = self.n
        base = self._base()
        if base[r] != base[w]:
            return None
        colour = np.concatenate([base, base])
        fresh = int(colour.max()) + 1
        colour[r] = colour[n + w] = fresh
        for _ in range(_SYMMETRY_STEPS):
            colour = self.union.refine(colour)
            size = int(colour.max()) + 1
            here = np.bincount(colour[:n], minlength=size)
            there = np.bincount(colour[n:], minlength=size)
            if not np.array_equal(here, there):
                return None
            if here.max() == 1:
                place = np.empty(size, dtype=np.int64)
                place[colour[n:]] = np.arange(n)
                return place[colour[:n]]
            colour = colour.copy()
            if how == "greedy":
                cell = int(np.flatnonzero(here == here[here > 1].min())[0])
                x = int(np.flatnonzero(colour[:n] == cell)[0])
                y = int(np.flatnonzero(colour[n:] == cell)[0])
                colour[x] = colour[n + y] = size
                continue
            for cell in np.flatnonzero(here > 1).tolist():
                xs = np.flatnonzero(colour[:n] == cell)
                ys = np.flatnonzero(colour[n:] == cell)
                common = np.intersect1d(xs, ys) if how == "keep" else xs[:0]
                if len(common):
                    colour[common] = colour[n + common] = size + np.arange(len(common))
                    size += len(common)
                else:
                    colour[xs] = colour[n + ys] = size + np.arange(len(xs))
                    size += len(xs)
        return None

    # -- the flow loop's questions --------------------------------------------------------
    def covered(self, w: int, flow_seconds: float) -> bool:
        """Whether ``w``'s flow bound is proven equal to a computed destination's (then it
        is already in the running bound). Searches for a generator first when ``w`` is not
        reached yet, within the time share :data:`_SYMMETRY_SHARE` of ``flow_seconds``
        (the first search is free) and :data:`_SYMMETRY_FAILURES`."""
        if (
            self.root_of[w] < 0
            and self.failures < _SYMMETRY_FAILURES
            and self.unique_links
            and (not self.generators or self.search_seconds <= _SYMMETRY_SHARE * flow_seconds)
        ):
            self._search(w)
        root = int(self.root_of[w])
        if root < 0 or root == w or self.failures >= _SYMMETRY_FAILURES:
            return False
        if not self._carries_view(self._composed(w), root, w):
            self.failures += 1
            return False
        self.skipped += 1
        return True

    def _search(self, w: int) -> None:
        """Look for a generator mapping a computed destination of ``w``'s colour onto ``w``;
        the way of proposing that worked last is tried first."""
        t0 = time.perf_counter()
        base = self._base()
        r = next((r for r in self.roots if base[r] == base[w]), None)
        if r is not None:
            for how in list(self.ways):
                sigma = self._propose(r, w, how)
                if sigma is not None and self._is_link_automorphism(sigma):
                    self.ways.remove(how)
                    self.ways.insert(0, how)
                    self.generators.append(sigma)
                    inverse = np.empty_like(sigma)
                    inverse[sigma] = np.arange(self.n)
                    self.generators.append(inverse)
                    self._regrow()
                    break
            else:
                self.failures += 1
        self.search_seconds += time.perf_counter() - t0

    def computed(self, w: int) -> None:
        """``w``'s flow was computed: it becomes a root."""
        self.roots.append(w)
        self._grow([w])


def _link_classes(prob: _Movement) -> np.ndarray:
    """Per link, a class id: links of one class have the same ``l``, ``L``, ``omega``,
    outage slots, alpha and transfer time (and cut-through weights)."""
    outage_id = np.zeros(len(prob.src), dtype=np.int64)
    tables: dict[tuple[int, ...], int] = {}
    for link, slots in prob.outages.items():
        outage_id[link] = tables.setdefault(tuple(slots), len(tables) + 1)
    columns = [prob.occ, prob.lat, prob.omega_links, outage_id]
    floats = [prob.alpha_us, prob.transfer_us, prob.tail_us, prob.head_us]
    table = np.stack([np.asarray(c, dtype=np.float64) for c in columns + floats], axis=1)
    return np.unique(table, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)
