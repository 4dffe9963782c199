"""The microsecond bounds of a data-movement problem (:mod:`ccplan.bounds` package docstring,
"The microsecond bounds"): the continuous latency bound and the per-destination fractional
flow cut, found exactly by a Newton iteration on minimum cuts."""

from __future__ import annotations

import numpy as np

from ccplan.bounds.movement import (
    _check_reachable,
    _dest_views,
    _DestView,
    _distances,
    _holder_distances,
    _Movement,
)
from ccplan.bounds.search import _solve_piecewise
from ccplan.bounds.setcuts import _set_cut_us, _set_cuts

_REL_TOL = 1e-12


def _continuous_cut(prob: _Movement, windows: bool, dist_us: np.ndarray, hdist_us: np.ndarray) -> float:
    """Smallest ``T`` (us) with every destination's fractional flow feasible (package docstring)."""
    import networkx as nx

    if not prob.needs:
        return 0.0
    rate = prob.omega / prob.transfer_us  # chunks per microsecond per link
    views = _dest_views(prob, dist_us, hdist_us, windows)
    s = prob.n
    best = _set_cut_us(prob, _set_cuts(prob, dist_us, hdist_us, windows), windows)
    for view in views:
        # c_e: the time before which link e can deliver nothing useful to v.
        offset = prob.alpha_us + view.earliest[prob.src] + view.to_v[prob.dst] if windows else np.zeros(
            len(prob.src)
        )
        usable = np.isfinite(offset)

        def solve_cut(inside: np.ndarray, view: _DestView = view, offset: np.ndarray = offset,
                      usable: np.ndarray = usable) -> float:
            held_outside = float(view.source[~inside[: prob.n]].sum())
            crossing = usable & inside[prob.src] & ~inside[prob.dst]
            return _solve_piecewise(view.need - held_outside, offset[crossing], rate[crossing])

        T = max(best, solve_cut(np.arange(prob.n + 1) != view.v))
        for _ in range(10_000):
            graph = nx.DiGraph()
            graph.add_node(s)
            graph.add_nodes_from(range(prob.n))
            cap = np.where(usable, rate * np.maximum(0.0, T - np.where(usable, offset, 0.0)), 0.0)
            for e in np.nonzero(cap > 0)[0]:
                graph.add_edge(int(prob.src[e]), int(prob.dst[e]), capacity=float(cap[e]))
            for u in np.nonzero(view.source)[0]:
                graph.add_edge(s, int(u), capacity=float(view.source[u]))
            value, (reach, _) = nx.minimum_cut(graph, s, view.v)
            if value >= view.need * (1 - 1e-9):
                break
            inside = np.zeros(prob.n + 1, dtype=bool)
            inside[list(reach)] = True
            T_next = solve_cut(inside)
            if T_next <= T * (1 + _REL_TOL):
                # Float noise: the violated cut is already met at T up to rounding.
                break
            T = T_next
        best = max(best, T)
    return best


def _continuous_of(prob: _Movement, windows: bool) -> tuple[float, float]:
    if not prob.needs:
        return 0.0, 0.0
    dist_us = _distances(prob, prob.tail_us)
    hdist_us = _holder_distances(prob, dist_us)
    _check_reachable(prob, hdist_us)
    latency_us = float(max(hdist_us[cs, v].max() for v, cs in prob.needs.items()))
    if not np.array_equal(prob.head_us, prob.tail_us):
        dist_us = _distances(prob, prob.head_us)
        hdist_us = _holder_distances(prob, dist_us)
    return latency_us, _continuous_cut(prob, windows, dist_us, hdist_us)


def _continuous_cut_of(prob: _Movement, windows: bool) -> float:
    if not prob.needs:
        return 0.0
    dist_us = _distances(prob, prob.alpha_us + prob.transfer_us)
    hdist_us = _holder_distances(prob, dist_us)
    _check_reachable(prob, hdist_us)
    return _continuous_cut(prob, windows, dist_us, hdist_us)
