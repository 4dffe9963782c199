"""Compiled row-by-row rule of :mod:`ccplan.heuristics.layered` for uniform receivers.

On a torus or a mesh every receiver is *uniform* (its in-links share one latency), so the
weight of a candidate pair (in-link of receiver ``p``, chunk ``c``) is
``_FIXED_BY_HELD[in_held[p, c]] + score[c]``: it depends on the receiver and the chunk only
(``layered._State.uniform_fixed``). One layer then matches the receivers in ascending node
position with :func:`ccplan.heuristics.layered._rows_first`'s rule: each row (a free unit of
an in-link, in the order of ``topo.in_links``) takes the lowest chunk of its link's largest
weight that no earlier row took; where a row finds none, or there are more rows than
columns, the receiver's full assignment is solved (scipy, in Python).

:func:`rows_first_run` applies that rule to a run of receivers in compiled code, reading
every candidate pair's current weight from the bits (``_State.cand``), so a layer costs a
few nanoseconds per pair instead of numpy's per-call cost over blocks of pairs or a heap
operation per stale key. A commit changes what later receivers of the layer see only
through the chunk scores (its own holdings and in-link bits are its receiver's, matched
once per layer), so the run keeps its own copies of the chunks' holder and unsatisfied
counts and updates the scores as ``layered_schedule``'s ``commit`` does. It stops at the
first receiver whose rule fails, so that Python commits the choices so far, solves that
receiver in full with the scores its commits produced (:func:`assignment_matrix` builds
the matrix scipy solves), and resumes after it. :func:`commit_run` is the array part of
those commits.

Numba compiles each function on its first call in a process and caches the machine code
beside this file (``cache=True``) for later processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit


def _njit(func: Callable[..., Any]) -> Any:
    """``njit(cache=True, nogil=True)``, or without the on-disk cache when numba finds no
    writable place for it (a read-only install and a read-only or missing HOME): the
    function is then compiled once per process instead of failing the engine."""
    try:
        return njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(func)

# _SET_BITS[x, :_SET_COUNT[x]]: the positions of the set bits of byte x, ascending
_SET_COUNT = np.array([bin(x).count("1") for x in range(256)], dtype=np.int64)
_SET_BITS = np.zeros((256, 8), dtype=np.int64)
for _x in range(256):
    _SET_BITS[_x, : _SET_COUNT[_x]] = [k for k in range(8) if _x >> k & 1]


@_njit
def _chunk_score(holders: int, unsat: int, rank_part: int, max_holders: int, rarity_cap: int) -> int:
    """The chunk part of a weight, as ``layered._State.rescore`` computes it."""
    return min(max(max_holders - holders, 0), rarity_cap) * 10**4 + min(unsat, 99) * 100 + rank_part


@_njit
def rows_first_run(
    cand: np.ndarray,
    links: np.ndarray,
    units: np.ndarray,
    heads: np.ndarray,
    cuts: np.ndarray,
    first: int,
    in_held: np.ndarray,
    fixed: np.ndarray,
    score_now: np.ndarray,
    holders_now: np.ndarray,
    unsat_now: np.ndarray,
    rank_part: np.ndarray,
    max_holders: int,
    rarity_cap: int,
    out_link: np.ndarray,
    out_chunk: np.ndarray,
) -> tuple[int, int]:
    """Match receivers ``first, first + 1, ...`` of a layer by the row-by-row rule.

    Parameters
    ----------
    cand : (E, ceil(C / 8)) uint8
        Candidate bits per link (bit ``c``: the tail holds chunk ``c``, the head neither has
        nor awaits it), little-endian within a byte.
    links, units, heads : (K,) arrays
        The layer's links with a candidate and a free unit, grouped by receiver in the
        order of the receivers' in-link lists; their free units and heads (node positions).
    cuts : (R + 1,) array
        Receiver ``g`` owns ``links[cuts[g]:cuts[g + 1]]``.
    first : int
        The receiver to start from.
    in_held : (V, C) uint8
        In-link tails of each receiver that hold each chunk.
    fixed : int64 array
        ``layered._FIXED_BY_HELD``: the wanted and exclusive part of a weight by ``in_held``.
    score_now, holders_now, unsat_now : (C,) int64
        The chunk part of the weights, holders (copies in flight included) and unsatisfied
        targets now; read, not written (the run updates its own copies).
    rank_part : (C,) int64
        ``99 - min(rank, 99)`` per chunk.
    max_holders, rarity_cap : int
        The terms of the chunk score (``layered._State.rescore``).
    out_link, out_chunk : (sum(units),) int64
        Filled with the chosen pairs, receiver by receiver, row by row.

    Returns
    -------
    (int, int)
        The receiver whose rule failed (-1: none, every receiver matched) and the number of
        pairs written for the receivers before it.
    """
    n_chunks = in_held.shape[1]
    row_bytes = cand.shape[1]
    score = score_now.copy()
    holders = holders_now.copy()
    unsat = unsat_now.copy()
    taken = np.zeros(n_chunks, dtype=np.bool_)
    tops = np.empty(0, dtype=np.int64)
    top_lo = np.empty(0, dtype=np.int64)
    top_hi = np.empty(0, dtype=np.int64)
    n_out = 0
    set_count = _SET_COUNT
    set_bits = _SET_BITS
    for g in range(first, len(cuts) - 1):
        a = cuts[g]
        b = cuts[g + 1]
        p = heads[a]
        held_row = in_held[p]
        m = b - a
        if len(top_lo) < m:
            top_lo = np.empty(m, dtype=np.int64)
            top_hi = np.empty(m, dtype=np.int64)
        if len(tops) < m * n_chunks:
            tops = np.empty(m * n_chunks, dtype=np.int64)
        rows = 0
        most = 0
        at = 0
        for i in range(m):
            row = cand[links[a + i]]
            rows += units[a + i]
            best = -1
            count = 0
            lo = at
            for byte in range(row_bytes):
                x = row[byte]
                if x == 0:
                    continue
                base = byte * 8
                n_set = set_count[x]
                count += n_set
                for q in range(n_set):
                    c = base + set_bits[x, q]
                    w = fixed[held_row[c]] + score[c]
                    if w > best:
                        best = w
                        at = lo
                        tops[at] = c
                        at += 1
                    elif w == best:
                        tops[at] = c
                        at += 1
            top_lo[i] = lo
            top_hi[i] = at
            most = max(most, count)
        failed = False
        if rows > most:
            # more rows than columns: scipy solves the transposed problem (_rows_first)
            distinct = 0
            for byte in range(row_bytes):
                x = 0
                for i in range(m):
                    x |= cand[links[a + i], byte]
                distinct += set_count[x]
            failed = rows > distinct
        start = n_out
        if not failed:
            for i in range(m):
                for _ in range(units[a + i]):
                    pick = -1
                    for q in range(top_lo[i], top_hi[i]):
                        if not taken[tops[q]]:
                            pick = tops[q]
                            break
                    if pick < 0:
                        failed = True
                        break
                    taken[pick] = True
                    out_link[n_out] = links[a + i]
                    out_chunk[n_out] = pick
                    n_out += 1
                if failed:
                    break
        for q in range(start, n_out):
            taken[out_chunk[q]] = False
        if failed:
            return g, start
        for q in range(start, n_out):
            c = out_chunk[q]
            holders[c] += 1
            unsat[c] -= 1
            score[c] = _chunk_score(holders[c], unsat[c], rank_part[c], max_holders, rarity_cap)
    return -1, n_out


@_njit
def assignment_matrix(
    cand: np.ndarray,
    links: np.ndarray,
    units: np.ndarray,
    p: int,
    in_held: np.ndarray,
    fixed: np.ndarray,
    score: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matrix ``layered._assign`` gives scipy for uniform receiver ``p``: one row per
    free unit of ``links`` (in order), one column per chunk some link offers (ascending), the
    pair's current weight where the link offers the chunk and 0 elsewhere.

    Returns
    -------
    (ndarray, ndarray, ndarray)
        The int64 matrix, the chunk of each column and the link of each row.
    """
    n_chunks = in_held.shape[1]
    row_bytes = cand.shape[1]
    col_of = np.full(n_chunks, -1, dtype=np.int64)
    n_cols = 0
    for byte in range(row_bytes):
        x = 0
        for i in range(len(links)):
            x |= cand[links[i], byte]
        for q in range(_SET_COUNT[x]):
            col_of[byte * 8 + _SET_BITS[x, q]] = n_cols
            n_cols += 1
    cols = np.empty(n_cols, dtype=np.int64)
    for c in range(n_chunks):
        if col_of[c] >= 0:
            cols[col_of[c]] = c
    n_rows = 0
    for i in range(len(links)):
        n_rows += units[i]
    mat = np.zeros((n_rows, n_cols), dtype=np.int64)
    row_link = np.empty(n_rows, dtype=np.int64)
    r = 0
    for i in range(len(links)):
        j = links[i]
        for _ in range(units[i]):
            row_link[r] = j
            for byte in range(row_bytes):
                x = cand[j, byte]
                for q in range(_SET_COUNT[x]):
                    c = byte * 8 + _SET_BITS[x, q]
                    mat[r, col_of[c]] = fixed[in_held[p, c]] + score[c]
            r += 1
    return mat, cols, row_link


@_njit
def commit_run(
    links: np.ndarray,
    chunks: np.ndarray,
    head_pos: np.ndarray,
    have: np.ndarray,
    cand: np.ndarray,
    lacking: np.ndarray,
    in_links: np.ndarray,
    holders: np.ndarray,
    unsat: np.ndarray,
    wants: np.ndarray,
    score: np.ndarray,
    rank_part: np.ndarray,
    max_holders: int,
    rarity_cap: int,
) -> int:
    """The array part of ``layered_schedule``'s ``commit`` for the sends ``(links[q],
    chunks[q])`` in order, written into the run's state: the receiver has the chunk, its
    in-links no longer offer it (bits and counts), one more holder, one fewer unsatisfied
    target where the receiver wanted it, the chunk score.

    ``in_links``: per node position its in-links, padded with -1; ``wants``: (C, V). For links
    without reservations (one-slot windows, no single-port): the caller checks.

    Returns
    -------
    int
        How many of the sends delivered a chunk the receiver wanted.
    """
    done = 0
    for q in range(len(links)):
        c = chunks[q]
        pv = head_pos[links[q]]
        have[pv, c] = True
        byte = c >> 3
        m = np.uint8(1 << (c & 7))
        for r in range(in_links.shape[1]):
            k = in_links[pv, r]
            if k < 0:
                break
            if cand[k, byte] & m:
                cand[k, byte] ^= m
                lacking[k] -= 1
        holders[c] += 1
        if wants[c, pv]:
            wants[c, pv] = False
            unsat[c] -= 1
            done += 1
        score[c] = _chunk_score(holders[c], unsat[c], rank_part[c], max_holders, rarity_cap)
    return done
