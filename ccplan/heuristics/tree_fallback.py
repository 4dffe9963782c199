"""A cheap valid schedule for when a constructor runs out of time: shortest-path trees.

``layered`` on thousands of GPUs needs longer than a short ``--time-limit`` (a 48x48 torus
AllGather: about 40 s of construction on the development machine); rather than ending with
no schedule, it hands over to this construction, which costs about a microsecond per
delivery:

1. each chunk travels along a shortest-latency tree from its holders (every node that must
   receive it, and the nodes on the way, get it over one in-link on a shortest path; among
   equally short in-links the choice is spread over the chunks so no link carries them all);
2. the sends are placed in the order of their receivers' distance from the chunk's holders,
   each at the first slot at which its sender holds the chunk and one of the link's
   ``omega`` lanes is free (a lane carries one send at a time, for ``l`` slots).

Every send leaves a node that holds the chunk, at most ``omega`` sends occupy a link in any
slot, and a node receives a chunk at most once and only when it lacks it: the schedule is
valid by construction (and the caller verifies it anyway). It is not a good schedule -- no
send waits for a better moment and no tree is chosen for its load -- only a complete one.

It covers data-movement collectives in the paper's model: no ``single_port``, no outages,
store-and-forward switches (a cut-through instance reaches the engines as its
store-and-forward twin, :mod:`ccplan.schedule.cut_through`); elsewhere
:func:`tree_fallback` returns None.
"""

from __future__ import annotations

import logging

import numpy as np
from numba import njit

from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_matrix
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

SECONDS_PER_DELIVERY = 3e-6
"""What :func:`tree_fallback` may take per delivery, generously: measured 1.3-2.6 us per
delivery on a 48x48 torus AllGather (5.3 million deliveries, a shared 2-core machine);
the caller keeps this much of its time limit for it (:func:`reserve_seconds`)."""

FIXED_SECONDS = 0.05
"""Start-up of :func:`tree_fallback` (the all-pairs latencies, loading the compiled kernels
from numba's cache; their first compilation in an installation takes a few seconds more).
Small: on small instances ``layered`` itself must keep nearly all of a short limit."""



def applies(instance: Instance) -> bool:
    """Whether :func:`tree_fallback` can build a schedule for ``instance``."""
    return (
        not instance.collective.combining
        and not instance.single_port
        and not instance.outages
        and not instance.bufferless
        and bool(len(instance.link_capacity))
        and int(np.min(instance.link_capacity)) >= 1
    )


def reserve_seconds(deliveries: int) -> float:
    """Seconds to keep for :func:`tree_fallback` on ``deliveries`` (chunk, node) deliveries."""
    return FIXED_SECONDS + SECONDS_PER_DELIVERY * max(0, deliveries)


@njit(cache=True, nogil=True)
def _parents(
    todo_c: np.ndarray,
    todo_v: np.ndarray,
    in_ptr: np.ndarray,
    in_flat: np.ndarray,
    tail: np.ndarray,
    lat: np.ndarray,
    dist: np.ndarray,
    held: np.ndarray,
    needed: np.ndarray,
    parent: np.ndarray,
) -> None:
    """``parent[c, v]``: the in-link over which ``v`` receives ``c``, for every pair to do and
    the relays on their way (marked in ``needed`` as they are met)."""
    n = len(todo_c)
    stack_c = np.empty(n + 1024, dtype=np.int64)
    stack_v = np.empty(n + 1024, dtype=np.int64)
    stack_c[:n] = todo_c
    stack_v[:n] = todo_v
    while n:
        n -= 1
        c = stack_c[n]
        v = stack_v[n]
        lo = in_ptr[v]
        hi = in_ptr[v + 1]
        count = 0
        for i in range(lo, hi):
            e = in_flat[i]
            if dist[c, tail[e]] + lat[e] == dist[c, v]:
                count += 1
        # the k-th shortest in-link, k spread over the pairs (deterministic), so that equally
        # short in-links share the chunks
        k = (c * 7919 + v * 104729) % count
        for i in range(lo, hi):
            e = in_flat[i]
            if dist[c, tail[e]] + lat[e] == dist[c, v]:
                if k == 0:
                    parent[c, v] = e
                    u = tail[e]
                    if not held[c, u] and not needed[c, u]:
                        needed[c, u] = True
                        if n == len(stack_c):
                            stack_c = np.concatenate((stack_c, np.empty(n, dtype=np.int64)))
                            stack_v = np.concatenate((stack_v, np.empty(n, dtype=np.int64)))
                        stack_c[n] = c
                        stack_v[n] = u
                        n += 1
                    break
                k -= 1


@njit(cache=True, nogil=True)
def _place(
    pair_chunk: np.ndarray,
    pair_link: np.ndarray,
    tail: np.ndarray,
    head: np.ndarray,
    lat: np.ndarray,
    occ: np.ndarray,
    cap: np.ndarray,
    ready: np.ndarray,
    lanes: np.ndarray,
) -> np.ndarray:
    """Slot of every send, in the given order (a sender's own send comes first in it)."""
    n = len(pair_chunk)
    slots = np.empty(n, dtype=np.int64)
    for i in range(n):
        c = pair_chunk[i]
        e = pair_link[i]
        start = ready[c, tail[e]]
        best = 0
        free = lanes[e, 0]
        for k in range(1, cap[e]):
            if lanes[e, k] < free:
                free = lanes[e, k]
                best = k
        t = start if start > free else free
        lanes[e, best] = t + occ[e]
        slots[i] = t
        ready[c, head[e]] = t + lat[e]
    return slots


def tree_fallback(instance: Instance, method: str = "tree-fallback") -> Schedule | None:
    """A valid schedule along shortest-latency trees (see the module docstring), labelled
    ``method`` (the engine it stands in for).

    Returns
    -------
    Schedule or None
        None when the instance is outside what the construction covers (:func:`applies`) or
        a wanted node cannot be reached (the engines report that themselves).
    """
    if not applies(instance):
        return None
    coll = instance.collective
    topo = instance.topology
    pos = topo.node_index
    n_nodes = len(pos)
    lat = np.asarray(instance.latency, dtype=np.int64)
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    cap = np.asarray(instance.link_capacity, dtype=np.int64)
    tail = np.array([pos[lk.src] for lk in topo.links], dtype=np.int64)
    head = np.array([pos[lk.dst] for lk in topo.links], dtype=np.int64)
    node_ids = np.array(sorted(pos, key=pos.__getitem__), dtype=np.int64)
    dmat = latency_matrix(topo, lat)
    chunks = list(coll.chunk_ids)
    n_chunks = len(chunks)
    cidx = {c: i for i, c in enumerate(chunks)}
    # dist[c, v]: latency from the nearest holder of c to v; held[c, v]: v holds c at slot 0
    holders = [sorted(pos[h] for h in coll.holders[c]) for c in chunks]
    held = np.zeros((n_chunks, n_nodes), dtype=bool)
    if all(len(hs) == 1 for hs in holders):  # AllGather, AllToAll, Broadcast, ...: one gather
        rows = np.array([hs[0] for hs in holders], dtype=np.int64)
        dist = dmat[rows]
        held[np.arange(n_chunks), rows] = True
    else:
        dist = np.empty((n_chunks, n_nodes))
        for ci, hs in enumerate(holders):
            dist[ci] = dmat[hs].min(axis=0)
            held[ci, hs] = True
    del dmat
    to_pos = np.zeros(int(node_ids.max(initial=0)) + 1, dtype=np.int64)
    to_pos[node_ids] = np.arange(n_nodes)
    wants = np.zeros((n_chunks, n_nodes), dtype=bool)
    for c, ws in coll.post:
        wants[cidx[c], to_pos[np.fromiter(ws, dtype=np.int64, count=len(ws))]] = True
    wants &= ~held
    if not np.isfinite(dist[wants]).all():
        return None
    # in-links grouped by head position (compressed rows)
    in_flat = np.argsort(head, kind="stable").astype(np.int64)
    in_ptr = np.concatenate(([0], np.cumsum(np.bincount(head, minlength=n_nodes)))).astype(np.int64)
    needed = wants.copy()
    todo_c, todo_v = np.nonzero(wants)
    parent = np.full((n_chunks, n_nodes), -1, dtype=np.int64)
    _parents(todo_c.astype(np.int64), todo_v.astype(np.int64), in_ptr, in_flat, tail, lat, dist, held,
             needed, parent)
    pair_c, pair_v = np.nonzero(needed)
    # senders before receivers: by distance (every link has L >= 1), then by chunk
    rank = np.argsort(dist[pair_c, pair_v].astype(np.int64) * n_chunks + pair_c)
    pair_c, pair_v = pair_c[rank].astype(np.int64), pair_v[rank]
    pair_link = parent[pair_c, pair_v]
    del parent, needed, dist, wants, rank
    ready = np.where(held, 0, -1).astype(np.int64)
    lanes = np.zeros((len(cap), int(cap.max())), dtype=np.int64)
    slots = _place(pair_c, pair_link, tail, head, lat, occ, cap, ready, lanes)
    chunk_src = np.array([c[0] for c in chunks], dtype=np.int64)
    chunk_ix = np.array([c[1] for c in chunks], dtype=np.int64)
    return Schedule.from_columns(
        slot=slots,
        chunk_source=chunk_src[pair_c],
        chunk_index=chunk_ix[pair_c],
        src=node_ids[tail[pair_link]],
        dst=node_ids[head[pair_link]],
        method=method,
    )
