"""The bounds' view of a problem: a data-movement problem in dense indices (:class:`_Movement`:
an instance's own, or the reversed problem of a combining collective), its shortest-path
distances and reachability check, and the per-destination views (:class:`_DestView`) that the
ingress, cut and continuous searches read. What the bounds are and why they are valid: the
:mod:`ccplan.bounds` package docstring."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance


# --------------------------------------------------------------------------- problem view
@dataclass(frozen=True)
class _Movement:
    """A data-movement problem in dense indices (the instance, or a reversed combining one).

    ``holders[c]`` lists node indices holding chunk ``c`` at slot 0; ``needs[v]`` lists the chunk
    indices node ``v`` must receive.
    """

    n: int
    src: np.ndarray
    dst: np.ndarray
    occ: np.ndarray
    lat: np.ndarray
    alpha_us: np.ndarray
    transfer_us: np.ndarray
    omega: int
    outages: dict[int, list[int]]
    omega_links: np.ndarray  # per-link slot capacity (instance.link_capacity)
    tail_us: np.ndarray  # per-link weight of the continuous latency bound (last byte)
    head_us: np.ndarray  # per-link weight of the continuous cut windows (first byte)
    holders: tuple[tuple[int, ...], ...]
    needs: dict[int, np.ndarray]  # ascending chunk indices per destination
    names: tuple[int, ...]
    chunk_names: tuple[tuple[int, int], ...]


def _outage_table(instance: Instance) -> dict[int, list[int]]:
    table: dict[int, list[int]] = {}
    for link, slot in instance.outage_set:
        table.setdefault(link, []).append(slot)
    return {k: sorted(v) for k, v in table.items()}


def _movement_of(instance: Instance) -> _Movement:
    """The instance's own data-movement problem."""
    index = instance.topology.node_index
    coll = instance.collective
    chunk_names = coll.chunk_ids
    return replace(
        _movement_of_links(instance),
        holders=tuple(tuple(sorted(index[h] for h in coll.holders[c])) for c in chunk_names),
        needs=_needs_of(instance, chunk_names),
        chunk_names=chunk_names,
    )


def _needs_of(instance: Instance, chunk_names: tuple[tuple[int, int], ...]) -> dict[int, np.ndarray]:
    """``K_v`` per destination index: the wanted (chunk, node) pairs not held at slot 0.

    Built from the pre- and postcondition as arrays (``Collective.demands`` is one tuple per
    demand: 16.8 million at 4,096 GPUs). Destinations come in the order of their first
    demand (smallest chunk, then node), as they would from the demand list, so the first
    unreachable demand reported is the same.
    """
    topo = instance.topology
    coll = instance.collective
    n = topo.num_nodes
    k = len(chunk_names)
    ids = np.asarray(topo.node_ids, dtype=np.int64)
    lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    lookup[ids] = np.arange(n)
    cidx = {c: i for i, c in enumerate(chunk_names)}

    def pairs(table: tuple[tuple[tuple[int, int], tuple[int, ...]], ...]) -> np.ndarray:
        """``node * k + chunk`` of every (chunk, node) of the table."""
        if not table:
            return np.zeros(0, dtype=np.int64)
        parts = [np.asarray(nodes, dtype=np.int64) for _, nodes in table]
        chunk = np.repeat(
            np.array([cidx[c] for c, _ in table], dtype=np.int64), [len(p) for p in parts]
        )
        return lookup[np.concatenate(parts)] * k + chunk

    wanted = np.sort(pairs(coll.post))
    held = np.sort(pairs(coll.pre))
    if len(held) and len(wanted):
        at = np.minimum(np.searchsorted(held, wanted), len(held) - 1)
        wanted = wanted[held[at] != wanted]
    if not len(wanted):
        return {}
    node, chunk = np.divmod(wanted, k)  # sorted by node, then chunk
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    groups = np.split(chunk, starts[1:])
    dests = node[starts].tolist()
    first = [int(g[0]) for g in groups]
    return {dests[i]: groups[i] for i in sorted(range(len(dests)), key=lambda i: (first[i], dests[i]))}


def _reversed_movement(instance: Instance) -> _Movement:
    """The reversed data-movement problem of a combining collective (see package docstring).

    Links are turned around (same ``l``, ``L``), ``W_c`` holds chunk ``c`` and every contributor
    outside ``W_c`` needs it. Outages are dropped (valid: they only remove schedules).
    """
    base = _movement_of_links(instance)
    topo = instance.topology
    index = topo.node_index
    coll = instance.collective
    chunk_names = tuple(c for c in coll.chunk_ids if coll.wanted.get(c))
    holders = tuple(tuple(sorted(index[w] for w in coll.wanted[c])) for c in chunk_names)
    needs: dict[int, list[int]] = {}
    for i, c in enumerate(chunk_names):
        for p in coll.holders[c]:
            if p not in coll.wanted[c]:
                needs.setdefault(index[p], []).append(i)
    return replace(
        base,
        src=base.dst,
        dst=base.src,
        outages={},
        holders=holders,
        needs={v: np.asarray(cs, dtype=np.int64) for v, cs in needs.items()},
        chunk_names=chunk_names,
    )


def _movement_of_links(instance: Instance) -> _Movement:
    topo = instance.topology
    index = topo.node_index
    alpha = np.asarray(topo.alpha, dtype=float)
    transfer = np.asarray(instance.transfer_us, dtype=float)
    # Cut-through (docs/model.md): a bufferless switch streams a chunk out as it comes in, so
    # the last byte leaves it no earlier than it arrived (tail: the hop out costs its alpha)
    # and the first byte may leave as soon as the first byte arrived (head: the hop in costs
    # its alpha too). Store-and-forward: every hop costs alpha + mu / B.
    switches = instance.bufferless
    out_of = np.array([lk.src in switches for lk in topo.links], dtype=bool)
    into = np.array([lk.dst in switches for lk in topo.links], dtype=bool)
    tail_us = alpha + np.where(out_of, 0.0, transfer)
    head_us = alpha + np.where(out_of | into, 0.0, transfer)
    return _Movement(
        n=topo.num_nodes,
        src=np.array([index[lk.src] for lk in topo.links], dtype=np.int64),
        dst=np.array([index[lk.dst] for lk in topo.links], dtype=np.int64),
        occ=np.asarray(instance.occupancy, dtype=np.int64),
        lat=np.asarray(instance.latency, dtype=np.int64),
        alpha_us=np.asarray(topo.alpha, dtype=float),
        transfer_us=np.asarray(instance.transfer_us, dtype=float),
        omega=instance.capacity,
        outages=_outage_table(instance),
        omega_links=np.asarray(instance.link_capacity, dtype=np.int64),
        tail_us=tail_us,
        head_us=head_us,
        holders=(),
        needs={},
        names=topo.node_ids,
        chunk_names=(),
    )


def _distances(prob: _Movement, weights: np.ndarray) -> np.ndarray:
    """All-pairs shortest paths (``inf`` when unreachable) with per-link ``weights > 0``."""
    graph = sp.csr_array((weights.astype(float), (prob.src, prob.dst)), shape=(prob.n, prob.n))
    return np.asarray(shortest_path(graph, method="D", directed=True))


def _holder_distances(prob: _Movement, dist: np.ndarray) -> np.ndarray:
    """``out[c, u] = min_{h in holders(c)} dist(h, u)``; identical holder sets share one row."""
    out = np.empty((len(prob.holders), prob.n))
    cache: dict[tuple[int, ...], np.ndarray] = {}
    for c, hs in enumerate(prob.holders):
        row = cache.get(hs)
        if row is None:
            row = dist[list(hs)].min(axis=0)
            cache[hs] = row
        out[c] = row
    return out


def _check_reachable(prob: _Movement, hdist: np.ndarray) -> None:
    for v, cs in prob.needs.items():
        bad = cs[~np.isfinite(hdist[cs, v])]
        if len(bad):
            chunk = prob.chunk_names[int(bad[0])]
            raise ValidationError(
                f"chunk {list(chunk)} cannot reach node {prob.names[v]}: no directed path from any "
                "holder; the instance is infeasible"
            )


@dataclass(frozen=True)
class _DestView:
    """What the cut and ingress searches need about one destination ``v``."""

    v: int
    need: int
    source: np.ndarray  # chunks of K_v held by each node at slot 0
    earliest: np.ndarray  # e_v(u), or zeros without windows
    to_v: np.ndarray  # dist(x, v) per node x, or zeros without windows


def _holder_matrix(prob: _Movement) -> sp.csr_array:
    """Chunk x node indicator of the slot-0 holdings (one entry per holding)."""
    rows = np.fromiter((c for c, hs in enumerate(prob.holders) for _ in hs), dtype=np.int64)
    cols = np.fromiter((v for hs in prob.holders for v in hs), dtype=np.int64)
    shape = (len(prob.holders), prob.n)
    return sp.csr_array((np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=shape)


_DIRECT_MIN = 32
"""Destinations needing at most this many chunks take ``e_v`` as a plain minimum over their
rows of the holder distances; larger ones walk the rows in sorted order (:func:`_earliest`)."""


def _earliest(hdist: np.ndarray, ranked: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """``e_v(u) = min_{c in cs} hdist[c, u]`` for every node ``u``.

    ``ranked[j, u]`` is the chunk with the ``j``-th smallest ``hdist[., u]``, so the minimum
    over ``cs`` is at the first rank whose chunk is in ``cs``. When ``cs`` is most chunks
    (AllGather: all but the destination's own) that is rank 0 or 1 for every node, and the
    work is a few passes over the nodes instead of ``|cs|`` rows of ``hdist`` (cubic in the
    GPUs over all destinations). Columns still open after ``_DIRECT_MIN`` ranks take the
    plain minimum.
    """
    if len(cs) <= _DIRECT_MIN:
        return hdist[cs].min(axis=0)
    member = np.zeros(hdist.shape[0], dtype=bool)
    member[cs] = True
    out = np.empty(hdist.shape[1])
    todo = np.arange(hdist.shape[1])
    for j in range(min(_DIRECT_MIN, hdist.shape[0])):
        chunk = ranked[j, todo]
        hit = member[chunk]
        out[todo[hit]] = hdist[chunk[hit], todo[hit]]
        todo = todo[~hit]
        if not len(todo):
            return out
    out[todo] = hdist[np.ix_(cs, todo)].min(axis=0)
    return out


def _dest_views(prob: _Movement, dist: np.ndarray, hdist: np.ndarray, windows: bool) -> list[_DestView]:
    """One view per destination; ``source`` from the holder matrix (a count of the holders of
    the destination's chunks), ``earliest`` by :func:`_earliest`."""
    held = _holder_matrix(prob)
    ptr, holder = held.indptr, held.indices
    walk = windows and len(prob.holders) > _DIRECT_MIN
    ranked = np.argsort(hdist, axis=0, kind="stable") if walk else hdist
    views = []
    for v, cs in sorted(prob.needs.items()):
        first, counts = ptr[cs], ptr[cs + 1] - ptr[cs]
        rows = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        source = np.bincount(holder[rows], minlength=prob.n).astype(np.int64)
        if windows:
            earliest = _earliest(hdist, ranked, cs)
            to_v = dist[:, v].copy()
        else:
            earliest = np.zeros(prob.n)
            to_v = np.zeros(prob.n)
        views.append(_DestView(v, len(cs), source, earliest, to_v))
    return views
