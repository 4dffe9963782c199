"""Layer-by-layer schedule constructor of the draft ``002_*.txt``.

The draft expands the topology along time one layer (slot) at a time and, in every layer:

1. *candidate-source discovery*: for every unsatisfied target (a node that must still get a
   chunk) find the nodes that hold the chunk now and reach the target through a link that is
   free in this layer (draft: "starts from the target node and traces reachable links in the
   current time layer");
2. *link-to-chunk matching*: bind chunks to free links, one chunk per link unit, respecting
   link direction and occupancy (draft: "valid matching ... only uses links that are not
   already occupied in the current layer"); here a **maximum-weight bipartite matching**
   (``scipy.optimize.linear_sum_assignment``) with cardinality first, not first-fit;
3. *state update*: a delivered chunk joins the receiver's precondition from slot ``t + L``;
4. repeat with the next layer until the postcondition holds (no horizon is fixed in advance).

Relays: a transfer ``u -> v`` of chunk ``c`` is a candidate when ``v`` wants ``c`` or when
``v`` lies on a (near-)shortest path, by latency ``L``, from ``u`` to some node that still
wants ``c`` (``L(u,v) + d(v, w) <= d(u, w) + slack``). So a switch, or a GPU that does not want
the chunk, receives it when it must forward it. The draft's alternative embodiments ("path
length, node load, or link utilization") become the matching weights: deliveries to a node
that wants the chunk before relays, then rarer chunks (fewer holders) first, then chunks
with more unsatisfied targets.

Semantics are the canonical ones (DESIGN.md): occupancy window ``t .. t+l-1`` under
``omega`` (outages included), arrival at ``t + L``, one copy per node, ``single_port``
as a node-level matching (one send and one receive per node and slot).

Complexity: per layer and receiver, a fixed number of numpy operations on (node x chunk)
boolean arrays (candidates: the row difference "tail holds, receiver does not have"; weights:
one membership row per in-link) plus one assignment, ``O(k^3)`` in its size ``k``; relay
candidates are filtered with bit masks over targets. The number of layers is the makespan,
so a run costs about receivers x layers numpy calls plus constant work per send.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from ccplan.errors import CCPlanError, ValidationError
from ccplan.heuristics.mteg import Reservations
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_distances
from ccplan.instances.topology import Topology
from ccplan.limits import NEVER, Deadline
from ccplan.methods import Outcome, SolveOptions, register, run_constructor
from ccplan.schedule.core import Schedule, Send

log = logging.getLogger(__name__)

_Commit = Callable[[int, int], None]

_PROGRESS_EVERY = 10.0  # seconds between progress notes on the log
_BIG = 10**9  # cardinality first: any extra matched pair outweighs every priority difference


@dataclass(frozen=True)
class LayeredOptions:
    """Parameters of the layered constructor.

    Parameters
    ----------
    slack : int
        A relay hop may be up to ``slack`` slots longer than a shortest path (0: shortest only).
    max_layers : int, optional
        Give up after this many layers (default: generous, from the instance size).
    seed : int, optional
        Shuffle the chunks' tie-break ranks (restarts of :mod:`ccplan.heuristics.search`);
        None ranks chunks by id.
    """

    slack: int = 0
    max_layers: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.slack, int) or self.slack < 0:
            raise ValidationError(f"layered option slack must be a non-negative integer, got {self.slack!r}")
        if self.max_layers is not None and (not isinstance(self.max_layers, int) or self.max_layers < 1):
            raise ValidationError(
                f"layered option max_layers must be a positive integer, got {self.max_layers!r}"
            )

    def label(self) -> str:
        """Short name of the variant, for reports."""
        return f"layered[slack={self.slack}" + ("" if self.seed is None else f",seed={self.seed}") + "]"


def _distances(instance: Instance) -> dict[int, dict[int, int]]:
    """All-pairs shortest latency ``d(u, w)`` (sum of ``L``), by Dijkstra from every node."""
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    return {
        s: {v: int(d) for v, d in latency_distances(topo, lat, [s]).items()} for s in topo.node_ids
    }


def _have_nodes(have: dict[int, set[int]], ci: int) -> list[int]:
    """Nodes that have chunk index ``ci``."""
    return [v for v, cs in have.items() if ci in cs]


def layered_schedule(
    instance: Instance, options: LayeredOptions | None = None, deadline: Deadline = NEVER
) -> Schedule:
    """Build a schedule layer by layer (draft ``002_*.txt``); see the module docstring.

    ``deadline`` is checked once per layer.

    Raises
    ------
    OutOfTimeError
        ``deadline`` passed before the schedule was complete.
    ValidationError
        Combining collectives (built elsewhere from data-movement ones).
    CCPlanError
        A target no holder can reach, or no progress within ``max_layers``.
    """
    opts = options or LayeredOptions()
    coll = instance.collective
    if coll.combining:
        raise ValidationError(f"layered schedules data-movement collectives; {coll.kind!r} is combining")
    topo = instance.topology
    res = Reservations(instance)
    lat = [int(x) for x in instance.latency]
    tail = [lk.src for lk in topo.links]
    head = [lk.dst for lk in topo.links]
    dist = _distances(instance)
    nodes = topo.node_ids
    bit = {v: 1 << i for i, v in enumerate(nodes)}

    chunks = list(coll.chunk_ids)
    cidx = {c: i for i, c in enumerate(chunks)}
    # held[v]: chunk indices v holds now; incoming[v]: chunk indices delivered or in flight
    held: dict[int, set[int]] = {v: set() for v in nodes}
    have: dict[int, set[int]] = {v: set() for v in nodes}
    holders_count = [0] * len(chunks)
    for c, hs in coll.holders.items():
        for v in hs:
            held[v].add(cidx[c])
            have[v].add(cidx[c])
            holders_count[cidx[c]] += 1
    unsat = [0] * len(chunks)  # bit mask of nodes that want the chunk and do not have it
    for c, v in coll.demands:
        unsat[cidx[c]] |= bit[v]
    for c, v in coll.demands:
        if not any(v in dist[h] for h in coll.holders[c]):
            raise CCPlanError(f"chunk {list(c)} cannot reach node {v}: no path from its holders")
    left = len(coll.demands)
    # useful[j]: targets w for which link j lies on a (near-)shortest path from its tail
    useful = []
    for j in range(topo.num_links):
        u, v = tail[j], head[j]
        mask = 0
        for w in nodes:
            duw = dist[u].get(w)
            dvw = dist[v].get(w)
            if duw is not None and dvw is not None and lat[j] + dvw <= duw + opts.slack:
                mask |= bit[w]
        useful.append(mask)

    rank = list(range(len(chunks)))
    if opts.seed is not None:
        random.Random(opts.seed).shuffle(rank)
    pos = {v: i for i, v in enumerate(nodes)}
    dmat = np.full((len(nodes), len(nodes)), np.inf)
    for a, row in dist.items():
        for b, d in row.items():
            dmat[pos[a], pos[b]] = d
    avail = np.full((len(chunks), len(nodes)), np.inf)
    wants = np.zeros((len(chunks), len(nodes)), dtype=bool)
    for ci in range(len(chunks)):
        for v in _have_nodes(have, ci):
            avail[ci, pos[v]] = 0
    for c, v in coll.demands:
        wants[cidx[c], pos[v]] = True
    # dense mirrors of held / holders_count / unsat for the vectorised weights
    held_arr = np.zeros((len(nodes), len(chunks)), dtype=bool)
    for v, cs in held.items():
        held_arr[pos[v], list(cs)] = True
    have_arr = held_arr.copy()
    state = _State(held, have, unsat, useful, bit, holders_count, max(1, len(nodes)), rank, lat,
                   pos, dmat, avail, wants, held_arr, have_arr, np.zeros(len(chunks), dtype=np.int64))
    # lacking[j]: chunks the tail of link j holds and its head neither has nor awaits, kept up
    # to date at arrivals and commits, so links (and receivers) with nothing to offer are
    # skipped without building their candidate lists
    tail_pos = np.array([pos[x] for x in tail], dtype=np.intp)
    head_pos = np.array([pos[x] for x in head], dtype=np.intp)
    # per node: (link, head) of its out-links and (link, tail) of its in-links, as node ids;
    # plain loops over the sets: a node has a handful of links and numpy's per-call cost would dominate
    out_pairs = [[(j, head[j]) for j in topo.out_links[v]] for v in nodes]
    in_pairs = [[(j, tail[j]) for j in topo.in_links[v]] for v in nodes]
    state.head_pos = head_pos
    state.lacking = (held_arr[tail_pos] & ~have_arr[head_pos]).sum(axis=1).tolist()
    lacking_of = state.lacking
    for ci in range(len(chunks)):
        state.rescore(ci)
    pending: dict[int, list[tuple[int, int]]] = {}
    sends: list[Send] = []
    last_outage = max((t for _, _, t in instance.outages), default=0)
    limit = opts.max_layers or (10 * (len(coll.demands) + 1) * max(lat, default=1) + last_outage + 10)
    t = 0
    occ = [int(x) for x in instance.occupancy]
    # slots at which something can change besides an arrival: a link frees up (end of a send
    # window or of an outage); layers in between are skipped when the current one did nothing
    events = sorted({t + 1 for _, _, t in instance.outages})
    total = left
    started = time.perf_counter()
    next_note = started + _PROGRESS_EVERY
    while left > 0:
        deadline.check()
        if time.perf_counter() >= next_note:
            # long runs (thousands of GPUs) say how far they are; the CLI shows it with -v
            next_note = time.perf_counter() + _PROGRESS_EVERY
            log.info("layered: layer %d, %d of %d deliveries done, %.0f s", t, total - left, total,
                     time.perf_counter() - started)
        if t > limit:
            raise CCPlanError(f"layered constructor made no complete schedule within {limit} layers")
        for v, ci in pending.pop(t, ()):
            held[v].add(ci)
            held_arr[pos[v], ci] = True
            for k, w in out_pairs[pos[v]]:
                if ci not in have[w]:
                    lacking_of[k] += 1
        match = _match_single_port if instance.single_port else _match_per_receiver
        state.refresh(t)
        before = len(sends)

        def commit(j: int, ci: int, t: int = t) -> None:
            nonlocal left
            v = head[j]
            res.reserve(j, t)
            sends.append(Send(slot=t, chunk=chunks[ci], src=tail[j], dst=v))
            have[v].add(ci)
            have_arr[pos[v], ci] = True
            for k, u in in_pairs[pos[v]]:
                if ci in held[u]:
                    lacking_of[k] -= 1
            holders_count[ci] += 1
            pending.setdefault(t + lat[j], []).append((v, ci))
            heapq.heappush(events, t + occ[j])
            avail[ci, pos[v]] = t + lat[j]
            wants[ci, pos[v]] = False
            state.forget(ci)
            if unsat[ci] & bit[v]:
                unsat[ci] &= ~bit[v]
                left -= 1
            state.rescore(ci)

        match(topo, res, t, state, commit)
        chosen = len(sends) > before
        if chosen:
            t += 1
            continue
        # nothing was sent: the next layer that can differ is the next arrival or release
        while events and events[0] <= t:
            heapq.heappop(events)
        nxt = min([*pending, *events[:1]], default=None)
        if nxt is None:
            raise CCPlanError(f"layered constructor is stuck at layer {t}: no transfer can make progress")
        t = nxt
    # already chronological; sorting by the same key as Send's order makes Schedule's own
    # sort a single pass (comparing Send objects is slow at a million sends)
    sends.sort(key=lambda s: (s.slot, s.chunk, s.src, s.dst, s.reduce))
    return Schedule(tuple(sends), method="layered")


@dataclass
class _State:
    """Per-layer state: who holds what, who still wants what, and static link facts."""

    held: dict[int, set[int]]  # chunk indices a node holds at the current layer
    have: dict[int, set[int]]  # ... holds or will hold (in flight)
    unsat: list[int]  # per chunk: bit mask of nodes that want it and do not have it
    useful: list[int]  # per link: bit mask of targets it leads towards
    bit: dict[int, int]
    holders_count: list[int]
    max_holders: int
    rank: list[int]  # tie-break rank per chunk (0 = first); shuffled when seeded
    lat: list[int]
    pos: dict[int, int]  # node id -> row of the arrays below
    dmat: np.ndarray  # (V, V) shortest latency, inf when unreachable
    avail: np.ndarray  # (C, V) slot from which a node has the chunk (inf: never)
    wants: np.ndarray  # (C, V) bool: wants the chunk and does not have it
    held_arr: np.ndarray  # (V, C) bool: ``held`` as an array
    have_arr: np.ndarray  # (V, C) bool: ``have`` as an array
    chunk_score: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    in_facts: dict[int, tuple[np.ndarray, np.ndarray, dict[int, int]]] = field(default_factory=dict)
    now: int = 0
    cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    lacking: list[int] = field(default_factory=list)  # per link (a list: updated one entry at a time)
    head_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))  # per link

    def active_receivers(self) -> list[int]:
        """Positions of the nodes with an in-link whose tail holds a chunk they lack, ascending."""
        return np.unique(self.head_pos[np.asarray(self.lacking) > 0]).tolist()

    def refresh(self, t: int) -> None:
        """Start layer ``t``: forget the cached arrival estimates."""
        self.now = t
        self.cache.clear()

    def forget(self, ci: int) -> None:
        """A copy of ``ci`` was just committed: its estimates change."""
        self.cache.pop(ci, None)

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

    def weight(self, ci: int, j: int, v: int, topo: Topology) -> int:
        """Priority of sending chunk ``ci`` over link ``j`` to ``v`` (larger first; < _BIG).

        Order of importance: ``v`` wants the chunk; no other in-link of ``v`` as fast as ``j``
        offers it now (exclusivity: do not spend a link on what ``v`` gets as well elsewhere);
        rarity (fewer holders, copies in flight included); more unsatisfied targets; the
        seeded rank.
        """
        wanted = 1 if self.unsat[ci] & self.bit[v] else 0
        others = 0
        for k in topo.in_links[v]:
            if k != j and self.lat[k] <= self.lat[j] and ci in self.held[topo.links[k].src]:
                others += 1
        exclusive = max(0, 9 - others)
        rarity = max(self.max_holders - self.holders_count[ci], 0)
        return (wanted * 10**8 + exclusive * 10**7 + min(rarity, 999) * 10**4
                + min(self.unsat[ci].bit_count(), 99) * 100 + (99 - min(self.rank[ci], 99)))

    def weights(self, cols: np.ndarray, links: list[int], v: int, topo: Topology) -> np.ndarray:
        """:meth:`weight` of every chunk of ``cols`` on every link of ``links`` (all into ``v``).

        Returns an int64 array ``(len(links), len(cols))``, equal entry by entry to
        :meth:`weight`, computed with one membership row per in-link of ``v`` instead of one
        scan of the in-links per (link, chunk) pair; the chunk terms are computed once.
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
        """Refresh the chunk part of :meth:`weight` (rarity, unsatisfied count, rank) of ``ci``."""
        self.chunk_score[ci] = (
            min(max(self.max_holders - self.holders_count[ci], 0), 999) * 10**4
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
    receiver picks the same rarest chunk and a bottleneck carries copies of one chunk)."""
    nodes = topo.node_ids
    lacking = st.lacking
    # commits only lower ``lacking`` on the receiver's own in-links, so the set is fixed for the layer
    for p in st.active_receivers():
        v = nodes[p]
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
            continue
        links = list(cand)
        if len(units) == 1:
            # one link, so ``cols`` is its candidate list; argmax takes the lowest chunk on a tie
            cols = cand[units[0]]
            commit(units[0], int(cols[int(np.argmax(st.weights(cols, links, v, topo)[0]))]))
            continue
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


@register("layered")
def layered_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``layered``: the draft's layer-by-layer constructor (``extra``: ``slack``)."""
    start = time.perf_counter()
    seed = options.extra.get("layered_seed")
    opts = LayeredOptions(slack=int(options.extra.get("slack", 0)), seed=None if seed is None else int(seed))
    schedule, failed = run_constructor(
        lambda deadline: layered_schedule(instance, opts, deadline), options.time_limit, opts.label()
    )
    if failed is not None:
        return failed
    return Outcome(
        schedule=schedule,
        status="feasible",
        details={"variant": opts.label(), "seconds": time.perf_counter() - start},
    )

