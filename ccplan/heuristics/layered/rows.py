"""The assignment rules of one receiver for :class:`~ccplan.heuristics.layered.fastpath._FastPath`:
row by row from the kept pairs (:func:`_rows_scan`) or from the receiver's pairs
(:func:`_rows_first`) where no rows compete, else the full assignment (:func:`_assign`,
scipy's ``linear_sum_assignment``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

_CONFLICT: list[tuple[int, int]] = []  # _rows_scan's answer when rows compete for one column
_ASSIGN_MASK_FROM = 256  # _assign finds its columns with a mask above this many pairs, else by sorting


def _rows_scan(
    s_chunk: list[int],
    s_fixed: list[int],
    s_w0: list[int],
    score: Sequence[int],
    starts: list[int],
    floor: list[int],
    cut: list[bool],
    units: list[int],
    links: list[int],
    a: int,
    b: int,
) -> list[tuple[int, int]] | None:
    """Row-by-row assignment of the receiver of link slots ``a .. b-1`` (see
    :class:`_FastPath`) from each link's pairs kept at the start of the layer: ``(link,
    chunk)`` per row; :data:`_CONFLICT` when a row finds every best column taken (the optimal
    assignment may re-route a row), None when it needs pairs that were not kept (then the
    caller computes the receiver in full).

    ``s_chunk``/``s_fixed``/``s_w0``: per kept pair its chunk, the fixed part of its weight and
    its weight at the start of the layer; link ``i``'s pairs are ``starts[i] .. starts[i+1]-1``,
    sorted by start weight, largest first, lowest chunk first on a tie, and are all its pairs
    of start weight ``>= floor[i]``, except when ``cut[i]``: then they are its first pairs in
    that order down to one of start weight ``floor[i]``, and a pair left out weighs less or
    as much with a higher chunk; ``score``: the current chunk part of the weights.
    """
    taken: set[int] = set()
    chosen: list[tuple[int, int]] = []
    for i in range(a, b):
        best = -1
        tops: list[int] = []
        need = units[i]
        ready = 0  # untaken chunks of the largest weight met among pairs whose start weight equals it
        for q in range(starts[i], starts[i + 1]):
            start = s_w0[q]
            # the rest weigh at most ``start`` now; at ``start == best`` they are higher chunks
            # than the ``ready`` ones of the same start weight, so none of them is picked
            if start < best or (start == best and ready >= need):
                break
            c = s_chunk[q]
            now = s_fixed[q] + score[c]
            if now > best:
                best = now
                tops = [c]
                ready = 0
            elif now == best:
                tops.append(c)
            else:
                continue
            if start == best and c not in taken:
                ready += 1
        else:
            if best < floor[i] or (cut[i] and best == floor[i] and ready < need):
                # a pair left out may weigh as much now (if it ties with the last kept one
                # and enough untaken kept ones of that start weight are lowest, it does not)
                return None
        for _ in range(need):
            free = [c for c in tops if c not in taken]
            if not free:
                return _CONFLICT  # every best column is taken: the assignment may re-route a row
            c = min(free)
            taken.add(c)
            chosen.append((links[i], c))
    return chosen


def _rows_first(
    w: np.ndarray, chunks: np.ndarray, rel: np.ndarray, counts: np.ndarray, units: list[int]
) -> list[tuple[int, int]] | None:
    """Row-by-row assignment of one receiver (see :class:`_FastPath`): ``(link, chunk)`` per
    row, the link as its place among the receiver's links, or None when it may differ from the
    choice of the optimal assignment.

    ``w`` and ``chunks``: the receiver's candidate pairs, link by link, chunks ascending
    within a link; ``rel``/``counts``: where each link's pairs start and how many there are.
    """
    rows = sum(units)
    if rows > int(counts.max()) and rows > len(np.unique(chunks)):
        return None  # more rows than columns: scipy solves the transposed problem
    best = np.flatnonzero(w == np.repeat(np.maximum.reduceat(w, rel), counts))
    link_of = np.searchsorted(rel, best, side="right") - 1
    best_chunks = chunks[best].tolist()
    tops: list[list[int]] = [[] for _ in units]
    for i, ci in zip(link_of.tolist(), best_chunks, strict=True):
        tops[i].append(ci)
    taken: set[int] = set()
    picks: list[tuple[int, int]] = []
    for i, n_units in enumerate(units):
        for _ in range(n_units):
            for ci in tops[i]:
                if ci not in taken:
                    break
            else:
                return None  # every best column is taken: the assignment may re-route a row
            taken.add(ci)
            picks.append((i, ci))
    return picks


def _assign(
    w: np.ndarray, chunks: np.ndarray, counts: np.ndarray, units: list[int], links: list[int]
) -> list[tuple[int, int]]:
    """The full assignment of one receiver, on the matrix :func:`_match_receiver` builds
    (rows: link units in order; columns: the offered chunks ascending; 0 where not offered)."""
    n = len(units)
    if len(chunks) > _ASSIGN_MASK_FROM:
        # many pairs: the columns as a mask over chunk ids, a chunk's column the count of
        # offered chunks below it (np.unique and searchsorted were half of a call at 4,096
        # GPUs); a few pairs (NDv2's 131,072 small calls): the sort is cheaper
        mask = np.zeros(int(chunks.max()) + 1, dtype=bool)
        mask[chunks] = True
        cols = np.flatnonzero(mask)
        at = (np.cumsum(mask) - 1)[chunks]
    else:
        cols = np.unique(chunks)
        at = np.searchsorted(cols, chunks)
    per_link = np.zeros((n, len(cols)), dtype=np.int64)
    per_link[np.repeat(np.arange(n), counts), at] = w
    if max(units) == 1:
        row_links = list(range(n))
        mat = per_link
    else:
        row_links = [i for i, u in enumerate(units) for _ in range(u)]
        mat = per_link[row_links]
    rows, colsel = linear_sum_assignment(mat, maximize=True)
    keep = mat[rows, colsel] > 0
    picked = zip(rows[keep].tolist(), cols[colsel[keep]].tolist(), strict=True)
    return [(links[row_links[r]], k) for r, k in picked]

