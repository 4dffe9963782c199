"""Slot capacities and the searches of the bounds: how many sends fit on a link in a window of
start slots (outages included, :class:`_SlotCapacity`), the smallest feasible makespan ``D`` of a
monotone test (galloping and bisection) and the smallest time ``T`` at which a sum of linear
ramps reaches a need (the continuous cuts)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

from ccplan.bounds.movement import _Movement

_SEARCH_LIMIT = 1 << 40


# --------------------------------------------------------------------------- slot capacities
class _SlotCapacity:
    """Per-link counts of sends that fit in a window of start slots, outages included."""

    def __init__(self, prob: _Movement) -> None:
        self.prob = prob
        self.occ = prob.occ.astype(float)

    def count(self, lo: np.ndarray, hi: np.ndarray, links: np.ndarray | None = None) -> np.ndarray:
        """Max number of sends per link with start slots in ``[lo_e, hi_e]`` (times omega).

        ``lo`` and ``hi`` are float arrays (``inf``/``-inf`` allowed) of integral values, one
        entry per link, or per entry of ``links`` (link indices) when given.
        """
        prob = self.prob
        occ = self.occ if links is None else self.occ[links]
        lo = np.maximum(lo, 0.0)
        span = hi - lo
        ok = np.isfinite(span) & (span >= 0)
        out = np.zeros(len(lo), dtype=np.int64)
        out[ok] = (np.floor(span[ok] / occ[ok]) + 1).astype(np.int64)
        for link, slots in prob.outages.items():
            where = [link] if links is None else np.flatnonzero(links == link).tolist()
            for i in where:
                if ok[i]:
                    out[i] = _greedy_count(int(lo[i]), int(hi[i]), int(prob.occ[link]), slots)
        return out * (prob.omega_links if links is None else prob.omega_links[links])


def _greedy_count(lo: int, hi: int, occ: int, outages: Sequence[int]) -> int:
    """Max number of disjoint ``occ``-slot intervals starting in ``[lo, hi]`` and avoiding the
    (sorted) outage slots: earliest fit is optimal for every horizon (greedy stays ahead)."""
    count = 0
    t = lo
    while t <= hi:
        k = bisect.bisect_left(outages, t)
        if k == len(outages):
            return count + (hi - t) // occ + 1
        blocked = outages[k]
        if blocked <= t + occ - 1:
            # The interval starting at t hits an outage: the next candidate start is just after it.
            t = blocked + 1
            continue
        # Fit as many intervals as possible before the outage, then jump past it.
        fit = (blocked - t) // occ
        last_start = min(hi, t + (fit - 1) * occ)
        count += (last_start - t) // occ + 1
        t = blocked + 1
    return count


# --------------------------------------------------------------------------- searches
def _min_feasible(pred: Callable[[int], bool], lo: int) -> int:
    """Smallest ``D >= lo`` with ``pred(D)`` for a monotone ``pred`` (galloping, then bisection)."""
    if pred(lo):
        return lo
    bad = lo
    step = 1
    good = lo + step
    while not pred(good):
        bad = good
        step *= 2
        good = lo + step
        if step > _SEARCH_LIMIT:
            raise RuntimeError("bound search did not terminate; the instance looks infeasible")
    return _bisect(pred, bad, good)


def _bisect(pred: Callable[[int], bool], bad: int, good: int) -> int:
    """Smallest ``D`` in ``(bad, good]`` with ``pred(D)``, given ``not pred(bad)`` and
    ``pred(good)`` for a monotone ``pred``."""
    while good - bad > 1:
        mid = (good + bad) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good


def _min_feasible_near(pred: Callable[[int], bool], guess: int) -> int:
    """Smallest ``D >= 0`` with ``pred(D)`` for a monotone ``pred``, searched outwards from
    ``guess``: two calls when the answer is ``guess`` (destinations alike, as on a torus),
    galloping and bisection otherwise. The same answer as ``_min_feasible(pred, 0)``."""
    if guess <= 0 or not pred(guess):
        return _min_feasible(pred, max(guess, 0))
    good = guess
    step = 1
    while True:
        probe = max(good - step, 0)
        if not pred(probe):
            bad = probe
            break
        good = probe
        if probe == 0:
            return 0
        step *= 2
    return _bisect(pred, bad, good)


def _solve_piecewise(need: float, offsets: np.ndarray, rates: np.ndarray) -> float:
    """Smallest ``T >= 0`` with ``sum_e rates_e * max(0, T - offsets_e) >= need``."""
    if need <= 0:
        return 0.0
    if len(offsets) == 0:
        raise RuntimeError("a cut with no usable crossing link cannot be satisfied")
    order = np.argsort(offsets)
    off = offsets[order]
    rt = rates[order]
    slope = 0.0
    intercept = 0.0  # sum of rate * offset over active links
    for i in range(len(off)):
        slope += rt[i]
        intercept += rt[i] * off[i]
        T = (need + intercept) / slope
        if i + 1 == len(off) or off[i + 1] >= T:
            return float(max(T, 0.0))
    raise AssertionError("unreachable")
