r"""Lower bounds on the makespan: latency, ingress and the max-flow cut bound.

Every bound here is a *valid* lower bound for the canonical slot semantics of DESIGN.md (a send
``(chunk, u -> x, t)`` needs ``u`` to hold the chunk at the start of slot ``t``, occupies the link
in slots ``t .. t+l-1``, and the chunk is usable at ``x`` from ``t + L``; at most ``omega`` chunks
occupy a link per slot). The slot bounds are used by :func:`ccplan.pipeline.solve` to report a gap
and by the exact engine to stop early.

Notation: link ``e = (u, x)`` has occupancy ``l_e``, latency ``L_e = delta_e + l_e`` (slots;
``delta_e`` alone for a cut-through hop, ``instance.latency``), capacity ``omega_e``
(``instance.link_capacity``: more than one chunk per slot when tau exceeds the link's transfer
time); ``dist(a, b)`` is the shortest-path distance with link
weights ``L_e`` (the earliest slot at which anything sent from ``a`` at slot 0 can be usable at
``b``). For a destination ``v``, ``K_v`` is the set of chunks ``v`` must end with and does not hold
at slot 0 (:attr:`Collective.demands`). ``D`` is the makespan.

The three slot bounds
---------------------
**Latency.** A chunk usable at ``v`` at slot ``D`` travelled along a path from one of its slot-0
holders, each hop ``e`` adding at least ``L_e`` slots, so ``D >= min_h dist(h, v)`` for every demand
``(chunk, v)`` (SCCL's step bound, ``reference/msccl_and_peers.md`` section 3, weighted by ``L``).

**Ingress.** ``v`` must receive the ``|K_v|`` chunks, each on some in-link, each a different send.
On link ``e`` the useful sends start at slots ``t`` with ``t + L_e <= D`` (arrival by ``D``); with
``omega = 1`` two sends on ``e`` occupy disjoint windows of ``l_e`` slots, so their starts are at
least ``l_e`` apart, and at most ``cap_e(D) = floor((D - L_e) / l_e) + 1`` of them arrive by ``D``
(0 when ``D < L_e``). With ``omega > 1`` the occupancy intervals can be coloured with ``omega``
colours (interval graphs are perfect), each colour class being a capacity-1 sequence, hence
``omega * cap_e(D)``. The ingress bound is the smallest ``D`` with ``sum_{e into v} cap_e(D) >= |K_v|``
for every ``v``.

**Cut (max-flow).** For destination ``v`` build a network: a super-source ``s``, an arc ``s -> u``
of capacity ``|{c in K_v : u holds c at slot 0}|`` for every node ``u``, and every link ``e`` with
capacity ``cap_e(D)``. In a schedule of makespan ``D`` every chunk ``c in K_v`` reaches ``v`` along a
simple path of sends (each node holds a chunk once, so the "received from" relation is a tree)
that starts at a slot-0 holder; every send on the path arrives by ``D``, and distinct chunks use
distinct sends, so these paths form an integral ``s``-``v`` flow of value ``|K_v|`` that respects
the capacities. Hence ``D`` is feasible only if ``maxflow(s -> v) >= |K_v|`` for every ``v``. By
max-flow/min-cut this says: for every node set ``A`` not containing ``v``, the chunks of ``K_v`` held
outside ``A`` plus the capacity leaving ``A`` cover ``|K_v|`` -- every set of nodes must be able to
push out, by slot ``D``, the chunks ``v`` needs that only that set holds. The capacities grow with
``D``, so the smallest feasible ``D`` is found by search, one max-flow per destination per probe.
The cut ``A = V \ {v}`` is exactly the ingress condition, so ``cut >= ingress``.

*Set cuts (folded into the cut bound).* The per-destination flows see one destination at a
time. For any node set ``S``, the distinct chunks held only inside ``S`` and wanted by some node
outside must each cross a link leaving ``S`` at least once (distinct chunks, distinct sends), so
``sum_{e leaving S} cap_e(D) >= m_S`` (with windows: a tail ``u`` holds none of them before the
earliest ``dist(holders, u)``, and after crossing to ``x`` the chunk still needs the distance to
the nearest outside node wanting one). This is valid for every ``S``; it is evaluated on the
singletons (the egress bound: a Scatter root sends ``(N-1) C`` distinct chunks) and on the
bandwidth clusters (weakly connected components of the links faster than each link speed: the
chassis of NDv2 / DGX2 / AMD), where it binds for AllToAll (NDv2 2 chassis: 64 chunks per
chassis through one 12.5 GB/s link). The reported cut bound is the maximum of the flow bound
and these set cuts.

*AllGather equals ForestColl.* For AllGather with ``C`` chunks per GPU, ``N`` GPUs, a set ``A``
not containing ``v`` has value ``C (|GPU \ A| - 1) + cap+(A)`` (``v`` is outside ``A`` and holds none
of ``K_v``); requiring it to be ``>= (N - 1) C`` gives ``cap+(A) >= C |A ∩ GPU|``. Over all ``v``
this is ForestColl's condition ``cap+(S) >= C |S ∩ V_c|`` for every ``S`` that leaves a GPU out
(``reference/msccl_and_peers.md`` section 3), here with slotted, time-dependent capacities.

*Time windows (default on, still valid).* A chunk of ``K_v`` can leave ``u`` no earlier than
``e_v(u) = min_{c in K_v} dist(holders(c), u)``, and after crossing ``e = (u, x)`` it still needs
``dist(x, v)`` slots to reach ``v``. So only sends starting in ``[e_v(u), D - L_e - dist(x, v)]`` can
be on a path that delivers to ``v`` by ``D``, and ``cap_e`` becomes the number of starts, spaced
``l_e`` apart, in that window. This is what makes a star through a switch cost ``(N-1)C + 1``
slots rather than ``(N-1)C``: the switch holds nothing before slot 1. ``time_windows=False``
gives the plain bound above (for comparison with ForestColl).

*Outages* (``omega = 0`` slots) are taken into account: the count of starts in a window is then
the greedy earliest-fit count of ``l_e``-slot intervals that avoid the outage slots, which is the
maximum (greedy stays ahead). The latency bound ignores outages (still valid, possibly weaker).
``single_port`` is ignored (valid: it only removes schedules).

*Cut-through switches* (``switch_model == "cut-through"``; a switch holds nothing, forwards a
chunk in the slot it arrives and its hop into a GPU costs ``delta``). All three slot bounds stay
valid with ``L_e`` the cut-through latency: a delivered chunk still travels a path of sends
each adding ``L_e``; ingress still counts sends into ``v``; for the flow, the chain of sends
that brings a chunk to ``v`` (traced back through the one arrival at each switch in the slot it
forwards) may now visit a switch twice, which is a walk rather than a simple path, and a walk
still gives a unit of flow through the same links; the windows hold because a switch forwards
no earlier than the chunk's arrival. The tests check them against exact optima of small random
instances with switches, under both models.

The microsecond bounds
----------------------
``latency_us`` is the same shortest path with link weights ``alpha_e + mu / B_e`` (under
cut-through a hop out of a switch weighs ``alpha_e``: its last byte leaves no earlier than the
last byte came in; the cut windows below then also weigh hops into a switch ``alpha_e``, the
earliest first byte); ``cut_us`` is the
same per-destination flow (and the same set cuts) in continuous time with fractional
capacities: a link delivers at most
``omega * B_e * max(0, T - e_v(u) - alpha_e - dist(x, v))`` bytes of useful data by time ``T`` (sends
on a link are serialised, ``mu / B_e`` each; windows in microseconds). The smallest ``T`` is found
exactly by a Newton iteration on minimum cuts (each step solves ``g_A(T) = |K_v|`` for the current
violated cut ``A``; ``g_A`` is piecewise linear and increasing, and a cut once satisfied never
becomes violated again, so it terminates). ``best_us = max(latency_us, cut_us)`` bounds the
alpha-beta time of :func:`ccplan.schedule.simulate.simulate` for every valid schedule; it also
bounds the slotted time ``D * tau`` when ``alpha_threshold == 0`` (then ``delta_e tau >= alpha_e`` and
``l_e tau >= mu / B_e``); with a positive threshold small alphas vanish from the slots and
``D * tau`` may be slightly below ``latency_us``.

Combining collectives
---------------------
For ReduceScatter / Reduce / AllReduce (``collective.combining``), chunk ``c`` has contributors
``P_c`` (``pre``) and receivers ``W_c`` (``post``). Every contribution must physically reach every
receiver, so ``D >= max dist(p, w)`` over ``p in P_c, w in W_c, p != w``. For every set ``S`` and chunk
``c`` with a contributor in ``S`` and a receiver outside, at least one message of ``c`` leaves ``S``;
the cut bound of the *reversed* data-movement problem (links turned around, ``W_c`` holds ``c``,
``P_c \ W_c`` need it) is implied by that: for a contributor ``p``, the messages that carry its
contribution to some receiver form a chain (a simple path, after short-cutting repeats), the
chains of distinct chunks use distinct messages, and a message of the chain on ``(u, x)`` starts
no earlier than ``dist(p, u)`` and must arrive by ``D - min_w dist(x, w)`` -- reversing time
(``t -> D - t - L``) maps these windows onto the windows of the reversed problem, so time
windows stay valid there too. So are the per-node ingress
(a receiver ``w`` receives at least one message of every chunk it needs a foreign contribution
of) and egress (a contributor sends at least one message of every chunk it must contribute to a
foreign receiver) bounds.

*Combining cuts.* For a node set ``S`` (the candidate sets above and their complements), every
chunk ``c`` with a contributor ``p`` in ``S`` and a receiver ``w`` outside needs a send of ``c``
carrying ``p``'s contribution from inside to outside. Take the *last* such crossing on the chain
that brings ``p`` to ``w``, on link ``(u, x)``: ``u`` holds ``p``'s contribution at its start, so it
starts no earlier than ``min_{p in P_c ∩ S} dist(p, u)``, and after it the chain stays outside, so
it lands by ``D - min_{w in W_c \ S} dist(x, w)``. Sends carry one chunk each, so the ``m_S``
chunks need ``m_S`` distinct crossing sends in those windows. This holds whatever the nodes do
with the data (switches reducing in-network included). For AllReduce on NDv2 with 2 chassis it
puts ``N C`` sends through the one link out of each chassis, in each direction.

*Gossip count.* A chunk whose contributors are exactly its receivers (AllReduce), ``n = |P_c|
>= 2`` of them, needs at least ``2 (n - 1)`` sends. Replace each node's set by the union of all
it has ever held and let a send carry its sender's union: every valid schedule stays valid
(the verifier's sets are subsets), and sorting the sends by arrival slot gives a sequential
one-way gossip (a send's payload depends only on arrivals before its start, which come earlier
in that order because ``L >= 1``). There, let send ``k`` be the first after which some node
``x`` (a GPU or a switch) knows everything: before it, every participant other than ``x`` has
sent at least once (its contribution reached ``x``), ``n - 1`` sends with distinct senders;
after it, every participant other than ``x`` is still incomplete (send ``k`` completed only
``x``) and must receive a later send, ``n - 1`` more with distinct receivers. Sends that carry
nothing (before ``min_g dist(g, u)`` at a switch ``u``) or whose content can no longer reach a
GPU by ``D`` can be dropped without changing what the GPUs end with, so the count holds in the
windows ``[min_g dist(g, u), D - L_e - min_g dist(x, g)]``: one aggregate cut over *all* links,
``sum_e count_e >= sum_c 2 (|P_c| - 1)``. It is what makes AllReduce cost about twice AllGather
on a symmetric machine without switches (DGX1 at 1 GB, C = 1: 5 slots against AllGather's 3).
A per-node version (``2 (N-1)/N`` of the buffer through every GPU's links) is *not* valid here:
with an in-network reduction every GPU sends and receives the buffer once, and the verifier
accepts switch reductions.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components, maximum_flow, shortest_path

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance

log = logging.getLogger(__name__)

BOUND_NAMES: tuple[str, ...] = ("latency", "ingress", "cut", "flow")
"""Names of the slot bounds, in the order used to break ties for :attr:`Bounds.best_name`
(``flow``: the flow-over-time LP bound of :mod:`ccplan.bounds.flow_lp`, when computed)."""

_SEARCH_LIMIT = 1 << 40
_REL_TOL = 1e-12


@dataclass(frozen=True)
class Bounds:
    """Lower bounds on the makespan of an instance (see the module docstring).

    Attributes
    ----------
    latency_slots, ingress_slots, cut_slots : int
        The three slot bounds (the cut includes the set cuts: egress, bandwidth clusters).
    best_slots : int
        Their maximum.
    best_name : str
        Which bound attains it (ties go to the simplest: latency, then ingress, then cut).
    latency_us, cut_us : float
        Continuous-time latency and cut bounds in microseconds (no slot rounding).
    best_us : float
        ``max(latency_us, cut_us)``.
    time_windows : bool
        Whether the cut and ingress bounds used time windows.
    flow_slots : int, optional
        The flow-over-time LP bound (:func:`ccplan.bounds.flow_lp.gated_flow_bound`), when it
        ran: only with a verified makespan above the other bounds, on instances it applies
        to and within its size and time limits. Part of ``best_slots``.
    """

    latency_slots: int
    ingress_slots: int
    cut_slots: int
    best_slots: int
    best_name: str
    latency_us: float
    cut_us: float
    best_us: float
    time_windows: bool = True
    flow_slots: int | None = None

    def __post_init__(self) -> None:
        for name in ("latency_slots", "ingress_slots", "cut_slots", "best_slots", "flow_slots"):
            value = getattr(self, name)
            if name == "flow_slots" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValidationError(f"bounds.{name} must be a non-negative integer, got {value!r}")
        for name in ("latency_us", "cut_us", "best_us"):
            value = getattr(self, name)
            if not (isinstance(value, float) and math.isfinite(value) and value >= 0):
                raise ValidationError(f"bounds.{name} must be a non-negative finite float, got {value!r}")
        if self.best_name not in BOUND_NAMES:
            raise ValidationError(f"bounds.best_name must be one of {BOUND_NAMES}, got {self.best_name!r}")
        slots = (self.latency_slots, self.ingress_slots, self.cut_slots, self.flow_slots or 0)
        if self.best_slots != max(slots):
            raise ValidationError("bounds.best_slots must be the maximum of the slot bounds")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "latency_slots": self.latency_slots,
            "ingress_slots": self.ingress_slots,
            "cut_slots": self.cut_slots,
            "best_slots": self.best_slots,
            "best_name": self.best_name,
            "latency_us": self.latency_us,
            "cut_us": self.cut_us,
            "best_us": self.best_us,
            "time_windows": self.time_windows,
            "flow_slots": self.flow_slots,
        }


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
    """The reversed data-movement problem of a combining collective (see module docstring).

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


def _slot_caps(prob: _Movement, caps: _SlotCapacity, view: _DestView, D: int) -> np.ndarray:
    lo = view.earliest[prob.src]
    hi = D - prob.lat - view.to_v[prob.dst]
    return caps.count(lo, hi.astype(float))


def _ingress_ok(prob: _Movement, caps: _SlotCapacity, into: np.ndarray, view: _DestView, D: int) -> bool:
    """Whether the links ``into`` the destination can carry its chunks by ``D``."""
    lo = view.earliest[prob.src[into]]
    hi = D - prob.lat[into] - view.to_v[prob.dst[into]]
    return int(caps.count(lo, hi.astype(float), into).sum()) >= view.need


def _flow_ok(prob: _Movement, caps: _SlotCapacity, view: _DestView, D: int) -> bool:
    link_caps = _slot_caps(prob, caps, view, D)
    if int(link_caps[prob.dst == view.v].sum()) < view.need:
        return False
    s = prob.n
    # the CSR arrays directly, rows in (src, dst) order (the super-source s = n comes last):
    # building them through a COO matrix per destination took a third of the flows' time
    order = _link_order(prob)
    ordered = link_caps[order]
    keep = ordered > 0
    srcs = np.flatnonzero(view.source)
    indices = np.concatenate([prob.dst[order][keep], srcs]).astype(np.int32)
    data = np.concatenate([ordered[keep], view.source[srcs]]).astype(np.int32)
    counts = np.bincount(prob.src[order][keep], minlength=s)
    indptr = np.concatenate([[0], np.cumsum(counts), [len(indices)]]).astype(np.int32)
    graph = sp.csr_array((data, indices, indptr), shape=(s + 1, s + 1))
    value = int(maximum_flow(graph, s, view.v).flow_value)
    return value >= view.need


def _link_order(prob: _Movement) -> np.ndarray:
    """Link indices sorted by (src, dst), kept on the (frozen) problem."""
    order = prob.__dict__.get("_link_order")
    if order is None:
        order = np.lexsort((prob.dst, prob.src))
        object.__setattr__(prob, "_link_order", order)
    return order


def _slot_bounds(prob: _Movement, windows: bool, stop_at: int | None = None) -> tuple[int, int, int]:
    """``(latency, ingress, cut)`` in slots for a data-movement problem.

    With ``stop_at``, the parts are computed cheapest first (latency, ingress, set cuts, the
    per-destination flows) and the rest is skipped, reported as the best so far, once that
    reaches ``stop_at`` (see :func:`lower_bound_slots`).
    """
    if not prob.needs:
        return 0, 0, 0
    dist = _distances(prob, prob.lat)
    hdist = _holder_distances(prob, dist)
    _check_reachable(prob, hdist)
    latency = int(max(hdist[cs, v].max() for v, cs in prob.needs.items()))
    if stop_at is not None and latency >= stop_at:
        return latency, latency, latency
    caps = _SlotCapacity(prob)
    views = _dest_views(prob, dist, hdist, windows)
    order = np.argsort(prob.dst, kind="stable")
    bounds = np.searchsorted(prob.dst[order], np.arange(prob.n + 1))
    per_dest: dict[int, int] = {}
    guess = 0
    for view in views:
        # each search starts at the previous destination's value: alike destinations take
        # two checks instead of a search from 0
        into = order[bounds[view.v] : bounds[view.v + 1]]
        guess = per_dest[view.v] = _min_feasible_near(partial(_ingress_ok, prob, caps, into, view), guess)
    ingress = max(per_dest.values())
    if stop_at is not None and max(latency, ingress) >= stop_at:
        best = max(latency, ingress)
        return latency, ingress, best
    cut = max(ingress, _set_cut_slots(prob, caps, _set_cuts(prob, dist, hdist, windows)))
    if stop_at is not None and cut >= stop_at:
        return latency, ingress, cut
    # Destinations with the largest ingress first: they are the likeliest to bind, and every
    # later destination then needs one max-flow when it is already feasible at the running bound.
    # A destination that a checked automorphism maps from a computed one has the same flow
    # bound (_Symmetry), already in `cut`: on a torus one flow stands for all.
    sym = _Symmetry(prob, {view.v: view for view in views}) if SYMMETRY else None
    flow_seconds = 0.0
    for view in sorted(views, key=lambda w: -per_dest[w.v]):
        if sym is not None and sym.covered(view.v, flow_seconds):
            continue
        t0 = time.perf_counter()
        cut = _min_feasible(partial(_flow_ok, prob, caps, view), cut)
        flow_seconds += time.perf_counter() - t0
        if sym is not None:
            sym.computed(view.v)
    if sym is not None:
        log.debug(
            "flow bound: %d of %d destinations by symmetry (%d generators, %.2f s searching)",
            sym.skipped,
            len(views),
            len(sym.generators) // 2,
            sym.search_seconds,
        )
    return latency, ingress, cut


# --------------------------------------------------------------------------- symmetry
SYMMETRY = True
"""Skip a destination's max-flow when a checked automorphism maps an already computed
destination onto it (:class:`_Symmetry`). ``False`` runs every flow (the tests compare)."""

_SYMMETRY_FAILURES = 4
"""Searches for an automorphism that may fail before the searches stop for the run."""

_SYMMETRY_STEPS = 16
"""Individualisations one proposal may make before it gives up."""

_SYMMETRY_SHARE = 0.25
"""A search starts only while the searches so far took at most this share of the seconds
the flows took: symmetry costs a run without any at most about a quarter more."""


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class _Refiner:
    """Colour refinement (1-dimensional Weisfeiler-Leman) on a directed graph with link
    classes, vectorised: a node's new colour hashes its colour with the multisets of
    ``(link class, colour)`` over its out- and in-links. Used only to *propose* a node
    permutation; :class:`_Symmetry` checks every proposal before it is used."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, link_class: np.ndarray) -> None:
        self.n = n
        self.src = src
        self.dst = dst
        cls = link_class.astype(np.uint64)
        self.salt_out = _mix(cls * np.uint64(2) + np.uint64(1))
        self.salt_in = _mix(cls * np.uint64(2) + np.uint64(2))
        self.by_src = np.argsort(src, kind="stable")
        self.out_nodes, self.out_starts = np.unique(src[self.by_src], return_index=True)
        self.by_dst = np.argsort(dst, kind="stable")
        self.in_nodes, self.in_starts = np.unique(dst[self.by_dst], return_index=True)

    def refine(self, colour: np.ndarray) -> np.ndarray:
        """The stable refinement of ``colour`` (labels ``0 ..``, ordered by hash, so labels
        of two graphs refined together as one are comparable)."""
        classes = len(np.unique(colour))
        while True:
            c = _mix(colour.astype(np.uint64) + np.uint64(7))
            out = np.zeros(self.n, dtype=np.uint64)
            inn = np.zeros(self.n, dtype=np.uint64)
            if len(self.out_nodes):
                h = _mix(self.salt_out ^ c[self.dst])
                out[self.out_nodes] = np.add.reduceat(h[self.by_src], self.out_starts)
                h = _mix(self.salt_in ^ c[self.src])
                inn[self.in_nodes] = np.add.reduceat(h[self.by_dst], self.in_starts)
            key = _mix(c ^ _mix(out + np.uint64(3))) ^ _mix(inn + np.uint64(5))
            labels, new = np.unique(key, return_inverse=True)
            if len(labels) == classes:
                return new.astype(np.int64)
            classes = len(labels)
            colour = new


class _Symmetry:
    """Automorphisms that let a destination's max-flow be skipped, each one checked.

    A node permutation ``sigma`` is *checked* for destinations ``r`` and ``w`` when (a) it is
    a permutation of the nodes, (b) it maps every link ``(a, b)`` onto a link ``(sigma(a),
    sigma(b))`` of the same class (``l``, ``L``, ``omega``, outage slots, alpha, transfer
    time: :func:`_link_classes`; with no parallel links and ``sigma`` a bijection this is a
    bijection of the links), (c) ``sigma(r) = w`` and ``|K_w| = |K_r|``, and (d) ``w``'s view
    is ``r``'s carried over: ``source_w(sigma(u)) = source_r(u)``, ``e_w(sigma(u)) =
    e_r(u)``, ``dist(sigma(x), w) = dist(x, r)`` for every node. Then for every ``D`` the
    max-flow network of ``w`` (module docstring, "Cut (max-flow)") is the image of ``r``'s
    under ``sigma``: a link's capacity ``cap_e(D)`` is the count of starts in ``[e(tail),
    D - L_e - dist(head, dest)]`` under its own ``l``, ``omega`` and outages, all of which
    ``sigma`` preserves, and so are the source arcs. Isomorphic networks have equal
    max-flows, so ``w``'s flow bound equals ``r``'s, which the running bound already covers.

    Where the permutations come from does not matter to that argument: colour refinement
    with individualisation (:class:`_Refiner`, :meth:`_propose`: three ways of pairing the
    nodes of a cell, no backtracking) proposes one that maps ``r`` to ``w``, proposals that
    pass (a)-(b) become generators (with their inverses), and a destination reached from a
    computed one by a chain of generators is checked, (c)-(d), with the composed
    permutation (a product of permutations that pass (a)-(b) passes them). A proposal or a
    check that fails costs time, never a value: that destination's flow is computed.
    """

    def __init__(self, prob: _Movement, views: dict[int, _DestView]) -> None:
        self.prob = prob
        self.views = views
        self.n = prob.n
        self.link_class = _link_classes(prob)
        self.keys = prob.src * self.n + prob.dst
        self.key_order = np.argsort(self.keys)
        self.sorted_keys = self.keys[self.key_order]
        self.unique_links = bool(np.all(np.diff(self.sorted_keys) > 0))
        self.refiner = _Refiner(prob.n, prob.src, prob.dst, self.link_class)
        n = prob.n
        union_src = np.concatenate([prob.src, prob.src + n])
        union_dst = np.concatenate([prob.dst, prob.dst + n])
        self.union = _Refiner(2 * n, union_src, union_dst, np.concatenate([self.link_class] * 2))
        self.base: np.ndarray | None = None  # the stable colouring of the graph, on first search
        self.generators: list[np.ndarray] = []
        self.roots: list[int] = []  # destinations whose flow was computed
        self.parent = np.full(n, -1, dtype=np.int64)
        self.via = np.full(n, -1, dtype=np.int64)  # generator index: x = generators[via[x]][parent[x]]
        self.root_of = np.full(n, -1, dtype=np.int64)
        self.failures = 0
        self.ways = ["shift", "keep", "greedy"]
        self.search_seconds = 0.0
        self.skipped = 0

    # -- checks ---------------------------------------------------------------------------
    def _is_link_automorphism(self, sigma: np.ndarray) -> bool:
        n = self.n
        if len(sigma) != n or sigma.min() < 0 or sigma.max() >= n:
            return False
        if not np.array_equal(np.bincount(sigma, minlength=n), np.ones(n, dtype=np.int64)):
            return False
        want = sigma[self.prob.src] * n + sigma[self.prob.dst]
        pos = np.minimum(np.searchsorted(self.sorted_keys, want), len(want) - 1)
        found = self.sorted_keys[pos] == want
        if not found.all():
            return False
        return bool(np.array_equal(self.link_class[self.key_order[pos]], self.link_class))

    def _carries_view(self, sigma: np.ndarray, r: int, w: int) -> bool:
        a, b = self.views[r], self.views[w]
        return (
            int(sigma[r]) == w
            and a.need == b.need
            and np.array_equal(b.source[sigma], a.source)
            and np.array_equal(b.earliest[sigma], a.earliest)
            and np.array_equal(b.to_v[sigma], a.to_v)
        )

    # -- orbits under the generators ------------------------------------------------------
    def _grow(self, starts: list[int]) -> None:
        """Reach, breadth first under the generators, every node not yet reached, from the
        ``starts`` not yet reached (each the root of what it reaches)."""
        frontier = np.array([r for r in starts if self.root_of[r] < 0], dtype=np.int64)
        self.root_of[frontier] = frontier
        while len(frontier):
            found = []
            for i, g in enumerate(self.generators):
                image = g[frontier]
                fresh = self.root_of[image] < 0
                if not fresh.any():
                    continue
                image, first = np.unique(image[fresh], return_index=True)
                came = frontier[fresh][first]
                self.root_of[image] = self.root_of[came]
                self.parent[image] = came
                self.via[image] = i
                found.append(image)
            frontier = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def _regrow(self) -> None:
        self.root_of[:] = -1
        self.parent[:] = -1
        self.via[:] = -1
        self._grow(list(self.roots))

    def _composed(self, w: int) -> np.ndarray:
        """The product of the generators along ``w``'s path from its root."""
        chain = []
        x = w
        while self.parent[x] >= 0:
            chain.append(int(self.via[x]))
            x = int(self.parent[x])
        sigma = np.arange(self.n, dtype=np.int64)
        for i in reversed(chain):
            sigma = self.generators[i][sigma]
        return sigma

    # -- proposals ------------------------------------------------------------------------
    def _base(self) -> np.ndarray:
        if self.base is None:
            prob = self.prob
            kind = np.zeros(self.n, dtype=np.int64)
            need = np.zeros(self.n, dtype=np.int64)
            for v, cs in prob.needs.items():
                need[v] = len(cs)
            held = np.bincount(_holder_matrix(prob).indices, minlength=self.n)
            start = np.unique(np.stack([kind, need, held], axis=1), axis=0, return_inverse=True)[1]
            self.base = self.refiner.refine(start.reshape(-1).astype(np.int64))
        return self.base

    def _propose(self, r: int, w: int, how: str) -> np.ndarray | None:
        """A permutation with ``r -> w`` from refinement with individualisation, or None.

        After each refinement the cells of more than one node are split by pairing nodes of
        the two graphs: ``"greedy"`` pairs the first node of the smallest such cell;
        ``"shift"`` pairs every such cell's nodes in id order, all cells at once (a rotation
        of a ring of chassis shifts the ids); ``"keep"`` pairs with itself each node found in
        the same cell of both graphs (a chassis swap fixes the other chassis), and a cell
        without one in id order."""
        n = self.n
        base = self._base()
        if base[r] != base[w]:
            return None
        colour = np.concatenate([base, base])
        fresh = int(colour.max()) + 1
        colour[r] = colour[n + w] = fresh
        for _ in range(_SYMMETRY_STEPS):
            colour = self.union.refine(colour)
            size = int(colour.max()) + 1
            here = np.bincount(colour[:n], minlength=size)
            there = np.bincount(colour[n:], minlength=size)
            if not np.array_equal(here, there):
                return None
            if here.max() == 1:
                place = np.empty(size, dtype=np.int64)
                place[colour[n:]] = np.arange(n)
                return place[colour[:n]]
            colour = colour.copy()
            if how == "greedy":
                cell = int(np.flatnonzero(here == here[here > 1].min())[0])
                x = int(np.flatnonzero(colour[:n] == cell)[0])
                y = int(np.flatnonzero(colour[n:] == cell)[0])
                colour[x] = colour[n + y] = size
                continue
            for cell in np.flatnonzero(here > 1).tolist():
                xs = np.flatnonzero(colour[:n] == cell)
                ys = np.flatnonzero(colour[n:] == cell)
                common = np.intersect1d(xs, ys) if how == "keep" else xs[:0]
                if len(common):
                    colour[common] = colour[n + common] = size + np.arange(len(common))
                    size += len(common)
                else:
                    colour[xs] = colour[n + ys] = size + np.arange(len(xs))
                    size += len(xs)
        return None

    # -- the flow loop's questions --------------------------------------------------------
    def covered(self, w: int, flow_seconds: float) -> bool:
        """Whether ``w``'s flow bound is proven equal to a computed destination's (then it
        is already in the running bound). Searches for a generator first when ``w`` is not
        reached yet, within the time share :data:`_SYMMETRY_SHARE` of ``flow_seconds``
        (the first search is free) and :data:`_SYMMETRY_FAILURES`."""
        if (
            self.root_of[w] < 0
            and self.failures < _SYMMETRY_FAILURES
            and self.unique_links
            and (not self.generators or self.search_seconds <= _SYMMETRY_SHARE * flow_seconds)
        ):
            self._search(w)
        root = int(self.root_of[w])
        if root < 0 or root == w or self.failures >= _SYMMETRY_FAILURES:
            return False
        if not self._carries_view(self._composed(w), root, w):
            self.failures += 1
            return False
        self.skipped += 1
        return True

    def _search(self, w: int) -> None:
        """Look for a generator mapping a computed destination of ``w``'s colour onto ``w``;
        the way of proposing that worked last is tried first."""
        t0 = time.perf_counter()
        base = self._base()
        r = next((r for r in self.roots if base[r] == base[w]), None)
        if r is not None:
            for how in list(self.ways):
                sigma = self._propose(r, w, how)
                if sigma is not None and self._is_link_automorphism(sigma):
                    self.ways.remove(how)
                    self.ways.insert(0, how)
                    self.generators.append(sigma)
                    inverse = np.empty_like(sigma)
                    inverse[sigma] = np.arange(self.n)
                    self.generators.append(inverse)
                    self._regrow()
                    break
            else:
                self.failures += 1
        self.search_seconds += time.perf_counter() - t0

    def computed(self, w: int) -> None:
        """``w``'s flow was computed: it becomes a root."""
        self.roots.append(w)
        self._grow([w])


def _link_classes(prob: _Movement) -> np.ndarray:
    """Per link, a class id: links of one class have the same ``l``, ``L``, ``omega``,
    outage slots, alpha and transfer time (and cut-through weights)."""
    outage_id = np.zeros(len(prob.src), dtype=np.int64)
    tables: dict[tuple[int, ...], int] = {}
    for link, slots in prob.outages.items():
        outage_id[link] = tables.setdefault(tuple(slots), len(tables) + 1)
    columns = [prob.occ, prob.lat, prob.omega_links, outage_id]
    floats = [prob.alpha_us, prob.transfer_us, prob.tail_us, prob.head_us]
    table = np.stack([np.asarray(c, dtype=np.float64) for c in columns + floats], axis=1)
    return np.unique(table, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


@dataclass(frozen=True)
class _SetCut:
    """The aggregate cut of one node set ``S``: ``need`` distinct chunks held only inside ``S`` and
    wanted outside it must each cross a link leaving ``S`` (``leaving``), with windows from the
    earliest slot a tail can hold one of them (``earliest``) and the distance from a head to the
    nearest outside node that wants one (``to_out``)."""

    need: int
    leaving: np.ndarray
    earliest: np.ndarray
    to_out: np.ndarray


def _candidate_sets(prob: _Movement) -> list[np.ndarray]:
    """Singletons (egress) and the bandwidth clusters: for every link speed, the weakly connected
    components of the links strictly faster than it (the chassis of a hierarchical machine)."""
    sets: list[np.ndarray] = []
    for u in range(prob.n):
        mask = np.zeros(prob.n, dtype=bool)
        mask[u] = True
        sets.append(mask)
    for threshold in np.unique(prob.transfer_us):
        fast = prob.transfer_us < threshold
        if not fast.any():
            continue
        graph = sp.csr_array(
            (np.ones(int(fast.sum())), (prob.src[fast], prob.dst[fast])), shape=(prob.n, prob.n)
        )
        count, labels = connected_components(graph, directed=True, connection="weak")
        if count < 2:
            continue
        for k in range(count):
            mask = labels == k
            if 1 < int(mask.sum()) < prob.n:
                sets.append(mask)
    unique: dict[bytes, np.ndarray] = {m.tobytes(): m for m in sets}
    return list(unique.values())


def _set_cuts(prob: _Movement, dist: np.ndarray, hdist: np.ndarray, windows: bool) -> list[_SetCut]:
    """The aggregate cuts of the candidate sets that have something to push out.

    Per set, the chunks held only inside come from a sparse product over the holders (one
    entry per holding, not a chunk x node product) and the crossing demands from the rows of
    those chunks only; the distance to the outside destinations is 0 at a destination and
    taken as a minimum for the other nodes only. The per-set work is so about the set's own
    chunks times the nodes, where a dense chunk x node product per set made the cuts of a
    64x64 torus (4,096 singletons) cubic in the GPUs.
    """
    num_chunks = len(prob.holders)
    held = _holder_matrix(prob)
    need = np.zeros((num_chunks, prob.n), dtype=bool)
    for v, cs in prob.needs.items():
        need[cs, v] = True
    out = []
    for inside in _candidate_sets(prob):
        only_inside = np.flatnonzero((held @ (~inside).astype(np.int32)) == 0)
        if not len(only_inside):
            continue
        outside = np.flatnonzero(~inside)
        sub = need[np.ix_(only_inside, outside)]
        chunk_hit = sub.any(axis=1)
        if not chunk_hit.any():
            continue
        chunks = only_inside[chunk_hit]
        dests = outside[sub.any(axis=0)]
        leaving = inside[prob.src] & ~inside[prob.dst]
        if windows:
            earliest = hdist[chunks].min(axis=0)
            to_out = np.zeros(prob.n, dtype=dist.dtype)
            is_dest = np.zeros(prob.n, dtype=bool)
            is_dest[dests] = True
            others = np.flatnonzero(~is_dest)
            # dist[d, d] == 0, so a destination's own distance to the set of destinations is 0
            to_out[others] = dist[np.ix_(others, dests)].min(axis=1)
        else:
            earliest = np.zeros(prob.n)
            to_out = np.zeros(prob.n)
        out.append(_SetCut(len(chunks), leaving, earliest, to_out))
    return out


def _set_cut_slots(prob: _Movement, caps: _SlotCapacity, cuts: list[_SetCut]) -> int:
    best = 0
    for cut in cuts:

        links = np.flatnonzero(cut.leaving)

        def ok(D: int, cut: _SetCut = cut, links: np.ndarray = links) -> bool:
            lo = cut.earliest[prob.src[links]]
            hi = (D - prob.lat[links] - cut.to_out[prob.dst[links]]).astype(float)
            return int(caps.count(lo, hi, links).sum()) >= cut.need

        best = max(best, _min_feasible(ok, best))
    return best


def _set_cut_us(prob: _Movement, cuts: list[_SetCut], windows: bool) -> float:
    rate = prob.omega / prob.transfer_us
    best = 0.0
    for cut in cuts:
        if windows:
            offsets = prob.alpha_us + cut.earliest[prob.src] + cut.to_out[prob.dst]
        else:
            offsets = np.zeros(len(prob.src))
        use = cut.leaving & np.isfinite(offsets)
        best = max(best, _solve_piecewise(float(cut.need), offsets[use], rate[use]))
    return best


# --------------------------------------------------------------------------- continuous cut
def _continuous_cut(prob: _Movement, windows: bool, dist_us: np.ndarray, hdist_us: np.ndarray) -> float:
    """Smallest ``T`` (us) with every destination's fractional flow feasible (module docstring)."""
    import networkx as nx

    if not prob.needs:
        return 0.0
    rate = prob.omega / prob.transfer_us  # chunks per microsecond per link
    views = _dest_views(prob, dist_us, hdist_us, windows)
    s = prob.n
    best = _set_cut_us(prob, _set_cuts(prob, dist_us, hdist_us, windows), windows)
    for view in views:
        # c_e: the time before which link e can deliver nothing useful to v.
        offset = prob.alpha_us + view.earliest[prob.src] + view.to_v[prob.dst] if windows else np.zeros(
            len(prob.src)
        )
        usable = np.isfinite(offset)

        def solve_cut(inside: np.ndarray, view: _DestView = view, offset: np.ndarray = offset,
                      usable: np.ndarray = usable) -> float:
            held_outside = float(view.source[~inside[: prob.n]].sum())
            crossing = usable & inside[prob.src] & ~inside[prob.dst]
            return _solve_piecewise(view.need - held_outside, offset[crossing], rate[crossing])

        T = max(best, solve_cut(np.arange(prob.n + 1) != view.v))
        for _ in range(10_000):
            graph = nx.DiGraph()
            graph.add_node(s)
            graph.add_nodes_from(range(prob.n))
            cap = np.where(usable, rate * np.maximum(0.0, T - np.where(usable, offset, 0.0)), 0.0)
            for e in np.nonzero(cap > 0)[0]:
                graph.add_edge(int(prob.src[e]), int(prob.dst[e]), capacity=float(cap[e]))
            for u in np.nonzero(view.source)[0]:
                graph.add_edge(s, int(u), capacity=float(view.source[u]))
            value, (reach, _) = nx.minimum_cut(graph, s, view.v)
            if value >= view.need * (1 - 1e-9):
                break
            inside = np.zeros(prob.n + 1, dtype=bool)
            inside[list(reach)] = True
            T_next = solve_cut(inside)
            if T_next <= T * (1 + _REL_TOL):
                # Float noise: the violated cut is already met at T up to rounding.
                break
            T = T_next
        best = max(best, T)
    return best


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


# --------------------------------------------------------------------------- combining
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
    r"""The combining cut of every candidate set ``S`` and of its complement (module docstring,
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
    """The one-way gossip count as one aggregate cut over *all* links (module docstring,
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


# --------------------------------------------------------------------------- public API
def _slot_triple(instance: Instance, time_windows: bool, stop_at: int | None = None) -> tuple[int, int, int]:
    if instance.collective.combining:
        links = _movement_of_links(instance)
        latency = int(_combining_direct(instance, links.lat, links))
        ports = _combining_ports_slots(instance, links)
        _, rev_ingress, rev_cut = _slot_bounds(_reversed_movement(instance), windows=time_windows)
        ingress = max(ports, rev_ingress)
        cuts = _combining_cuts(instance, links, _distances(links, links.lat), time_windows)
        return latency, ingress, max(ingress, rev_cut, _set_cut_slots(links, _SlotCapacity(links), cuts))
    return _slot_bounds(_movement_of(instance), time_windows, stop_at)


def lower_bound_slots(instance: Instance, *, time_windows: bool = True, stop_at: int | None = None) -> int:
    """The strongest slot bound: ``max(latency, ingress, cut)`` (module docstring).

    Parameters
    ----------
    instance : Instance
    time_windows : bool
        Use the time-window refinement of the cut and ingress bounds (valid; default).
    stop_at : int, optional
        Cheap first: the makespan of a valid schedule of ``instance``. The parts of the bound
        are then computed cheapest first (latency, ingress, the set cuts, then the
        per-destination max-flows) and the rest is skipped as soon as the best so far reaches
        ``stop_at``. The answer is still the full bound: a valid bound ``b >= stop_at`` of an
        instance with a schedule of makespan ``stop_at`` satisfies ``b <= optimum <=
        stop_at <= b``, and the full bound lies in between. (For any other ``stop_at`` the
        answer is a valid bound, at least ``min(stop_at, full bound)``.) Data-movement
        collectives only; combining ones compute the full bound. At 4,096 GPUs the flows
        are most of the time.

    Returns
    -------
    int
        A makespan (slots) that no valid schedule beats.

    Raises
    ------
    ValidationError
        When some demanded chunk cannot reach its destination at all.
    """
    # An Instance is immutable and one solve asks for its bound several times (heuristic
    # portfolio, exact engine, result): keep it on the instance, like its cached properties.
    memo = instance.__dict__.setdefault("_ccplan_lower_bound_slots", {})
    if time_windows in memo:
        return int(memo[time_windows])
    early = ("early", time_windows)  # a bound that stopped at some stop_at <= it
    if stop_at is not None:
        if early in memo and memo[early] >= stop_at:
            return int(memo[early])
        value = max(_slot_triple(instance, time_windows, stop_at))
        if value < stop_at:
            memo[time_windows] = value  # nothing was skipped
        else:
            memo[early] = value
        return int(value)
    memo[time_windows] = max(_slot_triple(instance, time_windows))
    return int(memo[time_windows])


def compute_bounds(
    instance: Instance, *, time_windows: bool = True, upper: int | None = None, flow: object = "auto"
) -> Bounds:
    """All bounds, in slots and in microseconds (module docstring).

    Parameters
    ----------
    instance : Instance
    time_windows : bool
        Use the time-window refinement (valid; default). ``False`` gives the plain
        ForestColl-style cut generalised to slots.
    upper : int, optional
        The makespan of a verified schedule. When it is above the slot bounds, the
        flow-over-time LP bound is computed as :func:`ccplan.pipeline.solve` computes it
        (:func:`ccplan.bounds.flow_lp.gated_flow_bound`, ``mode=flow``: ``"auto"``, True for no
        size limit, False never), with ``relax.FLOW_CAP`` seconds, and reported as
        ``flow_slots``.

    Returns
    -------
    Bounds
    """
    latency, ingress, cut = _slot_triple(instance, time_windows)
    weights_us = None
    if instance.collective.combining:
        links = _movement_of_links(instance)
        weights_us = links.alpha_us + links.transfer_us
        latency_us = _combining_direct(instance, weights_us, links)
        rev = _reversed_movement(instance)
        cut_us = _continuous_cut_of(rev, windows=time_windows)
        cuts = _combining_cuts(instance, links, _distances(links, weights_us), time_windows)
        cut_us = max(cut_us, _combining_ports_us(instance, links), _set_cut_us(links, cuts, time_windows))
    else:
        prob = _movement_of(instance)
        latency_us, cut_us = _continuous_of(prob, time_windows)
    log.debug("bounds of %s: latency %d, ingress %d, cut %d slots; latency %.6g us, cut %.6g us",
              instance.describe(), latency, ingress, cut, latency_us, cut_us)
    values = {"latency": latency, "ingress": ingress, "cut": cut}
    flow_slots = None
    if upper is not None:
        from ccplan.bounds.flow_lp import FLOW_CAP, gated_flow_bound

        fb = gated_flow_bound(instance, max(values.values()), int(upper), mode=flow, time_limit=FLOW_CAP)
        if fb is not None:
            flow_slots = values["flow"] = fb.slots
    best = max(values.values())
    name = next(n for n in BOUND_NAMES if values.get(n) == best)
    return Bounds(
        latency_slots=latency,
        ingress_slots=ingress,
        cut_slots=cut,
        best_slots=best,
        best_name=name,
        latency_us=float(latency_us),
        cut_us=float(cut_us),
        best_us=float(max(latency_us, cut_us)),
        time_windows=time_windows,
        flow_slots=flow_slots,
    )


def _continuous_of(prob: _Movement, windows: bool) -> tuple[float, float]:
    if not prob.needs:
        return 0.0, 0.0
    dist_us = _distances(prob, prob.tail_us)
    hdist_us = _holder_distances(prob, dist_us)
    _check_reachable(prob, hdist_us)
    latency_us = float(max(hdist_us[cs, v].max() for v, cs in prob.needs.items()))
    if not np.array_equal(prob.head_us, prob.tail_us):
        dist_us = _distances(prob, prob.head_us)
        hdist_us = _holder_distances(prob, dist_us)
    return latency_us, _continuous_cut(prob, windows, dist_us, hdist_us)


def _continuous_cut_of(prob: _Movement, windows: bool) -> float:
    if not prob.needs:
        return 0.0
    dist_us = _distances(prob, prob.alpha_us + prob.transfer_us)
    hdist_us = _holder_distances(prob, dist_us)
    _check_reachable(prob, hdist_us)
    return _continuous_cut(prob, windows, dist_us, hdist_us)
