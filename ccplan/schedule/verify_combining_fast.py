"""A compiled check of combining schedules that accepts exactly what the replay accepts.

:func:`ccplan.schedule.combining.verify_combining` replays a ReduceScatter / Reduce /
AllReduce schedule on contribution sets, a Python dict operation or two per send: at a
million sends (AMD x2 ReduceScatter at C = 1,024) about 20 s. :func:`verify_combining_columns`
applies the same rules, in the same order, to the schedule's columns in one numba pass over
arrays:

- ``state[c, v]`` is the set of contributions to chunk ``c`` summed at node ``v``, a bitmask
  over ``c``'s contributors in ascending id order (``W`` 64-bit words, so any number of
  GPUs), ``forwarded[c, v]`` whether that set was sent on since it arrived, ``full_at[c, v]``
  the slot from which it is the complete set (-1 while it is not);
- the sends are read in chronological order; before the sends of slot ``t`` every arrival due
  at or before ``t`` is applied, in the replay's order (by arrival slot, copies before
  reduces, then in send order), with its rules: a reduce must not overlap the set it lands
  on (``double-count``) and lands on a non-empty set at a switch only when that switch may
  reduce (``switch-reduce``); a copy of the complete set must not land on the complete set
  (``duplicate-receive``), an incomplete copy not on a live, unsent set (``copy-overwrite``);
- a send of an empty set is a ``causality`` violation;
- unknown chunks, missing links, capacity over the occupancy window, outages and
  single-port are checked on the columns, as by :func:`~ccplan.schedule.verify.verify_columns`;
- the postcondition: every ``post`` (chunk, node) ends with the complete set; the makespan is
  the latest ``full_at`` among them.

The pass stops at the first broken rule and the function returns None: the replay then runs
and words every violation. Up to that rule both walk the same states in the same order, so
a rule the pass finds broken the replay finds broken too, and when the pass finds none the
replay finds none (``tests/test_verify_combining_fast.py`` checks the agreement on the
schedules of several engines and on mutations of them).

Under cut-through (docs/model.md) it follows the replay's order within a slot: the arrivals
into the switches, the switches' reads (a switch sends a chunk only in a slot in which it
arrives, and keeps nothing from an earlier slot), the arrivals into the other nodes (with
the switch-to-GPU hops of ``L = 0`` just read), the other reads. It needs every link of
``L < 1`` to lead from a cut-through switch into a node that holds (true of every instance:
``L = delta + l`` elsewhere); otherwise the replay decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ccplan.instances.instance import Instance
from ccplan.schedule.arrivals import ArrivalMap, _node_positions, send_columns
from ccplan.schedule.core import Schedule
from ccplan.schedule.report import Report, occupancy_overloads

log = logging.getLogger(__name__)

COMBINING_FAST_MIN_SENDS = 8192
"""Below this many sends (of a schedule held as Send objects) the replay decides directly:
the compiled pass's fixed cost (numba's import and the load of its cached machine code, about
0.3 s in a fresh process) exceeds the replay's (about 20 us a send)."""

MAX_STATE_WORDS = 1 << 27
"""Largest ``chunks * nodes * W`` the pass holds (1 GB of 64-bit words); beyond, the replay."""


def combining_check_applies(instance: Instance) -> bool:
    """Whether :func:`verify_combining_columns` can decide for ``instance``: a combining
    collective whose links of ``L < 1`` all lead from a cut-through switch into a node that
    holds (every link under store-and-forward; the switch-to-GPU hops under cut-through)."""
    if not instance.collective.combining:
        return False
    latency = np.asarray(instance.latency, dtype=np.int64)
    bufferless = instance.bufferless
    return all(
        bool(latency[j] >= 1) or (lk.src in bufferless and lk.dst not in bufferless)
        for j, lk in enumerate(instance.topology.links)
    )


def _njit(func: Callable[..., Any]) -> Any:
    """``njit(cache=True, nogil=True)``, or without the on-disk cache when numba finds no
    writable place for it (compiled once per process then)."""
    from numba import njit

    try:
        return njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(func)


def _replay_sets(
    slot: np.ndarray,
    chunk: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    reduce: np.ndarray,
    arrive: np.ndarray,
    reads: np.ndarray,
    order: np.ndarray,
    phase: np.ndarray,
    no_reduce: np.ndarray,
    bufferless: np.ndarray,
    full: np.ndarray,
    state: np.ndarray,
    forwarded: np.ndarray,
    full_at: np.ndarray,
    arrived: np.ndarray,
    payload: np.ndarray,
) -> int:
    """The replay on bitmask arrays (module docstring); ``state``, ``forwarded``,
    ``full_at`` and ``arrived`` (a cut-through switch's last arrival slot) are updated in
    place.

    ``reads`` lists the sends in the replay's reading order (by slot, a cut-through switch's
    sends first), ``order`` the arrivals in its applying order (by ``2 * arrive + phase``,
    phase 0 into a cut-through switch and 1 into any other node, copies before reduces,
    then by send). In slot ``t``: the arrivals up to ``(t, 0)``, the switches' reads, the
    arrivals up to ``(t, 1)`` (with the hops of ``L = 0`` just read), the other reads; after
    the last read, the remaining arrivals. Returns -1 when no rule breaks, else the row of
    the first send that breaks one (in its read or its arrival).
    """
    m = len(slot)
    words = full.shape[1]
    p = 0
    i = 0
    last = 2 * arrive[order[m - 1]] + 1 if m else 0
    while i < m or p < m:
        t = slot[reads[i]] if i < m else last
        for step in range(2):
            while p < m and 2 * arrive[order[p]] + phase[order[p]] <= 2 * t + step:
                j = order[p]
                p += 1
                a = arrive[j]
                c = chunk[j]
                v = dst[j]
                if bufferless[v] and arrived[c, v] != a:
                    # a cut-through switch kept nothing from an earlier slot
                    for w in range(words):
                        state[c, v, w] = 0
                cur_any = False
                cur_full = True
                pay_full = True
                for w in range(words):
                    cur = state[c, v, w]
                    if cur != 0:
                        cur_any = True
                    if cur != full[c, w]:
                        cur_full = False
                    if payload[j, w] != full[c, w]:
                        pay_full = False
                if reduce[j]:
                    for w in range(words):
                        if state[c, v, w] & payload[j, w]:
                            return j  # double-count
                    if cur_any and no_reduce[v]:
                        return j  # switch-reduce
                    for w in range(words):
                        state[c, v, w] |= payload[j, w]
                else:
                    if pay_full:
                        if cur_full:
                            return j  # duplicate-receive
                    elif cur_any and not forwarded[c, v]:
                        return j  # copy-overwrite
                    for w in range(words):
                        state[c, v, w] = payload[j, w]
                forwarded[c, v] = False
                if bufferless[v]:
                    arrived[c, v] = a
                now_full = True
                for w in range(words):
                    if state[c, v, w] != full[c, w]:
                        now_full = False
                if not now_full:
                    full_at[c, v] = -1
                elif full_at[c, v] < 0:  # the replay's setdefault (a switch's stays the first)
                    full_at[c, v] = a
            while i < m and slot[reads[i]] == t and (step == 1 or bufferless[src[reads[i]]]):
                k = reads[i]
                i += 1
                c = chunk[k]
                u = src[k]
                if bufferless[u] and arrived[c, u] != t:
                    return k  # causality: the chunk does not pass the switch in slot t
                any_bit = False
                for w in range(words):
                    payload[k, w] = state[c, u, w]
                    if payload[k, w] != 0:
                        any_bit = True
                if not any_bit:
                    return k  # causality: an empty set
                # no arrival lands between two reads of a slot: marked as sent on at once
                forwarded[c, u] = True
    return -1


_compiled: dict[str, Any] = {}


def _kernel() -> Any:
    """The compiled :func:`_replay_sets` (compiled, or loaded from numba's cache, on first use)."""
    if "replay" not in _compiled:
        _compiled["replay"] = _njit(_replay_sets)
    return _compiled["replay"]


def verify_combining_columns(instance: Instance, schedule: Schedule) -> Report | None:
    """Accept a valid combining schedule with one compiled pass, or return None.

    Parameters
    ----------
    instance : Instance
    schedule : Schedule

    Returns
    -------
    Report or None
        The Report of an accepted schedule (``ok``, no violations, the makespan, and as
        ``arrivals`` an :class:`~ccplan.schedule.verify.ArrivalMap` of the slot from which
        each node holds each chunk's complete reduction, as the replay's); None when a rule
        breaks or the pass does not apply (:func:`combining_check_applies`, numba missing,
        a state too large): the replay then decides and words the violations.
    """
    if not combining_check_applies(instance):
        return None
    try:
        kernel = _kernel()
    except ImportError:
        log.info("numba is not available: combining schedules are verified by the replay")
        return None
    coll = instance.collective
    topo = instance.topology
    n = topo.num_nodes
    chunks = coll.chunk_ids
    chunk_pos = {c: i for i, c in enumerate(chunks)}
    cols = schedule.columns()
    num = len(cols["slot"])

    # contributors of each chunk, ranked by id: their bit positions
    pre_nodes = [np.asarray(nodes, dtype=np.int64) for _, nodes in coll.pre]
    counts = np.array([len(p) for p in pre_nodes], dtype=np.int64)
    flat = np.concatenate(pre_nodes)
    owner = np.repeat(np.array([chunk_pos[c] for c, _ in coll.pre], dtype=np.int64), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    rank = np.arange(len(flat), dtype=np.int64) - starts
    # ``pre`` lists its nodes sorted; anything else (a repeat) is left to the replay
    if bool(np.any((np.diff(flat) <= 0) & (np.diff(owner) == 0))):
        return None
    where = _node_positions(instance, flat)
    if len(where) and int(where.min()) < 0:
        return None
    words = (int(counts.max()) + 63) // 64
    if len(chunks) * n * words > MAX_STATE_WORDS:
        return None
    state = np.zeros((len(chunks), n, words), dtype=np.uint64)
    state[owner, where, rank // 64] = np.left_shift(np.uint64(1), (rank % 64).astype(np.uint64))
    full = np.zeros((len(chunks), words), dtype=np.uint64)
    np.bitwise_or.at(full, (owner, rank // 64), np.left_shift(np.uint64(1), (rank % 64).astype(np.uint64)))
    full_at = np.full((len(chunks), n), -1, dtype=np.int64)
    alone = counts[np.repeat(np.arange(len(counts)), counts)] == 1
    full_at[owner[alone], where[alone]] = 0

    # chunk, nodes and link of each send
    width = max([c[1] for c in chunks] + [int(cols["chunk_index"].max()) if num else 0]) + 1
    top = max([c[0] for c in chunks] + [int(cols["chunk_source"].max()) if num else 0]) + 1
    if top * width >= 1 << 62:
        return None
    known = np.array([a * width + b for a, b in chunks], dtype=np.int64)
    sent = send_columns(instance, cols, known, width)
    if sent is None:
        return None
    chunk, src, dst, link = sent
    slot = cols["slot"]
    latency = np.asarray(instance.latency, dtype=np.int64)
    arrive = slot + latency[link]
    no_reduce = np.zeros(n, dtype=np.bool_)
    bufferless = np.zeros(n, dtype=np.bool_)
    reducing = instance.reducing_switches
    for k, v in enumerate(topo.node_ids):
        no_reduce[k] = topo.kind[v] == "switch" and v not in reducing
        bufferless[k] = v in instance.bufferless
    # the replay applies a slot's arrivals into cut-through switches, then (after their
    # reads) the others; each part copies first, then reduces, each in send order
    phase = (~bufferless[dst]).astype(np.int64)
    order = np.argsort((arrive * 2 + phase) * 2 + cols["reduce"], kind="stable")
    # and reads a slot's sends out of cut-through switches first
    if instance.bufferless:
        reads = np.argsort(slot * 2 + (~bufferless[src]), kind="stable")
    else:
        reads = np.arange(num, dtype=np.int64)
    forwarded = np.zeros((len(chunks), n), dtype=np.bool_)
    arrived = np.full((len(chunks), n), -1, dtype=np.int64)
    payload = np.zeros((num, words), dtype=np.uint64)
    broken = kernel(
        slot, chunk, src, dst, cols["reduce"], arrive, reads, order, phase, no_reduce, bufferless,
        full, state, forwarded, full_at, arrived, payload,
    )
    del payload, forwarded, arrived
    if broken >= 0:
        return None

    if occupancy_overloads(instance, link, slot, cols["src"], cols["dst"], with_sends=False):
        return None

    # postcondition: every post (chunk, node) ends with the complete set (then full_at >= 0)
    post_nodes = [np.asarray(nodes, dtype=np.int64) for _, nodes in coll.post]
    post_counts = np.array([len(p) for p in post_nodes], dtype=np.int64)
    post_chunk = np.repeat(np.array([chunk_pos[c] for c, _ in coll.post], dtype=np.int64), post_counts)
    post_flat = np.concatenate(post_nodes) if post_nodes else np.zeros(0, dtype=np.int64)
    post_where = _node_positions(instance, post_flat)
    if len(post_where) and int(post_where.min()) < 0:
        return None
    at = full_at[post_chunk, post_where]
    if len(at) and int(at.min()) < 0:
        return None
    makespan = int(at.max()) if len(at) else 0
    flat_at = full_at.ravel()
    keys = np.flatnonzero(flat_at >= 0)
    return Report.accepted(
        instance, makespan, num, ArrivalMap(keys.astype(np.int64), flat_at[keys], chunks, topo.node_ids)
    )
