"""Set cuts (folded into the cut bound; :mod:`ccplan.bounds` package docstring, "Set cuts"):
for a node set ``S``, the distinct chunks held only inside and wanted outside must each cross a
link leaving ``S``. The candidate sets (singletons: egress; bandwidth clusters: chassis), their
cuts, and the smallest makespan in slots and in microseconds that meets them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ccplan.bounds.movement import _holder_matrix, _Movement
from ccplan.bounds.search import _min_feasible, _SlotCapacity, _solve_piecewise


@dataclass(frozen=True)
class _SetCut:
    """The aggregate cut of one node set ``S``: ``need`` distinct chunks held only inside ``S`` and
    wanted outside it must each cross a link leaving ``S`` (``leaving``), with windows from the
    earliest slot a tail can hold one of them (``earliest``) and the distance from a head to the
    nearest outside node that wants one (``to_out``)."""

    need: int
    leaving: np.ndarray
    earliest: np.ndarray
    to_out: np.ndarray


def _candidate_sets(prob: _Movement) -> list[np.ndarray]:
    """Singletons (egress) and the bandwidth clusters: for every link speed, the weakly connected
    components of the links strictly faster than it (the chassis of a hierarchical machine)."""
    sets: list[np.ndarray] = []
    for u in range(prob.n):
        mask = np.zeros(prob.n, dtype=bool)
        mask[u] = True
        sets.append(mask)
    for threshold in np.unique(prob.transfer_us):
        fast = prob.transfer_us < threshold
        if not fast.any():
            continue
        graph = sp.csr_array(
            (np.ones(int(fast.sum())), (prob.src[fast], prob.dst[fast])), shape=(prob.n, prob.n)
        )
        count, labels = connected_components(graph, directed=True, connection="weak")
        if count < 2:
            continue
        for k in range(count):
            mask = labels == k
            if 1 < int(mask.sum()) < prob.n:
                sets.append(mask)
    unique: dict[bytes, np.ndarray] = {m.tobytes(): m for m in sets}
    return list(unique.values())


def _set_cuts(prob: _Movement, dist: np.ndarray, hdist: np.ndarray, windows: bool) -> list[_SetCut]:
    """The aggregate cuts of the candidate sets that have something to push out.

    Per set, the chunks held only inside come from a sparse product over the holders (one
    entry per holding, not a chunk x node product) and the crossing demands from the rows of
    those chunks only; the distance to the outside destinations is 0 at a destination and
    taken as a minimum for the other nodes only. The per-set work is so about the set's own
    chunks times the nodes, where a dense chunk x node product per set made the cuts of a
    64x64 torus (4,096 singletons) cubic in the GPUs.
    """
    num_chunks = len(prob.holders)
    held = _holder_matrix(prob)
    need = np.zeros((num_chunks, prob.n), dtype=bool)
    for v, cs in prob.needs.items():
        need[cs, v] = True
    out = []
    for inside in _candidate_sets(prob):
        only_inside = np.flatnonzero((held @ (~inside).astype(np.int32)) == 0)
        if not len(only_inside):
            continue
        outside = np.flatnonzero(~inside)
        sub = need[np.ix_(only_inside, outside)]
        chunk_hit = sub.any(axis=1)
        if not chunk_hit.any():
            continue
        chunks = only_inside[chunk_hit]
        dests = outside[sub.any(axis=0)]
        leaving = inside[prob.src] & ~inside[prob.dst]
        if windows:
            earliest = hdist[chunks].min(axis=0)
            to_out = np.zeros(prob.n, dtype=dist.dtype)
            is_dest = np.zeros(prob.n, dtype=bool)
            is_dest[dests] = True
            others = np.flatnonzero(~is_dest)
            # dist[d, d] == 0, so a destination's own distance to the set of destinations is 0
            to_out[others] = dist[np.ix_(others, dests)].min(axis=1)
        else:
            earliest = np.zeros(prob.n)
            to_out = np.zeros(prob.n)
        out.append(_SetCut(len(chunks), leaving, earliest, to_out))
    return out


def _set_cut_slots(prob: _Movement, caps: _SlotCapacity, cuts: list[_SetCut]) -> int:
    best = 0
    for cut in cuts:

        links = np.flatnonzero(cut.leaving)

        def ok(D: int, cut: _SetCut = cut, links: np.ndarray = links) -> bool:
            lo = cut.earliest[prob.src[links]]
            hi = (D - prob.lat[links] - cut.to_out[prob.dst[links]]).astype(float)
            return int(caps.count(lo, hi, links).sum()) >= cut.need

        best = max(best, _min_feasible(ok, best))
    return best


def _set_cut_us(prob: _Movement, cuts: list[_SetCut], windows: bool) -> float:
    rate = prob.omega / prob.transfer_us
    best = 0.0
    for cut in cuts:
        if windows:
            offsets = prob.alpha_us + cut.earliest[prob.src] + cut.to_out[prob.dst]
        else:
            offsets = np.zeros(len(prob.src))
        use = cut.leaving & np.isfinite(offsets)
        best = max(best, _solve_piecewise(float(cut.need), offsets[use], rate[use]))
    return best
