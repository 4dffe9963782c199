"""Instance = topology + collective + chunk size + slot rule, and the slotted numbers.

The slot semantics are the canonical ones of DESIGN.md (shared by every engine, the verifier
and the simulator):

- ``tau = mu / max B`` (the paper's slot length, section 1.2 item 1); optionally from the
  slowest link or given explicitly;
- per link ``l = ceil((mu / B) / tau)`` occupancy slots, ``delta = ceil(alpha / tau)``
  propagation slots (0 when ``alpha / tau <= alpha_threshold``), ``L = delta + l``;
- a send ``(chunk, u -> v, t)`` occupies the link in slots ``t .. t+l-1`` and the chunk is
  usable at ``v`` from slot ``t + L``;
- capacity ``omega[(u, v), t]``: ``capacity * max(1, floor(B tau / mu))`` by default (one
  chunk per slot when tau is the link's own transfer time or shorter; TE-CCL's multi-chunk
  slot when tau is longer, e.g. from the slowest link), 0 for an outage;
- switch model: ``store-and-forward`` (the paper's, default: a switch is a node like any
  other) or ``cut-through`` (TE-CCL's: a switch holds nothing, forwards a chunk in the slot it
  arrives, and a hop from a switch into a GPU costs only its ``delta``); see docs/model.md;
- alpha cap (TE-CCL's, optional): ``tau`` is raised to ``min alpha / alpha_cap`` when the
  rule gives a shorter slot, so kilobyte messages get a tractable slot count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.instances.catalog import collective_from_dict
from ccplan.instances.collectives import Collective
from ccplan.instances.topology import SWITCH_MODELS, Topology, check_keys
from ccplan.parsing import format_size, int_value, parse_size, show

_EPS = 1e-9

TAU_RULES: tuple[str, ...] = ("fastest", "slowest", "explicit")

TECCL_ALPHA_CAP = 200.0
"""TE-CCL's ``alpha_epoch_duration_ratio_max``: the largest ``min alpha / tau`` it accepts."""


def _triple(value: Any, i: int) -> tuple[Any, ...]:
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        raise ValidationError(f"outages[{i}] must be (src, dst, slot), got {show(value)}")
    return tuple(value)


def _ceil(x: float) -> int:
    """Ceiling that forgives float noise (``ceil(2.0000000001) == 2``)."""
    return math.ceil(x - _EPS)


@dataclass(frozen=True)
class Instance:
    """A frozen, validated scheduling problem.

    Parameters
    ----------
    topology : Topology
    collective : Collective
    size_bytes : float
        Output buffer size of one GPU (TE-CCL's convention); the chunk size is
        ``size_bytes / collective.pieces``.
    tau_rule : {"fastest", "slowest", "explicit"}
        Slot length from the fastest link (the paper's tau, default), the slowest, or
        ``tau_us`` given explicitly.
    tau_us_explicit : float, optional
        The slot length in microseconds when ``tau_rule == "explicit"``.
    alpha_threshold : float
        ``delta = 0`` when ``alpha / tau <= alpha_threshold`` (TE-CCL's rule; 0 gives the
        paper's literal ``ceil``).
    single_port : bool
        At most one send and one receive per node per slot (the model of ``001_*.txt``).
    capacity : int
        Multiplier of the per-link default ``omega`` (:attr:`link_capacity`): parallel
        channels per link; 1 gives the paper's (7) on the fastest links.
    outages : tuple of (src, dst, slot)
        Slots in which a link has ``omega = 0`` (an outage or a reserved slot).
    switch_model : {"store-and-forward", "cut-through"}
        How switch nodes forward (module docstring, docs/model.md), for every collective: under
        ``cut-through`` a switch that does not reduce relays each partial sum of a combining
        collective in the slot it arrives, as it relays a data chunk.
    alpha_cap : float, optional
        TE-CCL's alpha cap: when ``min alpha / tau`` exceeds it, ``tau = min alpha / alpha_cap``
        (TE-CCL uses 200, :data:`TECCL_ALPHA_CAP`). Not applied to an explicit ``tau``.
    switch_reduce : bool
        Every switch may add partial sums itself (in-network reduction: NVLS / SHARP-class
        hardware). Off (default), only the switches whose node says ``reduce`` may
        (:attr:`reducing_switches`); the others relay partial sums without combining them.
    """

    topology: Topology
    collective: Collective
    size_bytes: float
    tau_rule: str = "fastest"
    tau_us_explicit: float | None = None
    alpha_threshold: float = 0.1
    single_port: bool = False
    capacity: int = 1
    outages: tuple[tuple[int, int, int], ...] = field(default=())
    switch_model: str = "store-and-forward"
    alpha_cap: float | None = None
    switch_reduce: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.topology, Topology):
            raise ValidationError("instance.topology must be a Topology")
        if not isinstance(self.collective, Collective):
            raise ValidationError("instance.collective must be a Collective")
        self.collective.check_against(self.topology)
        try:
            size = parse_size(self.size_bytes)
        except ValidationError as exc:
            raise ValidationError(f"instance.size_bytes: {exc}") from None
        object.__setattr__(self, "size_bytes", size)
        if size / self.collective.pieces < 1:
            raise ValidationError(
                f"size {format_size(size)} split into {self.collective.pieces} chunks gives chunks of "
                f"{size / self.collective.pieces:g} bytes; a chunk is at least one byte "
                "(raise the size or lower --chunks)"
            )
        if self.tau_rule not in TAU_RULES:
            raise ValidationError(f"tau_rule must be one of {TAU_RULES}, got {show(self.tau_rule)}")
        if self.tau_rule == "explicit":
            tau = self.tau_us_explicit
            number = isinstance(tau, (int, float)) and not isinstance(tau, bool)
            if not (number and 0 < float(tau) < math.inf):  # type: ignore[arg-type]
                raise ValidationError(
                    f"tau_us must be a positive finite number with tau_rule 'explicit', got {show(tau)}"
                )
        elif self.tau_us_explicit is not None:
            raise ValidationError("tau_us is only allowed with tau_rule 'explicit'")
        at = self.alpha_threshold
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= float(at) < math.inf:
            raise ValidationError(f"alpha_threshold must be a finite number >= 0, got {show(at)}")
        int_value(self.capacity, "capacity", low=1)
        outages = tuple(
            sorted(
                {
                    tuple(int_value(x, f"outages[{i}][{j}]") for j, x in enumerate(_triple(o, i)))
                    for i, o in enumerate(self.outages)
                }
            )
        )
        for a, b, t in outages:
            if not self.topology.has_link(a, b):
                raise ValidationError(f"outages: no link {a}->{b} in topology {self.topology.name!r}")
            if t < 0:
                raise ValidationError(f"outages: slot must be >= 0, got {t} on link {a}->{b}")
        object.__setattr__(self, "outages", outages)
        if self.switch_model not in SWITCH_MODELS:
            raise ValidationError(
                f"switch_model must be one of {SWITCH_MODELS}, got {show(self.switch_model)}"
            )
        if self.alpha_cap is not None:
            cap = self.alpha_cap
            number = isinstance(cap, (int, float)) and not isinstance(cap, bool)
            if not (number and math.isfinite(cap) and cap > 0):
                raise ValidationError(f"alpha_cap must be a positive number, got {show(self.alpha_cap)}")
            if self.tau_rule == "explicit":
                raise ValidationError("alpha_cap applies to tau_rule 'fastest' or 'slowest', not 'explicit'")
            object.__setattr__(self, "alpha_cap", float(self.alpha_cap))
        if not isinstance(self.switch_reduce, bool):
            raise ValidationError(f"switch_reduce must be true or false, got {show(self.switch_reduce)}")
        self._check_slots()
        self._check_reachable()

    def _check_slots(self) -> None:
        """Reject a slot length that makes a hop's ``l`` or ``delta`` absurd or overflow.

        A 1e308 GB/s link next to a 50 GB/s one, an alpha of 1e300 us or an explicit
        ``tau_us`` of 1e-12 give per-hop slot counts no schedule could use; the message names
        the link and the value instead of an OverflowError later.
        """
        from ccplan.instances.estimate import MAX_SLOTS_PER_HOP, slots_per_hop

        tau = self.tau_us
        if not (math.isfinite(tau) and tau > 0):
            raise ValidationError(
                f"slot length tau underflows to {tau!r} us (chunk of {self.chunk_bytes:g} bytes on "
                f"links up to {self.topology.bandwidth.max():g} GB/s)"
            )
        occupancy, delay = slots_per_hop(self)
        for name, values, field_name in (
            ("an occupancy l", occupancy, "bandwidth_GBps"),
            ("a delay delta", delay, "alpha_us"),
        ):
            worst = int(np.argmax(values))
            if not values[worst] <= MAX_SLOTS_PER_HOP:
                link = self.topology.links[worst]
                value = getattr(link, field_name)
                raise ValidationError(
                    f"link {link.src}->{link.dst}: {field_name} {value:g} gives {name} of "
                    f"{values[worst]:.3g} slots of tau={tau:.3g} us (at most {MAX_SLOTS_PER_HOP:.0e}); "
                    "check the link or use --tau-rule slowest / a larger --tau-us"
                )

    def _check_reachable(self) -> None:
        """Reject a topology that cannot host the collective: a demand no path can serve.

        Data-movement collectives need a path from some holder of each chunk to each node
        that wants it; combining ones (every contribution is reduced into the result) need a
        path from every holder. Strongly connected components answer almost every case at
        once (a strongly connected topology at once, otherwise one array comparison per
        chunk); only demands across components fall back to a search per holder set.
        """
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import breadth_first_order, connected_components

        topo = self.topology
        index = topo.node_index
        n = topo.num_nodes
        rows = [index[lk.src] for lk in topo.links]
        cols = [index[lk.dst] for lk in topo.links]
        graph = csr_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n, n))
        count, labels = connected_components(graph, directed=True, connection="strong")
        if count == 1:
            return  # strongly connected: every path exists
        ids = np.asarray(topo.node_ids, dtype=np.int64)
        label_of = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
        label_of[ids] = labels
        reach_cache: dict[int, frozenset[int]] = {}

        def reach(node: int) -> frozenset[int]:
            if node not in reach_cache:
                order = breadth_first_order(graph, index[node], directed=True, return_predecessors=False)
                reach_cache[node] = frozenset(topo.node_ids[i] for i in order)
            return reach_cache[node]

        every = self.collective.combining
        pre = dict(self.collective.pre)
        for chunk, targets in self.collective.post:
            sources = pre[chunk]
            # one array pass per chunk (a 64x64 torus AllGather has 4,096 targets per chunk)
            seen = label_of[np.asarray(targets, dtype=np.int64)]
            first = label_of[sources[0]]
            if bool(np.all(seen == first)) and all(label_of[v] == first for v in sources):
                continue  # one strongly connected component: every path exists
            for node in targets:
                others = [s for s in sources if s != node]
                if not others:
                    continue
                ok = [s for s in others if labels[index[s]] == labels[index[node]] or node in reach(s)]
                if (len(ok) == len(others)) if every else ok:
                    continue
                source = sorted(set(others) - set(ok))[0]
                raise ValidationError(
                    f"topology {topo.name!r} cannot host {self.collective.kind}: chunk {list(chunk)} "
                    f"cannot reach node {node} (no path from node {source})"
                )

    # ----------------------------------------------------------------- slotted numbers
    @property
    def chunk_bytes(self) -> float:
        """``mu``: bytes per chunk."""
        return self.size_bytes / self.collective.pieces

    @cached_property
    def transfer_us(self) -> np.ndarray:
        """Per-link time to push one chunk, ``mu / B``, in microseconds."""
        # bytes / (GB/s) = 1e-9 s = 1e-3 us
        return self.chunk_bytes / self.topology.bandwidth * 1e-3

    @cached_property
    def tau_us(self) -> float:
        """Slot length in microseconds (see ``tau_rule``)."""
        if self.tau_rule == "explicit":
            assert self.tau_us_explicit is not None
            return float(self.tau_us_explicit)
        if self.topology.num_links == 0:
            raise ValidationError(f"topology {self.topology.name!r} has no links")
        tau = float(self.transfer_us.min() if self.tau_rule == "fastest" else self.transfer_us.max())
        return max(tau, self.capped_tau_floor_us)

    @property
    def uncapped_tau_us(self) -> float:
        """The slot length the tau rule gives before the alpha cap (TE-CCL's "expected" tau)."""
        if self.tau_rule == "explicit" or self.alpha_cap is None:
            return self.tau_us
        return float(self.transfer_us.min() if self.tau_rule == "fastest" else self.transfer_us.max())

    @property
    def capped_tau_floor_us(self) -> float:
        """``min alpha / alpha_cap`` over every link, zero alphas included (0 without a cap).

        TE-CCL (``set_epoch_duration``) raises tau to this value when the rule gives a shorter
        one, so that the smallest alpha spans at most ``alpha_cap`` slots. Its smallest alpha
        (``get_min_alpha``) counts a link with alpha 0, so one such link turns the cap off;
        so does this one (docs/model.md).
        """
        if self.alpha_cap is None or self.tau_rule == "explicit":
            return 0.0
        alphas = self.topology.alpha
        return float(alphas.min()) / self.alpha_cap if len(alphas) else 0.0

    @cached_property
    def occupancy(self) -> np.ndarray:
        """Per-link ``l``: slots a send occupies the link (>= 1)."""
        return np.array([max(1, _ceil(x / self.tau_us)) for x in self.transfer_us], dtype=np.int64)

    @cached_property
    def delay(self) -> np.ndarray:
        """Per-link ``delta``: propagation slots (0 below the alpha threshold)."""
        out = []
        for a in self.topology.alpha:
            ratio = a / self.tau_us
            out.append(0 if ratio <= self.alpha_threshold else _ceil(ratio))
        return np.array(out, dtype=np.int64)

    @cached_property
    def latency(self) -> np.ndarray:
        """Per-link ``L``: a chunk sent in slot t is usable at the head from t+L.

        ``L = delta + l``, except under ``cut-through`` on a link from a switch into a GPU,
        where the transfer overlaps the previous hop's and ``L = delta`` (TE-CCL's
        instantaneous switch-to-GPU hop; it may be 0).
        """
        lat = self.delay + self.occupancy
        cut = self.cut_through_links
        return np.where(cut, self.delay, lat)

    @cached_property
    def deliveries(self) -> int:
        """The sends the collective needs at least
        (:func:`ccplan.instances.estimate.count_deliveries`), counted once per instance: the
        memory estimate and the time limit's share for verification both use it (0.38 s for
        an AMD x2 ReduceScatter at C = 2,048)."""
        from ccplan.instances.estimate import count_deliveries

        return count_deliveries(self)

    @cached_property
    def drops_alphas(self) -> bool:
        """Whether the slots leave out an alpha the machine has: a link with ``alpha > 0`` and
        no propagation slots (``alpha / tau <= alpha_threshold``). The slot time then does not
        bound the schedule's alpha-beta time from above."""
        return bool(((np.asarray(self.topology.alpha) > 0) & (self.delay == 0)).any())

    @cached_property
    def cut_through_links(self) -> np.ndarray:
        """Boolean per link: a cut-through hop (switch into a non-switch node).

        All False under ``store-and-forward``. Switch-to-switch hops keep their full ``L``
        (as in TE-CCL), which also keeps every cycle of the topology at a positive latency.
        """
        topo = self.topology
        if self.switch_model != "cut-through":
            return np.zeros(topo.num_links, dtype=bool)
        switches = set(topo.switches)
        return np.array([lk.src in switches and lk.dst not in switches for lk in topo.links], dtype=bool)

    @cached_property
    def bufferless(self) -> frozenset[int]:
        """Nodes that hold nothing: the switches under ``cut-through`` (else empty).

        Such a node receives a chunk any number of times and forwards it only in a slot in
        which it arrives.
        """
        if self.switch_model != "cut-through":
            return frozenset()
        return frozenset(self.topology.switches)

    @cached_property
    def reducing_switches(self) -> frozenset[int]:
        """The switches that may add partial sums (in-network reduction): every switch with
        :attr:`switch_reduce`, else those whose node declares ``reduce``. Every engine, the
        verifier, the bounds and the exporters ask this one set."""
        topo = self.topology
        if self.switch_reduce:
            return frozenset(topo.switches)
        return frozenset(n.id for n in topo.nodes if n.reduce)

    @cached_property
    def link_capacity(self) -> np.ndarray:
        """Per-link default ``omega``: ``capacity * max(1, floor(B tau / mu))``.

        The one helper every engine, the verifier, the MILP's (7) and the bounds use. A link
        that pushes a chunk in ``mu / B <= tau`` carries ``floor(tau B / mu)`` chunks per slot
        (TE-CCL's ``floor(cap * tau)``); a slower link carries one, over ``l`` slots.
        """
        per_slot = np.floor(self.tau_us / self.transfer_us + _EPS).astype(np.int64)
        return self.capacity * np.maximum(1, per_slot)

    @cached_property
    def outage_set(self) -> frozenset[tuple[int, int]]:
        """``(link index, slot)`` pairs with zero capacity."""
        index = self.topology.link_index
        return frozenset((index[(a, b)], t) for a, b, t in self.outages)

    def omega(self, link: int, slot: int) -> int:
        """Capacity of link (by index) in ``slot``: chunks that may occupy it at once."""
        return 0 if (link, slot) in self.outage_set else int(self.link_capacity[link])

    def slots_to_us(self, slots: float) -> float:
        """Convert a number of slots to microseconds."""
        return float(slots) * self.tau_us

    def algbw_GBps(self, time_us: float) -> float:
        """Algorithmic bandwidth: output bytes / time (GB/s), as TE-CCL reports it."""
        if time_us <= 0:
            return math.inf
        return self.size_bytes / (time_us * 1e3)

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """JSON form (topology inline, so a schedule file is self-contained)."""
        out: dict[str, Any] = {
            "topology": self.topology.to_dict(),
            "collective": self.collective.to_dict(),
            "size_bytes": self.size_bytes,
            "tau_rule": self.tau_rule,
            "alpha_threshold": self.alpha_threshold,
            "single_port": self.single_port,
            "capacity": self.capacity,
            "outages": [list(o) for o in self.outages],
        }
        if self.tau_us_explicit is not None:
            out["tau_us"] = self.tau_us_explicit
        # Written only when set, so files of the default model stay as they were.
        if self.switch_model != "store-and-forward":
            out["switch_model"] = self.switch_model
        if self.alpha_cap is not None:
            out["alpha_cap"] = self.alpha_cap
        if self.switch_reduce:
            out["switch_reduce"] = True
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Instance:
        """Rebuild from :meth:`to_dict` output."""
        if not isinstance(data, Mapping):
            raise ValidationError("instance must be a JSON object")
        allowed = {
            "topology",
            "collective",
            "size_bytes",
            "tau_rule",
            "tau_us",
            "alpha_threshold",
            "single_port",
            "capacity",
            "outages",
            "switch_model",
            "alpha_cap",
            "switch_reduce",
        }
        check_keys(data, allowed, {"topology", "collective", "size_bytes"}, "instance")
        topology = Topology.from_dict(data["topology"])
        collective = collective_from_dict(data["collective"], topology)
        outages = data.get("outages", [])
        if not isinstance(outages, list) or any(not isinstance(o, list) or len(o) != 3 for o in outages):
            raise ValidationError("instance.outages must be a list of [src, dst, slot]")
        return cls(
            topology=topology,
            collective=collective,
            size_bytes=data["size_bytes"],
            tau_rule=data.get("tau_rule", "fastest"),
            tau_us_explicit=data.get("tau_us"),
            alpha_threshold=data.get("alpha_threshold", 0.1),
            single_port=bool(data.get("single_port", False)),
            capacity=data.get("capacity", 1),
            outages=tuple(tuple(o) for o in outages),  # type: ignore[misc]
            switch_model=data.get("switch_model", "store-and-forward"),
            alpha_cap=data.get("alpha_cap"),
            switch_reduce=data.get("switch_reduce", False),
        )

    def with_switch_model(self, switch_model: str) -> Instance:
        """The same instance under another switch model (e.g. the store-and-forward twin a
        heuristic solves before :mod:`ccplan.schedule.cut_through` re-times it)."""
        return replace(self, switch_model=switch_model)

    def describe(self) -> str:
        """One line naming the instance, for logs and tables."""
        coll = self.collective
        root = f" root={coll.root}" if coll.root is not None else ""
        return (
            f"{self.topology.name} {coll.kind}{root} size={format_size(self.size_bytes)} C={coll.chunks} "
            f"tau={self.tau_us:.6g}us"
            + ("" if self.switch_model == "store-and-forward" else f" switch={self.switch_model}")
            + (" switches reduce" if self.switch_reduce else "")
        )


def make_instance(
    topology: Topology,
    collective: Collective,
    size: str | float,
    *,
    tau_rule: str = "fastest",
    tau_us: float | None = None,
    alpha_threshold: float = 0.1,
    single_port: bool = False,
    capacity: int = 1,
    outages: Iterable[tuple[int, int, int]] = (),
    switch_model: str = "store-and-forward",
    alpha_cap: float | None = None,
    switch_reduce: bool = False,
) -> Instance:
    """Build an :class:`Instance`, parsing ``size`` (``"1GB"`` or bytes)."""
    return Instance(
        topology=topology,
        collective=collective,
        size_bytes=parse_size(size),
        tau_rule=tau_rule,
        tau_us_explicit=tau_us,
        alpha_threshold=alpha_threshold,
        single_port=single_port,
        capacity=capacity,
        outages=tuple(outages),
        switch_model=switch_model,
        alpha_cap=alpha_cap,
        switch_reduce=switch_reduce,
    )
