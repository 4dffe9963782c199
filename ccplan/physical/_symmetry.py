"""Checked symmetry for the physical bound: automorphisms found by individualisation and
colour refinement, each verified link by link before it is used.

An automorphism ``p`` of the network (a permutation of the nodes mapping every link onto a link
of the same bandwidth and alpha, and every node onto one of the same role) maps each flow
problem of the bound onto another with the same optimum, so per-destination problems need
solving only once per orbit of the group the found automorphisms generate. Refinement uses
hashed colours; a hash collision can only make a candidate fail its verification (then the
search moves on or gives up), never let a non-automorphism through.
"""

from __future__ import annotations

import time

import numpy as np

from ccplan.physical._flow import Net

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        x = x.astype(np.uint64)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


class _Refiner:
    """Colour refinement on two copies of the network at once (so colours compare)."""

    def __init__(self, net: Net, roles: np.ndarray) -> None:
        n = net.n
        self.n = n
        _, labels = np.unique(np.c_[net.bw, net.alpha], axis=0, return_inverse=True)
        lab = _mix(np.asarray(labels, dtype=np.uint64).ravel() + np.uint64(7))
        self.src = np.r_[net.src, net.src + n]
        self.dst = np.r_[net.dst, net.dst + n]
        self.lab = np.r_[lab, lab]
        self.net = net
        self.roles = np.r_[roles, roles].astype(np.int64)
        self.calls = 0

    def refine(self, colors: np.ndarray) -> np.ndarray:
        """Stable colouring finer than ``colors`` (int64 labels, dense)."""
        count = len(np.unique(colors))
        size = 2 * self.n
        with np.errstate(over="ignore"):
            while True:
                self.calls += 1
                h = _mix(colors.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
                out = np.zeros(size, dtype=np.uint64)
                np.add.at(out, self.src, _mix(h[self.dst] ^ self.lab))
                inn = np.zeros(size, dtype=np.uint64)
                np.add.at(inn, self.dst, _mix(h[self.src] + self.lab * np.uint64(3)))
                sig = _mix(h ^ _mix(out + np.uint64(1)) ^ (_mix(inn + np.uint64(2)) * np.uint64(5)))
                _, new = np.unique(sig, return_inverse=True)
                new = np.asarray(new, dtype=np.int64).ravel()
                new_count = int(new.max()) + 1
                colors = new
                if new_count == count:
                    return colors
                count = new_count

    def initial(self) -> np.ndarray:
        return self.refine(self.roles.copy())

    def is_automorphism(self, perm: np.ndarray) -> bool:
        net = self.net
        n = self.n
        if not np.array_equal(self.roles[perm], self.roles[:n]):
            return False
        keys = net.src.astype(np.int64) * n + net.dst
        order = np.argsort(keys)
        sorted_keys = keys[order]
        mapped = perm[net.src].astype(np.int64) * n + perm[net.dst]
        at = np.searchsorted(sorted_keys, mapped)
        at = np.minimum(at, len(keys) - 1)
        if not np.array_equal(sorted_keys[at], mapped):
            return False
        target = order[at]
        return bool(np.array_equal(net.bw[target], net.bw) and np.array_equal(net.alpha[target], net.alpha))

    def search(self, colors: np.ndarray, depth: int, budget: list[int]) -> np.ndarray | None:
        n = self.n
        left, right = colors[:n], colors[n:]
        if not np.array_equal(
            np.bincount(left, minlength=colors.max() + 1), np.bincount(right, minlength=colors.max() + 1)
        ):
            return None
        counts = np.bincount(left)
        if counts.max() == 1:
            perm = np.empty(n, dtype=np.int64)
            where = np.empty(colors.max() + 1, dtype=np.int64)
            where[right] = np.arange(n)
            perm[:] = where[left]
            return perm if self.is_automorphism(perm) else None
        if depth <= 0:
            return None
        # Individualise the smallest vertex of the smallest non-singleton class on the left,
        # and in turn a few members of the same class on the right.
        sizes = np.where(counts > 1, counts, np.iinfo(np.int64).max)
        cls = int(np.argmin(sizes))
        u = int(np.flatnonzero(left == cls)[0])
        fresh = colors.max() + 1
        for v in np.flatnonzero(right == cls)[:3]:
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            trial = colors.copy()
            trial[u] = fresh
            trial[n + int(v)] = fresh
            found = self.search(self.refine(trial), depth - 1, budget)
            if found is not None:
                return found
        return None


def _orbits(n: int, perms: list[np.ndarray]) -> np.ndarray:
    """Orbit label per node of the group generated by ``perms`` (union-find on u ~ p(u))."""
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = int(parent[x])
        return x

    for p in perms:
        for u in range(n):
            a, b = find(u), find(int(p[u]))
            if a != b:
                parent[max(a, b)] = min(a, b)
    return np.array([find(u) for u in range(n)])


def gpu_orbits(net: Net, roles: np.ndarray, seconds: float = 20.0) -> tuple[np.ndarray, int]:
    """Orbits of the nodes under verified automorphisms that preserve ``roles``.

    Tries to map the first GPU onto other GPUs of its refined colour, nearest first, until one
    orbit holds all GPUs of that colour or the time or search budget runs out. Returns the
    orbit label per node (each node its own orbit when nothing is found) and the number of
    automorphisms found.
    """
    deadline = time.perf_counter() + seconds
    ref = _Refiner(net, roles)
    base = ref.initial()
    n = net.n
    gpus = np.flatnonzero(net.gpu)
    perms: list[np.ndarray] = []
    labels = np.arange(n)
    if len(gpus) < 2:
        return labels, 0
    a0 = int(gpus[0])
    same = [int(g) for g in gpus if base[g] == base[a0]]
    # nearest first: GPUs reached early by a breadth-first walk on the links
    hops = _hops(net, a0)
    same.sort(key=lambda g: (hops[g], g))
    tries = 0
    for b in same[1:]:
        if time.perf_counter() > deadline or tries >= 24:
            break
        if labels[b] == labels[a0]:
            continue
        tries += 1
        colors = base.copy()
        fresh = colors.max() + 1
        colors[a0] = fresh
        colors[n + b] = fresh
        perm = ref.search(ref.refine(colors), depth=8, budget=[24])
        if perm is not None:
            perms.append(perm)
            labels = _orbits(n, perms)
            if all(labels[g] == labels[a0] for g in same):
                break
    return labels, len(perms)


def _hops(net: Net, root: int) -> np.ndarray:
    """Hop counts from ``root`` ignoring direction (inf when disconnected)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import shortest_path

    ones = np.ones(len(net.src))
    g = sp.csr_array((ones, (net.src, net.dst)), shape=(net.n, net.n))
    return np.asarray(shortest_path(g, directed=False, unweighted=True, indices=root), dtype=float)
