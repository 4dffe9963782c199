"""Continuous-time flow machinery of the physical bound: the network, shortest alpha paths,
exact minimum cuts and the Newton search on one flow problem (see :mod:`ccplan.physical`).

Capacities are bytes per microsecond; times are microseconds. Max-flows run on integers
(:func:`scipy.sparse.csgraph.maximum_flow` takes int32), but every decision is taken on the
exact floating-point value of the cut the integer flow exposes: a cut is a real node set, so a
bound read from it is valid whatever the rounding, and the rounding only decides how close to
the optimum the search stops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, dijkstra, maximum_flow

from ccplan.errors import ValidationError

log = logging.getLogger(__name__)

BYTES_PER_US_PER_GBPS = 1e3
"""1 GB/s moves 1e3 bytes per microsecond."""

_INT_BUDGET = 1_000_000_000  # demand scaled to this many integer units (int32 leaves 2x headroom)
_ACCEPT = 1e-9  # a cut within this relative distance of the demand counts as satisfied
_MAX_NEWTON = 200


@dataclass(frozen=True)
class Net:
    """A directed network: ``n`` nodes, links ``src[e] -> dst[e]`` with bandwidth ``bw[e]``
    (bytes/us) and latency ``alpha[e]`` (us); ``gpu[i]`` marks GPUs."""

    n: int
    src: np.ndarray
    dst: np.ndarray
    bw: np.ndarray
    alpha: np.ndarray
    gpu: np.ndarray

    def reversed(self) -> Net:
        """The same network with every link turned around."""
        return Net(self.n, self.dst, self.src, self.bw, self.alpha, self.gpu)

    @cached_property
    def alpha_graph(self) -> sp.csr_array:
        # Explicit zeros are kept as edges by csgraph (alpha may be 0); links are unique.
        return sp.csr_array((self.alpha.astype(float), (self.src, self.dst)), shape=(self.n, self.n))

    @cached_property
    def bw_in(self) -> np.ndarray:
        return np.bincount(self.dst, weights=self.bw, minlength=self.n)

    @cached_property
    def bw_out(self) -> np.ndarray:
        return np.bincount(self.src, weights=self.bw, minlength=self.n)

    def dist_from(self, nodes: list[int] | np.ndarray) -> np.ndarray:
        """``min_{s in nodes} dist_alpha(s, u)`` for every ``u`` (``inf`` if unreachable)."""
        out = dijkstra(
            self.alpha_graph, directed=True, indices=np.asarray(nodes, dtype=np.int64), min_only=True
        )
        return np.asarray(out, dtype=float)

    def dist_rows(self, nodes: list[int] | np.ndarray) -> np.ndarray:
        """``dist_alpha(s, u)`` per row ``s in nodes``."""
        out = dijkstra(self.alpha_graph, directed=True, indices=np.asarray(nodes, dtype=np.int64))
        return np.atleast_2d(np.asarray(out, dtype=float))

    def dist_to(self, nodes: list[int] | np.ndarray) -> np.ndarray:
        """``min_{t in nodes} dist_alpha(u, t)`` for every ``u``."""
        return self.reversed().dist_from(nodes)


@dataclass
class Member:
    """One flow problem: ``sources[h]`` bytes enter at ``h``, ``sinks[t]`` bytes must leave at
    ``t`` (equal totals), on ``net``. ``name`` says what it stands for (logs, notes)."""

    net: Net
    sources: dict[int, float]
    sinks: dict[int, float]
    name: str
    windows: np.ndarray | None = field(default=None, repr=False)

    @property
    def demand(self) -> float:
        return float(sum(self.sinks.values()))

    def window_offsets(self) -> np.ndarray:
        """Per link ``w_e = a(tail) + alpha_e + b(head)``: bytes of this problem cross ``e`` only
        in ``[a(tail), T - alpha_e - b(head)]``, a window of length ``T - w_e`` (module docs of
        :mod:`ccplan.physical`). ``inf`` where no byte can use the link."""
        if self.windows is None:
            net = self.net
            a = net.dist_from(sorted(self.sources))
            b = net.dist_to(sorted(self.sinks))
            self.windows = a[net.src] + net.alpha + b[net.dst]
        return self.windows


def _solve_cut(constant: float, bw: np.ndarray, w: np.ndarray, demand: float) -> float:
    """Smallest ``T`` with ``constant + sum_e bw_e max(0, T - w_e) >= demand``."""
    need = demand - constant
    keep = np.isfinite(w) & (bw > 0)
    bw, w = bw[keep], w[keep]
    if need <= 0:
        return 0.0
    if not len(w):
        return float("inf")
    order = np.argsort(w)
    w, bw = w[order], bw[order]
    slope = np.cumsum(bw)
    offset = np.cumsum(bw * w)
    t = (need + offset) / slope  # solution if exactly the first k+1 links are open
    nxt = np.r_[w[1:], np.inf]
    ok = np.flatnonzero(t <= nxt)
    return float(t[ok[0]])


class FlowProblem:
    """Newton search on one :class:`Member`: the smallest ``T`` at which every cut carries the
    demand, link ``e`` carrying ``bw_e * max(0, T - w_e)`` bytes (``w_e = 0`` without windows)."""

    def __init__(self, member: Member, windowed: bool) -> None:
        self.member = member
        net = member.net
        self.w = member.window_offsets() if windowed else np.zeros(len(net.src))
        n = net.n
        self.sigma, self.tau = n, n + 1
        src_nodes = np.array(sorted(member.sources), dtype=np.int64)
        sink_nodes = np.array(sorted(member.sinks), dtype=np.int64)
        self.src_nodes, self.sink_nodes = src_nodes, sink_nodes
        self.src_bytes = np.array([member.sources[h] for h in src_nodes], dtype=float)
        self.sink_bytes = np.array([member.sinks[t] for t in sink_nodes], dtype=float)
        self.rows = np.r_[net.src, np.full(len(src_nodes), self.sigma), sink_nodes]
        self.cols = np.r_[net.dst, src_nodes, np.full(len(sink_nodes), self.tau)]
        self.demand = member.demand
        self.flows = 0

    def _caps(self, t: float) -> np.ndarray:
        net = self.member.net
        link = net.bw * np.maximum(0.0, t - self.w)
        link[~np.isfinite(self.w)] = 0.0
        return np.r_[link, self.src_bytes, self.sink_bytes]

    def min_cut(self, t: float) -> np.ndarray:
        """Source side (boolean over the ``n`` nodes) of a minimum cut at time ``t``."""
        caps = np.minimum(self._caps(t), self.demand)  # no arc carries more than the demand
        scale = _INT_BUDGET / self.demand
        ints = np.floor(caps * scale + 0.5).astype(np.int64)
        keep = ints > 0
        size = self.member.net.n + 2
        graph = sp.csr_array(
            (ints[keep].astype(np.int32), (self.rows[keep], self.cols[keep])), shape=(size, size)
        )
        result = maximum_flow(graph, self.sigma, self.tau)
        self.flows += 1
        residual = (graph - result.flow).tocsr()
        residual.data[residual.data < 0] = 0
        residual.eliminate_zeros()
        reach = breadth_first_order(residual, self.sigma, directed=True, return_predecessors=False)
        side = np.zeros(size, dtype=bool)
        side[reach] = True
        return side[: self.member.net.n]

    def cut_parts(self, side: np.ndarray) -> tuple[float, np.ndarray]:
        """Constant bytes and the mask of links of the cut with source side ``side``."""
        net = self.member.net
        constant = float(
            self.src_bytes[~side[self.src_nodes]].sum() + self.sink_bytes[side[self.sink_nodes]].sum()
        )
        links = side[net.src] & ~side[net.dst]
        return constant, links

    def cut_value(self, side: np.ndarray, t: float) -> float:
        constant, links = self.cut_parts(side)
        net = self.member.net
        w = self.w[links]
        ok = np.isfinite(w)
        return constant + float((net.bw[links][ok] * np.maximum(0.0, t - w[ok])).sum())

    def search(self, start: float) -> tuple[float, bool]:
        """Smallest feasible ``T >= start`` (Newton on violated minimum cuts).

        Returns ``(T, moved)``: ``moved`` is False when ``start`` is already feasible (then the
        member's own optimum may be below ``start``). Every value returned above ``start`` is
        the root of a real cut's capacity equation, hence a valid lower bound.
        """
        t = max(start, 0.0)
        moved = False
        for _ in range(_MAX_NEWTON):
            side = self.min_cut(t)
            if self.cut_value(side, t) >= self.demand * (1 - _ACCEPT):
                return t, moved
            constant, links = self.cut_parts(side)
            net = self.member.net
            nxt = _solve_cut(constant, net.bw[links], self.w[links], self.demand)
            if not np.isfinite(nxt):
                raise ValidationError(
                    f"{self.member.name}: the data cannot reach its destination (no directed path); "
                    "the instance is infeasible"
                )
            if nxt <= t * (1 + 1e-15):
                return t, moved  # rounding: the cut is as good as satisfied
            t, moved = nxt, True
        log.warning("%s: Newton search stopped after %d steps at %.6g us", self.member.name, _MAX_NEWTON, t)
        return t, moved


def pair_maxflow(net: Net, u: int, v: int) -> float:
    """Exact ``u -> v`` max-flow in bytes/us (min cut read back in floating point)."""
    member = Member(net, {u: 1.0}, {v: 1.0}, f"pair {u}->{v}")
    prob = FlowProblem(member, windowed=False)
    # At T = 1 the demand is 1 byte and links carry bw bytes: scale so the cut is meaningful.
    total = float(net.bw.sum()) * 2 + 1.0  # more than any cut of links: never the terminals' arcs
    prob.src_bytes[:] = total
    prob.sink_bytes[:] = total
    prob.demand = total
    side = prob.min_cut(1.0)
    _, links = prob.cut_parts(side)
    return float(net.bw[links].sum())
