"""The three slot bounds of a data-movement problem (:mod:`ccplan.bounds` package docstring):
latency, ingress and the cut -- the per-destination max-flow searches with the set cuts folded
in, cheapest first and with the symmetry shortcut."""

from __future__ import annotations

import logging
import time
from functools import partial

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from ccplan.bounds.movement import (
    _check_reachable,
    _dest_views,
    _DestView,
    _distances,
    _holder_distances,
    _Movement,
)
from ccplan.bounds.search import _min_feasible, _min_feasible_near, _SlotCapacity
from ccplan.bounds.setcuts import _set_cut_slots, _set_cuts
from ccplan.bounds.symmetry import _Symmetry

log = logging.getLogger(__name__)

SYMMETRY = True
"""Skip a destination's max-flow when a checked automorphism maps an already computed
destination onto it (:class:`_Symmetry`). ``False`` runs every flow (the tests compare)."""


def _slot_caps(prob: _Movement, caps: _SlotCapacity, view: _DestView, D: int) -> np.ndarray:
    lo = view.earliest[prob.src]
    hi = D - prob.lat - view.to_v[prob.dst]
    return caps.count(lo, hi.astype(float))


def _ingress_ok(prob: _Movement, caps: _SlotCapacity, into: np.ndarray, view: _DestView, D: int) -> bool:
    """Whether the links ``into`` the destination can carry its chunks by ``D``."""
    lo = view.earliest[prob.src[into]]
    hi = D - prob.lat[into] - view.to_v[prob.dst[into]]
    return int(caps.count(lo, hi.astype(float), into).sum()) >= view.need


def _flow_ok(prob: _Movement, caps: _SlotCapacity, view: _DestView, D: int) -> bool:
    link_caps = _slot_caps(prob, caps, view, D)
    if int(link_caps[prob.dst == view.v].sum()) < view.need:
        return False
    s = prob.n
    # the CSR arrays directly, rows in (src, dst) order (the super-source s = n comes last):
    # building them through a COO matrix per destination took a third of the flows' time
    order = _link_order(prob)
    ordered = link_caps[order]
    keep = ordered > 0
    srcs = np.flatnonzero(view.source)
    indices = np.concatenate([prob.dst[order][keep], srcs]).astype(np.int32)
    data = np.concatenate([ordered[keep], view.source[srcs]]).astype(np.int32)
    counts = np.bincount(prob.src[order][keep], minlength=s)
    indptr = np.concatenate([[0], np.cumsum(counts), [len(indices)]]).astype(np.int32)
    graph = sp.csr_array((data, indices, indptr), shape=(s + 1, s + 1))
    value = int(maximum_flow(graph, s, view.v).flow_value)
    return value >= view.need


def _link_order(prob: _Movement) -> np.ndarray:
    """Link indices sorted by (src, dst), kept on the (frozen) problem."""
    order = prob.__dict__.get("_link_order")
    if order is None:
        order = np.lexsort((prob.dst, prob.src))
        object.__setattr__(prob, "_link_order", order)
    return order


def _slot_bounds(prob: _Movement, windows: bool, stop_at: int | None = None) -> tuple[int, int, int]:
    """``(latency, ingress, cut)`` in slots for a data-movement problem.

    With ``stop_at``, the parts are computed cheapest first (latency, ingress, set cuts, the
    per-destination flows) and the rest is skipped, reported as the best so far, once that
    reaches ``stop_at`` (see :func:`lower_bound_slots`).
    """
    if not prob.needs:
        return 0, 0, 0
    dist = _distances(prob, prob.lat)
    hdist = _holder_distances(prob, dist)
    _check_reachable(prob, hdist)
    latency = int(max(hdist[cs, v].max() for v, cs in prob.needs.items()))
    if stop_at is not None and latency >= stop_at:
        return latency, latency, latency
    caps = _SlotCapacity(prob)
    views = _dest_views(prob, dist, hdist, windows)
    order = np.argsort(prob.dst, kind="stable")
    bounds = np.searchsorted(prob.dst[order], np.arange(prob.n + 1))
    per_dest: dict[int, int] = {}
    guess = 0
    for view in views:
        # each search starts at the previous destination's value: alike destinations take
        # two checks instead of a search from 0
        into = order[bounds[view.v] : bounds[view.v + 1]]
        guess = per_dest[view.v] = _min_feasible_near(partial(_ingress_ok, prob, caps, into, view), guess)
    ingress = max(per_dest.values())
    if stop_at is not None and max(latency, ingress) >= stop_at:
        best = max(latency, ingress)
        return latency, ingress, best
    cut = max(ingress, _set_cut_slots(prob, caps, _set_cuts(prob, dist, hdist, windows)))
    if stop_at is not None and cut >= stop_at:
        return latency, ingress, cut
    # Destinations with the largest ingress first: they are the likeliest to bind, and every
    # later destination then needs one max-flow when it is already feasible at the running bound.
    # A destination that a checked automorphism maps from a computed one has the same flow
    # bound (_Symmetry), already in `cut`: on a torus one flow stands for all.
    sym = _Symmetry(prob, {view.v: view for view in views}) if SYMMETRY else None
    flow_seconds = 0.0
    for view in sorted(views, key=lambda w: -per_dest[w.v]):
        if sym is not None and sym.covered(view.v, flow_seconds):
            continue
        t0 = time.perf_counter()
        cut = _min_feasible(partial(_flow_ok, prob, caps, view), cut)
        flow_seconds += time.perf_counter() - t0
        if sym is not None:
            sym.computed(view.v)
    if sym is not None:
        log.debug(
            "flow bound: %d of %d destinations by symmetry (%d generators, %.2f s searching)",
            sym.skipped,
            len(views),
            len(sym.generators) // 2,
            sym.search_seconds,
        )
    return latency, ingress, cut
