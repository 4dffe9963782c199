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

import logging
import math
from dataclasses import dataclass
from typing import Any

from ccplan.bounds.combining import (
    _combining_cuts,
    _combining_direct,
    _combining_ports_slots,
    _combining_ports_us,
)
from ccplan.bounds.continuous import _continuous_cut_of, _continuous_of
from ccplan.bounds.movement import _distances, _movement_of, _movement_of_links, _reversed_movement
from ccplan.bounds.search import _SlotCapacity
from ccplan.bounds.setcuts import _set_cut_slots, _set_cut_us
from ccplan.bounds.slots import _slot_bounds
from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance

log = logging.getLogger(__name__)

BOUND_NAMES: tuple[str, ...] = ("latency", "ingress", "cut", "flow")
"""Names of the slot bounds, in the order used to break ties for :attr:`Bounds.best_name`
(``flow``: the flow-over-time LP bound of :mod:`ccplan.bounds.flow_lp`, when computed)."""


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
