"""Bounds of the combining collectives (ReduceScatter, Reduce, AllReduce; :mod:`ccplan.bounds`
package docstring, "Combining collectives"): every contribution reaching every receiver, the
per-node receive and send counts, the combining cuts of the candidate sets and the gossip
count. The reversed data-movement problem's bounds come from :mod:`ccplan.bounds.slots` and
:mod:`ccplan.bounds.continuous`."""

from __future__ import annotations

import math

import numpy as np

from ccplan.bounds.movement import _distances, _Movement
from ccplan.bounds.search import _min_feasible, _SlotCapacity, _solve_piecewise
from ccplan.bounds.setcuts import _candidate_sets, _SetCut
from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance


def _combining_direct(instance: Instance, weights: np.ndarray, prob: _Movement) -> float:
    """``max dist(p, w)`` over contributions ``p`` and receivers ``w != p`` of every chunk."""
    dist = _distances(prob, weights)
    index = instance.topology.node_index
    coll = instance.collective
    worst = 0.0
    for c in coll.chunk_ids:
        ps = [index[p] for p in coll.holders[c]]
        ws = [index[w] for w in coll.wanted.get(c, ())]
        if not ws:
            continue
        block = dist[np.ix_(ps, ws)]
        mask = np.array([[p != w for w in ws] for p in ps])
        if mask.any():
            value = float(block[mask].max())
            if not math.isfinite(value):
                raise ValidationError(
                    f"chunk {list(c)}: a contribution cannot reach a receiver; the instance is infeasible"
                )
            worst = max(worst, value)
    return worst


def _combining_port_counts(instance: Instance) -> tuple[dict[int, int], dict[int, int]]:
    """Per node index: chunks it must receive at least once / send at least once."""
    index = instance.topology.node_index
    coll = instance.collective
    recv: dict[int, int] = {}
    send: dict[int, int] = {}
    for c in coll.chunk_ids:
        ps = coll.holders[c]
        ws = coll.wanted.get(c, frozenset())
        for w in ws:
            if ps - {w}:
                recv[index[w]] = recv.get(index[w], 0) + 1
        for p in ps:
            if ws - {p}:
                send[index[p]] = send.get(index[p], 0) + 1
    return recv, send


def _combining_ports_slots(instance: Instance, prob: _Movement) -> int:
    recv, send = _combining_port_counts(instance)
    caps = _SlotCapacity(prob)
    zeros = np.zeros(len(prob.src))
    best = 0
    for table, ends in ((recv, prob.dst), (send, prob.src)):
        for node, need in table.items():
            mask = ends == node

            def ok(D: int, mask: np.ndarray = mask, need: int = need) -> bool:
                return int(caps.count(zeros, (D - prob.lat).astype(float))[mask].sum()) >= need

            best = max(best, _min_feasible(ok, 0))
    return best


def _combining_ports_us(instance: Instance, prob: _Movement) -> float:
    recv, send = _combining_port_counts(instance)
    rate = prob.omega / prob.transfer_us
    best = 0.0
    for table, ends in ((recv, prob.dst), (send, prob.src)):
        for node, need in table.items():
            mask = ends == node
            best = max(best, _solve_piecewise(float(need), np.zeros(int(mask.sum())), rate[mask]))
    return best


def _combining_set_cuts(
    instance: Instance, prob: _Movement, dist: np.ndarray, windows: bool
) -> list[_SetCut]:
    r"""The combining cut of every candidate set ``S`` and of its complement (package docstring,
    "Combining cuts"): one crossing send per chunk with a contributor inside and a receiver
    outside, in the window ``[min_{p in P_c ∩ S} dist(p, u), D - L_e - min_{w in W_c \ S} dist(x, w)]``.
    """
    index = instance.topology.node_index
    coll = instance.collective
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for c in coll.chunk_ids:
        key = (
            tuple(sorted(index[p] for p in coll.holders[c])),
            tuple(sorted(index[w] for w in coll.wanted.get(c, ()))),
        )
        groups[key] = groups.get(key, 0) + 1
    sets = _candidate_sets(prob)
    sets = sets + [~m for m in sets]
    unique = {m.tobytes(): m for m in sets if 0 < int(m.sum()) < prob.n}
    out = []
    for inside in unique.values():
        leaving = inside[prob.src] & ~inside[prob.dst]
        need = 0
        earliest = np.full(prob.n, np.inf)
        to_out = np.full(prob.n, np.inf)
        for (ps, ws), count in groups.items():
            p_in = [p for p in ps if inside[p]]
            w_out = [w for w in ws if not inside[w]]
            if not p_in or not w_out:
                continue
            need += count
            earliest = np.minimum(earliest, dist[p_in].min(axis=0))
            to_out = np.minimum(to_out, dist[:, w_out].min(axis=1))
        if need == 0 or not leaving.any():
            continue
        if not windows:
            earliest = np.zeros(prob.n)
            to_out = np.zeros(prob.n)
        out.append(_SetCut(need, leaving, earliest, to_out))
    return out


def _gossip_cut(instance: Instance, prob: _Movement, dist: np.ndarray, windows: bool) -> _SetCut | None:
    """The one-way gossip count as one aggregate cut over *all* links (package docstring,
    "Gossip count"): ``2 (|P_c| - 1)`` sends for every chunk whose contributors are its
    receivers, each starting no earlier than a contribution can be at its tail and arriving
    early enough to still reach a GPU by ``D``."""
    index = instance.topology.node_index
    coll = instance.collective
    need = 0
    for c in coll.chunk_ids:
        ps = coll.holders[c]
        if len(ps) >= 2 and coll.wanted.get(c, frozenset()) == ps:
            need += 2 * (len(ps) - 1)
    if need == 0:
        return None
    gpus = [index[g] for g in instance.topology.gpus]
    if windows:
        earliest = dist[gpus].min(axis=0)
        to_out = dist[:, gpus].min(axis=1)
    else:
        earliest = np.zeros(prob.n)
        to_out = np.zeros(prob.n)
    return _SetCut(need, np.ones(len(prob.src), dtype=bool), earliest, to_out)


def _combining_cuts(instance: Instance, prob: _Movement, dist: np.ndarray, windows: bool) -> list[_SetCut]:
    cuts = _combining_set_cuts(instance, prob, dist, windows)
    gossip = _gossip_cut(instance, prob, dist, windows)
    return cuts if gossip is None else [*cuts, gossip]
