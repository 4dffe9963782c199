"""What a layer's matching reads and how it matches by receiver: :class:`_State` (holdings,
unsatisfied targets, candidate pairs, the relay test, the weights and their constants), the
reference assignment per receiver (:func:`_match_per_receiver`) and the node-level matching
under single-port (:func:`_match_single_port`)."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from ccplan.heuristics.mteg import Reservations
from ccplan.instances.topology import Topology

_Commit = Callable[[int, int], None]

_BIG = 10**9  # cardinality first: any extra matched pair outweighs every priority difference
_RARITY_CAP = 999  # the rarity term of the chunk score counts at most this many missing holders
# _FIXED[o]: the fixed part of a wanted pair's weight with ``o`` rival in-links holding the chunk
_FIXED = np.array([_BIG + 10**8 + max(0, 9 - o) * 10**7 for o in range(256)], dtype=np.int64)
# _FIXED_BY_HELD[k] = _FIXED[k - 1]: by the in-link tails of a uniform receiver holding the chunk
# (``_State.in_held``), which count the pair's own tail (entry 0 is never read: that tail holds it)
_FIXED_BY_HELD = np.concatenate((_FIXED[:1], _FIXED))


@dataclass
class _State:
    """Per-layer state: who holds what, who still wants what, and static link facts."""

    unsat: list[int]  # per chunk: bit mask of nodes that want it and do not have it
    useful: list[int]  # per link: bit mask of targets it leads towards
    bit: dict[int, int]
    holders_count: array[int]  # an int64 buffer: the compiled rule reads it as an array
    max_holders: int
    rank: list[int]  # tie-break rank per chunk (0 = first); shuffled when seeded
    lat: list[int]
    pos: dict[int, int]  # node id -> row of the arrays below
    dmat: np.ndarray  # (V, V) shortest latency, inf when unreachable
    avail: np.ndarray  # (C, V) slot from which a node has the chunk (inf: never)
    wants: np.ndarray  # (C, V) bool: wants the chunk and does not have it
    held_arr: np.ndarray  # (V + 1, C) bool: holds the chunk now (the last row: padding, False)
    have_arr: np.ndarray  # (V, C) bool: holds it or has it in flight
    chunk_score: np.ndarray  # per chunk: the chunk part of the weights (a view of score_list)
    score_list: array[int] = field(default_factory=lambda: array("q"))  # read one at a time
    in_facts: dict[int, tuple[np.ndarray, np.ndarray, dict[int, int]]] = field(default_factory=dict)
    now: int = 0
    cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    lacking: array[int] = field(default_factory=lambda: array("q"))  # per link: its candidate count
    cand: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint8))  # (E, C/8) pair bits
    in_held: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint8))  # (V, C)
    head_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))  # per link
    have_flat: bytearray = field(default_factory=bytearray)  # have_arr's buffer, read one byte at a time

    def active_receivers(self) -> list[int]:
        """Positions of the nodes with an in-link whose tail holds a chunk they lack, ascending."""
        return np.unique(self.head_pos[np.asarray(self.lacking) > 0]).tolist()

    def uniform_fixed(self, receivers: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """The fixed part of the weights of pairs into uniform receivers (wanted, exclusive
        term): ``_FIXED_BY_HELD[in_held[receivers, chunks]]``, since ``in_held`` counts the pair's
        own tail too; read as one flat take (twice as fast as the 2-D index on millions of
        pairs)."""
        flat = self.in_held.reshape(-1).take(receivers * self.in_held.shape[1] + chunks)
        return _FIXED_BY_HELD[flat]

    def refresh(self, t: int) -> None:
        """Start layer ``t``: forget the cached arrival estimates."""
        self.now = t
        self.cache.clear()

    def _eta(self, cis: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per chunk of ``cis`` and target: the earliest slot some copy could get there (best,
        which node gives it, second best), computed on demand and cached for the layer."""
        for ci in cis:
            if ci in self.cache:
                continue
            # only nodes that hold the chunk or have it in flight can give it: the other rows
            # of the (V, V) table are inf, so dropping them changes no minimum and no argmin
            # of a target some holder reaches (the only ones the relay test reads)
            rows = np.flatnonzero(np.isfinite(self.avail[ci]))
            eta = np.maximum(self.avail[ci, rows], self.now)[:, None] + self.dmat[rows]
            best = np.argmin(eta, axis=0)
            eta1 = eta[best, np.arange(eta.shape[1])]
            eta2 = np.partition(eta, 1, axis=0)[1] if len(rows) >= 2 else np.full_like(eta1, np.inf)
            self.cache[ci] = (eta1, rows[best], eta2)
        got = [self.cache[ci] for ci in cis]
        return (np.array([g[0] for g in got]), np.array([g[1] for g in got]), np.array([g[2] for g in got]))

    def relay_helps(self, cis: list[int], j: int, u: int, v: int, t: int) -> list[int]:
        """The chunks of ``cis`` for which a copy at ``v`` would reach some target before any
        copy other than the sender's can (so two relays do not carry the same chunk the same
        way); on a tie the copy at the lowest node position goes, so ties never block every
        copy. Vectorised over ``cis``."""
        if not cis:
            return []
        pu = self.pos[u]
        eta1, arg, eta2 = self._eta(cis)
        others = np.where(arg == pu, eta2, eta1)
        via = t + self.lat[j] + self.dmat[self.pos[v]]
        wins = ((via < others) | ((via == others) & (pu <= arg))) & self.wants[np.asarray(cis)]
        keep = wins.any(axis=1)
        return [ci for ci, k in zip(cis, keep.tolist(), strict=True) if k]

    def weights(self, cols: np.ndarray, links: list[int], v: int, topo: Topology) -> np.ndarray:
        """Priority of sending each chunk of ``cols`` over each link of ``links`` (all into
        ``v``; larger first; < _BIG).

        Order of importance: ``v`` wants the chunk (10^8); no other in-link of ``v`` as fast as
        the link offers it now (exclusivity, ``max(0, 9 - others)`` x 10^7: do not spend a link
        on what ``v`` gets as well elsewhere); then the chunk part (:meth:`rescore`): rarity
        (fewer holders, copies in flight included), more unsatisfied targets, the seeded rank.

        Returns an int64 array ``(len(links), len(cols))``, computed with one membership row
        per in-link of ``v``; the chunk terms are computed once.
        """
        srcs, rival, row_of = self._in_facts(v, topo)
        c = np.asarray(cols, dtype=np.intp)
        held_in = self.held_arr[srcs[:, None], c[None, :]].astype(np.int64)  # np.ix_ is slower here
        others = rival[[row_of[j] for j in links]] @ held_in
        exclusive = np.maximum(0, 9 - others)
        chunk_terms = self.wants[c, self.pos[v]] * 10**8 + self.chunk_score[c]
        return exclusive * 10**7 + chunk_terms[None, :]

    def _in_facts(self, v: int, topo: Topology) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
        """Static facts of ``v``'s in-links, cached: their tails' rows, the (K, K) matrix of
        "in-link k is another in-link at least as fast as j" and the row of each link."""
        got = self.in_facts.get(v)
        if got is None:
            ins = topo.in_links[v]
            srcs = np.array([self.pos[topo.links[k].src] for k in ins], dtype=np.intp)
            lat_in = np.array([self.lat[k] for k in ins])
            rival = (lat_in[None, :] <= lat_in[:, None]) & ~np.eye(len(ins), dtype=bool)
            got = (srcs, rival.astype(np.int64), {k: r for r, k in enumerate(ins)})
            self.in_facts[v] = got
        return got

    def rescore(self, ci: int) -> None:
        """Refresh the chunk part of :meth:`weights` (rarity, unsatisfied count, rank) of
        ``ci`` (``chunk_score`` is a view of ``score_list``); the commit of
        :func:`layered_schedule` computes the same inline."""
        self.score_list[ci] = (
            min(max(self.max_holders - self.holders_count[ci], 0), _RARITY_CAP) * 10**4
            + min(self.unsat[ci].bit_count(), 99) * 100
            + (99 - min(self.rank[ci], 99))
        )

    def candidates(self, j: int, u: int, v: int, t: int) -> np.ndarray:
        """Chunk indices ``u`` may usefully send to ``v`` over link ``j`` in slot ``t``
        (candidate sources): ``v`` wants the chunk, or ``v`` is a relay towards a target that
        no other copy reaches as early. Sorted array."""
        mask = self.useful[j]
        unsat = self.unsat
        bv = self.bit[v]
        new = np.flatnonzero(self.held_arr[self.pos[u]] & ~self.have_arr[self.pos[v]])
        if not len(new):
            return new
        wanted = self.wants[new, self.pos[v]]
        if mask & bv:
            # v itself is a target the link leads to: every chunk v wants passes the filter
            out = new[wanted]
        else:
            out = np.array([ci for ci in new[wanted].tolist() if unsat[ci] & mask], dtype=np.intp)
        relay = [ci for ci in new[~wanted].tolist() if unsat[ci] & mask]
        if not relay:
            return out
        return np.union1d(out, np.asarray(self.relay_helps(relay, j, u, v, t), dtype=np.intp))


def _match_per_receiver(topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit) -> None:
    """Without single-port, receivers only share chunks: one assignment per receiver, each
    committed at once so the next receivers see the chunk as less rare (otherwise every
    receiver picks the same rarest chunk and a bottleneck carries copies of one chunk).

    The reference form of a layer; :class:`_FastPath` computes the same commits."""
    nodes = topo.node_ids
    # commits only lower ``lacking`` on the receiver's own in-links, so the set is fixed for the layer
    for p in st.active_receivers():
        _match_receiver(topo, res, t, st, commit, nodes[p])


def _match_receiver(topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit, v: int) -> None:
    """Candidates, weights and the assignment of receiver ``v`` in layer ``t``, committed."""
    lacking = st.lacking
    units: list[int] = []
    cand: dict[int, np.ndarray] = {}
    for j in topo.in_links[v]:
        if not lacking[j]:
            continue
        u = topo.links[j].src
        free = res.free_units(j, t)
        if free <= 0:
            continue
        cs = st.candidates(j, u, v, t)
        if not len(cs):
            continue
        cand[j] = cs
        units.extend([j] * free)
    if not units:
        return
    links = list(cand)
    if len(units) == 1:
        # one link, so ``cols`` is its candidate list; argmax takes the lowest chunk on a tie
        cols = cand[units[0]]
        commit(units[0], int(cols[int(np.argmax(st.weights(cols, links, v, topo)[0]))]))
        return
    # rows over all chunks, then the columns some link offers (cheaper than np.unique)
    offered_all = np.zeros((len(links), st.held_arr.shape[1]), dtype=bool)
    for r, j in enumerate(links):
        offered_all[r, cand[j]] = True
    cols = np.flatnonzero(offered_all.any(axis=0))
    offered = offered_all[:, cols]
    per_link = st.weights(cols, links, v, topo)
    per_link = np.where(offered, per_link + _BIG, 0)
    row_of = {j: r for r, j in enumerate(links)}
    w = per_link[[row_of[j] for j in units]]
    rows, colsel = linear_sum_assignment(w, maximize=True)
    for r, k in zip(rows, colsel, strict=True):
        if w[r, k] > 0:
            commit(units[r], int(cols[k]))



def _match_single_port(topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit) -> None:
    """Single-port: a node-level bipartite matching senders x receivers, then the best chunk."""
    nodes = list(topo.node_ids)
    npos = {u: i for i, u in enumerate(nodes)}
    w = np.zeros((len(nodes), len(nodes)), dtype=np.int64)
    best: dict[tuple[int, int], tuple[int, int]] = {}
    for j, link in enumerate(topo.links):
        u, v = link.src, link.dst
        if not st.lacking[j] or res.free_units(j, t) <= 0:
            continue
        cs = st.candidates(j, u, v, t)
        if not len(cs):
            continue
        ws = st.weights(cs, [j], v, topo)[0]
        k = int(np.argmax(ws))  # ``cs`` is sorted: the lowest chunk wins a tie
        ci = int(cs[k])
        value = _BIG + int(ws[k])
        if value > w[npos[u], npos[v]]:
            w[npos[u], npos[v]] = value
            best[(u, v)] = (j, ci)
    if not best:
        return
    rows, cols = linear_sum_assignment(w, maximize=True)
    for r, k in zip(rows, cols, strict=True):
        if w[r, k] > 0:
            commit(*best[(nodes[r], nodes[k])])
