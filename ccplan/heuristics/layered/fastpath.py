"""One layer of the per-receiver matching for a block of receivers at once
(:class:`_FastPath`, numpy over the block's pairs), and for uniform receivers in compiled code
(:mod:`ccplan.heuristics.layered_jit`, :class:`_Compiled`); it commits the same sends as
:func:`~ccplan.heuristics.layered.state._match_per_receiver`."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from ccplan.heuristics.layered.rows import _CONFLICT, _assign, _rows_first, _rows_scan
from ccplan.heuristics.layered.state import (
    _FIXED,
    _FIXED_BY_HELD,
    _RARITY_CAP,
    _Commit,
    _match_receiver,
    _State,
)
from ccplan.heuristics.mteg import Reservations
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology

_CommitMany = Callable[[np.ndarray, np.ndarray], None]  # the sends (links, chunks) in order

_NEAR = 5 * 10**4  # pairs kept per link: start weight within this of its largest
_KEEP = 64  # ... and at most this many of them (fewer: more receivers computed in full)
_FAST_DEGREE = 16  # receivers with more in-links (switches) take the general per-receiver path
# _BITS[b, i]: bit i of byte b (little-endian), to expand the nonzero bytes of the pair bits
_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(bool)
_BLOCK_LINKS = 256  # receivers of a layer are matched in blocks of about this many in-links


@dataclass(frozen=True)
class _FastPath:
    """One layer of :func:`_match_per_receiver`, with the work done for a block of receivers
    at once where no commit of another receiver can change it.

    Within a layer, what a receiver ``v`` is offered depends on the holdings of its in-links'
    tails (fixed: arrivals are applied before the layer), on what ``v`` has (changed only by
    ``v``'s own commits, which come after its matching), on the free units of its in-links
    (reserved only by ``v``) and on the "exclusive" term of :meth:`_State.weights` (holdings
    again). So the candidate pairs (link, chunk), their "wanted" and "exclusive" terms are
    computed for a block of receivers (about ``_BLOCK_LINKS`` in-links) at once, when the
    block's first receiver's turn comes; only the chunk part of the weight (rarity and
    unsatisfied count, which other receivers' commits change, downwards only) is read at the
    receiver's turn, so the block's start weights bound it from above.

    The assignment of a receiver is then taken row by row (one row per free link unit, in
    the order of ``topo.in_links``): a row takes the lowest chunk of its largest weight that
    no earlier row took. When every row finds one and there are no more rows than columns,
    this is exactly what :func:`scipy.optimize.linear_sum_assignment` returns on the same
    matrix (its shortest augmenting path starts each row from the unassigned column of least
    reduced cost, lowest index first on a tie, and the duals stay zero while no path has to
    re-route an earlier row); otherwise the full assignment is solved as before.

    Receivers with many in-links (a switch), an in-link that is not a shortest way to its
    head, or a relay candidate (a chunk offered that the receiver does not want) go through
    the general per-receiver code (:func:`_match_receiver`).
    """

    order: np.ndarray  # links sorted by (head position, place in the head's in-link list)
    tail_pos: np.ndarray
    head_pos: np.ndarray
    occ1: np.ndarray  # per link: one-slot occupancy window
    cap: np.ndarray  # per link: omega outside outages
    outages_at: dict[int, np.ndarray]  # slot -> links down in it
    fast_recv: np.ndarray  # per node position: may take the fast path
    rivals: np.ndarray  # (E, width): tail rows of the in-links "at least as fast" (pad: a False row)
    uniform: np.ndarray  # per node: a fast receiver whose in-links all have one latency
    in_tails: np.ndarray  # (V, width + 1): rows of a fast receiver's in-link tails (pad: a False row)
    relay_check: np.ndarray  # per node: a fast receiver that may be offered a chunk it does not want
    simple: np.ndarray  # per link: window of more than one slot, omega 1, no outage
    asks: np.ndarray  # per link: window of more than one slot, not simple
    busy_until: np.ndarray  # per simple link: first slot after the window of its last send

    @classmethod
    def build(
        cls,
        instance: Instance,
        lat: np.ndarray,
        tail_pos: np.ndarray,
        head_pos: np.ndarray,
        self_target: np.ndarray,
        may_relay: np.ndarray,
    ) -> _FastPath:
        """Static per-link tables (see the attributes); ``may_relay``: per node, whether it
        lacks a chunk it does not want (so a chunk may be offered to it as a relay)."""
        topo = instance.topology
        nodes = topo.node_ids
        n = len(nodes)
        in_rank = np.zeros(topo.num_links, dtype=np.int64)
        for v in nodes:
            for r, j in enumerate(topo.in_links[v]):
                in_rank[j] = r
        order = np.lexsort((in_rank, head_pos)).astype(np.intp)
        deg = np.array([len(topo.in_links[v]) for v in nodes], dtype=np.int64)
        all_shortest = np.ones(n, dtype=bool)
        np.logical_and.at(all_shortest, head_pos, self_target)
        fast_recv = (deg <= _FAST_DEGREE) & all_shortest
        width = max(1, int(deg[fast_recv].max(initial=1)) - 1)
        rivals = np.full((topo.num_links, width), n, dtype=np.intp)
        for p in np.flatnonzero(fast_recv).tolist():
            ins = topo.in_links[nodes[p]]
            for j in ins:
                row = [int(tail_pos[k]) for k in ins if k != j and lat[k] <= lat[j]]
                rivals[j, : len(row)] = row
        # receivers whose in-links all have one latency: every other in-link is a rival, so
        # the rivals holding a chunk are the in-link tails holding it, less the link's own
        uniform = np.zeros(n, dtype=bool)
        in_tails = np.full((n, width + 1), n, dtype=np.intp)
        for p in np.flatnonzero(fast_recv).tolist():
            ins = topo.in_links[nodes[p]]
            uniform[p] = len({int(lat[k]) for k in ins}) <= 1
            in_tails[p, : len(ins)] = [int(tail_pos[k]) for k in ins]
        outages: dict[int, list[int]] = {}
        for link, slot in instance.outage_set:
            outages.setdefault(slot, []).append(link)
        occ1 = np.asarray(instance.occupancy) == 1
        cap = np.asarray(instance.link_capacity, dtype=np.int64)
        down = np.zeros(topo.num_links, dtype=bool)
        down[[link for link, _ in instance.outage_set]] = True
        simple = ~occ1 & (cap == 1) & ~down
        return cls(
            order=order,
            tail_pos=tail_pos,
            head_pos=head_pos,
            occ1=occ1,
            cap=cap,
            outages_at={s: np.array(sorted(ls), dtype=np.intp) for s, ls in outages.items()},
            fast_recv=fast_recv,
            rivals=rivals,
            uniform=uniform & fast_recv,
            in_tails=in_tails,
            relay_check=fast_recv & may_relay,
            simple=simple,
            asks=~occ1 & ~simple,
            busy_until=np.zeros(topo.num_links, dtype=np.int64),
        )

    def _free_links(
        self, res: Reservations, t: int, st: _State
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], np.ndarray] | None:
        """The links of layer ``t`` with a candidate pair and a free unit, in ``order``: the
        links, their free units, their heads, the start of each receiver's run of links (and
        its end) and every link's candidate count; None when there is none."""
        lack = np.fromiter(st.lacking, dtype=np.int64, count=len(st.lacking))
        cl = self.order[lack[self.order] > 0]
        if not len(cl):
            return None
        # free units at the start of the layer: omega for one-slot links (nothing reserved
        # their slot yet), the reservations for longer windows
        units = self.cap[cl]
        down = self.outages_at.get(t)
        if down is not None:
            units = np.where(np.isin(cl, down), 0, units)
        # longer windows of one unit on links without outages: free once the last send's
        # window ended (sends start in increasing layers); others ask the reservations
        units = np.where(self.simple[cl], self.busy_until[cl] <= t, units)
        for i in np.flatnonzero(self.asks[cl]).tolist():
            units[i] = res.free_units(int(cl[i]), t)
        keep = units > 0
        cl, units = cl[keep], units[keep]
        if not len(cl):
            return None
        heads = self.head_pos[cl]
        cuts = [*np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]]).tolist(), len(cl)]
        return cl, units, heads, cuts, lack

    def layer(self, topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit) -> None:
        """Match and commit every receiver of layer ``t``, in ascending node position."""
        got = self._free_links(res, t, st)
        if got is None:
            return
        cl, units, heads, cuts, lack = got
        # receivers in blocks of about _BLOCK_LINKS links: a block's pairs and their weights are
        # taken when its first receiver's turn comes, so the chunk scores they start from are
        # at most a block old (scans stay short) while numpy still works on many pairs at once
        g = 0
        while g < len(cuts) - 1:
            h = max(g + 1, bisect.bisect_right(cuts, cuts[g] + _BLOCK_LINKS) - 1)
            self._block(topo, res, t, st, commit, cl, units, heads, lack, cuts[g : h + 1])
            g = h

    def compiled_layer(
        self,
        res: Reservations,
        t: int,
        st: _State,
        commit: _CommitMany,
        run: _Compiled,
    ) -> None:
        """:meth:`layer` when every receiver is uniform: the row-by-row rule in compiled code
        (:func:`~ccplan.heuristics.layered_jit.rows_first_run`) over runs of receivers, a
        receiver whose rule fails solved in full between runs (the matrix :func:`_assign` would
        build, by :func:`~ccplan.heuristics.layered_jit.assignment_matrix`)."""
        # imported here: numba's import and first compile are paid only by runs that use it
        from ccplan.heuristics.layered_jit import assignment_matrix, rows_first_run

        got = self._free_links(res, t, st)
        if got is None:
            return
        cl, units, heads, cuts, _lack = got
        cuts_arr = np.asarray(cuts, dtype=np.intp)
        out_link = np.empty(int(units.sum()), dtype=np.int64)
        out_chunk = np.empty_like(out_link)
        g = 0
        while g < len(cuts) - 1:
            failed, n_out = rows_first_run(
                st.cand,
                cl,
                units,
                heads,
                cuts_arr,
                g,
                st.in_held,
                run.fixed,
                st.chunk_score,
                run.holders,
                run.unsat,
                run.rank_part,
                st.max_holders,
                _RARITY_CAP,
                out_link,
                out_chunk,
            )
            commit(out_link[:n_out], out_chunk[:n_out])
            if failed < 0:
                return
            # the receiver's full assignment (_assign's matrix, built in compiled code with the
            # scores its predecessors' commits left)
            a, b = cuts[failed], cuts[failed + 1]
            run.assigned += 1
            mat, cols, row_link = assignment_matrix(
                st.cand, cl[a:b], units[a:b], int(heads[a]), st.in_held, run.fixed, st.chunk_score
            )
            rows, colsel = linear_sum_assignment(mat, maximize=True)
            keep = mat[rows, colsel] > 0
            commit(row_link[rows[keep]], cols[colsel[keep]])
            g = failed + 1

    def _block(
        self,
        topo: Topology,
        res: Reservations,
        t: int,
        st: _State,
        commit: _Commit,
        cl_all: np.ndarray,
        units_all: np.ndarray,
        heads_all: np.ndarray,
        lack: np.ndarray,
        cuts_all: list[int],
    ) -> None:
        """Match and commit the receivers of one block of :meth:`layer`: links
        ``cuts_all[0] .. cuts_all[-1]-1`` of ``cl_all``, one receiver per segment of ``cuts_all``.

        Nothing a receiver's matching reads other than the chunk scores changes between the
        start of the layer and its turn (see the class docstring), so pairs taken now are
        those of the start of the layer."""
        first = cuts_all[0]
        cuts = [c - first for c in cuts_all]
        cl = cl_all[first : cuts_all[-1]]
        units = units_all[first : cuts_all[-1]]
        heads = heads_all[first : cuts_all[-1]]
        links = cl.tolist()
        counts_arr = lack[cl]
        # pairs (link, chunk) of the fast receivers, link by link, chunks ascending
        fast_at = np.flatnonzero(self.fast_recv[heads])
        rows = st.cand[cl[fast_at]]
        row_bytes = max(1, rows.shape[1])
        flat = np.flatnonzero(rows)  # flat positions of nonzero bytes (cheaper than 2-D nonzero)
        f = np.flatnonzero(_BITS[rows.reshape(-1)[flat]])
        at = flat[f >> 3]
        r = at // row_bytes
        pl = fast_at[r]
        pc = (at - r * row_bytes) * 8 + (f & 7)
        pcount = np.where(self.fast_recv[heads], counts_arr, 0)
        n_pairs = len(pc)
        prec = heads[pl]
        held_arr = st.held_arr
        # a relay candidate (a chunk the receiver does not want) sends the receiver to the
        # general code; only receivers that lack a chunk they do not want can have one
        relay_at: set[int] = set()
        if self.relay_check.any():
            ask = np.flatnonzero(self.relay_check[prec])
            relay_at = set(np.unique(prec[ask[~st.wants[pc[ask], prec[ask]]]]).tolist())
        # "exclusive" term: rival in-links (another in-link at least as fast) whose tail holds
        # the chunk; on receivers with one in-link latency, all in-link tails holding it less
        # one (counted at arrivals, ``in_held``)
        # every pair a fast receiver keeps is one it wants (the others went to the general
        # code), so its fixed part is _BIG + 10**8 + max(0, 9 - others) * 10**7, from a table
        if self.uniform[heads[fast_at]].all():
            fixed = st.uniform_fixed(prec, pc)
        else:
            uni = self.uniform[prec]
            fixed = np.zeros(len(pl), dtype=np.int64)
            if uni.any():
                fixed[uni] = _FIXED[st.in_held[prec[uni], pc[uni]].astype(np.intp) - 1]
            odd = np.flatnonzero(~uni)
            fixed[odd] = _FIXED[held_arr[self.rivals[cl[pl[odd]]], pc[odd, None]].sum(axis=1)]
        starts_arr = np.concatenate(([0], np.cumsum(pcount)))
        starts = starts_arr.tolist()
        unit_l = units.tolist()
        heads_l = heads.tolist()
        chunk_score = st.chunk_score
        # each link's pairs of nearly its largest weight now, sorted by that weight, largest
        # first, lowest chunk first on a tie. Chunk scores only fall within a layer (more
        # holders, fewer unsatisfied), so at the receiver's turn a scan for the largest weight
        # then may stop at the first pair whose weight now is below the best found; when it
        # runs past the pairs kept, the receiver's weights are computed in full
        near_w, keep_n = _NEAR, _KEEP  # read at the call: the tests set smaller lists
        w0 = fixed + chunk_score[pc]
        floor = np.zeros(len(cl), dtype=np.int64)
        if n_pairs:
            # the maximum over the links with pairs only: their starts rise strictly, so
            # reduceat takes each link's whole run. Clipping the starts of empty links (a
            # block ending in a switch) cut the last pair off the run before them, and a pair
            # above its link's floor + near_w sorted into another link's kept pairs below
            has = pcount > 0
            floor[has] = np.maximum.reduceat(w0, starts_arr[:-1][has]) - near_w
        near = np.flatnonzero(w0 >= floor[pl])
        # pairs come by link and chunk ascending: a stable sort by (link, weight descending)
        # puts the lowest chunk first on a tie (floor <= w0 <= floor + near_w within a link)
        near = near[
            np.argsort(pl[near] * (near_w + 1) + (floor[pl[near]] + near_w - w0[near]), kind="stable")
        ]
        near_starts_arr = np.searchsorted(pl[near], np.arange(len(cl) + 1))
        # at most keep_n pairs per link: the floor of a cut link rises to the weight of its last
        # kept pair; a pair left out weighs less, or as much with a higher chunk (_rows_scan)
        rank = np.arange(len(near)) - near_starts_arr[:-1][pl[near]]
        cut = np.diff(near_starts_arr) > keep_n
        if cut.any():
            at = np.flatnonzero(cut)
            floor[at] = w0[near[near_starts_arr[at] + keep_n - 1]]
            near = near[rank < keep_n]
            near_starts_arr = np.searchsorted(pl[near], np.arange(len(cl) + 1))
        near_starts = near_starts_arr.tolist()
        cut_l = cut.tolist()
        s_chunk = pc[near].tolist()
        s_fixed = fixed[near].tolist()
        s_w0 = w0[near].tolist()
        floor_l = floor.tolist()
        score = st.score_list

        nodes = topo.node_ids
        # per receiver: most pairs of a link
        most = np.maximum.reduceat(counts_arr, np.asarray(cuts[:-1], dtype=np.intp)).tolist()
        for g, (a, b) in enumerate(itertools.pairwise(cuts)):
            p = heads_l[a]
            if not self.fast_recv[p] or p in relay_at:
                _match_receiver(topo, res, t, st, commit, nodes[p])
                continue
            chosen = _rows_scan(
                s_chunk, s_fixed, s_w0, score, near_starts, floor_l, cut_l, unit_l, links, a, b
            )
            if (
                chosen is not None
                and len(chosen) > most[g]
                and len(chosen) > len(set(pc[starts[a] : starts[b]].tolist()))
            ):
                chosen = None  # more rows than columns: scipy solves the transposed problem
            if chosen is _CONFLICT or chosen is None:
                lo, hi = starts[a], starts[b]
                w = fixed[lo:hi] + chunk_score[pc[lo:hi]]
                found = None
                if chosen is None:  # the kept pairs did not decide: the rule on all pairs may
                    found = _rows_first(w, pc[lo:hi], starts_arr[a:b] - lo, counts_arr[a:b], unit_l[a:b])
                if found is None:
                    chosen = _assign(w, pc[lo:hi], counts_arr[a:b], unit_l[a:b], links[a:b])
                else:
                    chosen = [(links[a + i], ci) for i, ci in found]
            for j, ci in chosen:
                commit(j, ci)


@dataclass
class _Compiled:
    """What :meth:`_FastPath.compiled_layer` passes to the compiled run besides the state:
    int64 views of the commit's holder and unsatisfied counts, the rank part of the chunk
    score, ``_FIXED_BY_HELD``; and how many receivers were solved in full."""

    holders: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unsat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rank_part: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    fixed: np.ndarray = field(default_factory=lambda: _FIXED_BY_HELD.copy())
    assigned: int = 0

