"""Continuous-time alpha-beta replay of a slotted schedule.

The slot model rounds every transfer up to whole slots; this simulator asks what the same
schedule costs on the real network (Hockney's alpha-beta model, ``reference/msccl_and_peers.md``
section 4.1), keeping the schedule's order but dropping its slot grid:

- a send of one chunk (``mu`` bytes) on link ``e`` keeps the link busy for ``mu / B_e`` and the
  chunk is usable at the receiver ``alpha_e + mu / B_e`` after it starts (alpha is propagation and
  pipelines: the next send on the link may start ``mu / B_e`` after the previous one);
- a send starts as soon as its chunk is at the sender (time 0 for a slot-0 holder) and the link is
  free; sends sharing a link are served in schedule order (slot, then position in the schedule);
- which receives a send depends on is read from the slots: the receives of the same chunk at
  the sender that are usable by the send's slot (``slot + L <= t``). For data-movement collectives
  the first copy suffices; for combining ones (reduce sends) the sender waits for all of them,
  since the chunk it forwards must include every contribution the slotted schedule counted;
- a send with ``reduce=True`` costs the receiver ``reduce_cost_us_per_byte * mu`` more;
- a send out of a cut-through switch (``switch_model == "cut-through"``) streams the bytes as
  they come in: it depends on the one receive of the chunk at the switch in the send's slot,
  starts once that receive's first byte is there (its start plus its alpha) and the link is
  free, and ends no earlier than that receive's last byte (``max(begin + mu/B, tail)``), plus
  the link's alpha;
- completion is the latest arrival over the collective's demands.

The result also carries the slotted time ``D * tau`` of the same schedule, so
``rounding_us = slotted_us - completion_us`` is what the slot grid (and, with an alpha cap,
the longer slot) costs or saves against continuous time.

What is not modelled: several chunks at once on one link (a link serves one chunk at a time,
at full bandwidth; a slot that holds ``omega > 1`` chunks of a fast link is served in turn),
single-port limits and outages (they constrain the slotted schedule, which this replays).
For a valid store-and-forward schedule with ``capacity == 1`` and ``alpha_threshold == 0``
the ``k``-th send of slot ``t`` on a link starts no later than ``t tau + (k - 1) mu / B`` (by
induction over the schedule: its chunk arrived by ``(r + L) tau <= t tau``, and the sends before
it on the link, at most ``omega = floor(tau B / mu)`` per slot, freed it by then), so it is usable
by ``(t + L) tau`` and the completion is at most ``makespan_slots * tau``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Outcome of :func:`simulate`.

    Attributes
    ----------
    completion_us : float
        Time at which the last demand is satisfied (0 when there is none).
    algbw_GBps : float
        Output bytes / completion time (``inf`` for an instantaneous collective).
    start_us, finish_us : numpy.ndarray
        Per send, aligned with ``schedule.sends``: start on the link, and the time the chunk
        is usable at the receiver (``start + alpha + mu/B`` plus the reduce cost).
    arrival_us : dict
        ``(chunk, node) -> time`` the node first holds (data movement) or last receives
        (combining) the chunk; 0 for slot-0 holders.
    slotted_us : float, optional
        The slot model's time of the same schedule, ``D * tau``.
    """

    completion_us: float
    algbw_GBps: float
    start_us: np.ndarray = field(repr=False)
    finish_us: np.ndarray = field(repr=False)
    arrival_us: dict[tuple[Chunk, int], float] = field(repr=False, default_factory=dict)
    slotted_us: float | None = None

    @property
    def rounding_us(self) -> float | None:
        """``slotted_us - completion_us``: the cost of the slot grid in continuous time
        (positive when the slots round transfers or alphas up, e.g. under an alpha cap)."""
        return None if self.slotted_us is None else self.slotted_us - self.completion_us

    def __post_init__(self) -> None:
        if not (math.isfinite(self.completion_us) and self.completion_us >= 0):
            raise ValidationError(f"completion_us must be finite and >= 0, got {self.completion_us!r}")
        if self.start_us.shape != self.finish_us.shape:
            raise ValidationError("start_us and finish_us must have the same length")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``algbw_GBps`` is None when infinite)."""
        return {
            "completion_us": self.completion_us,
            "algbw_GBps": None if math.isinf(self.algbw_GBps) else self.algbw_GBps,
            "start_us": [float(x) for x in self.start_us],
            "finish_us": [float(x) for x in self.finish_us],
            "slotted_us": self.slotted_us,
            "rounding_us": self.rounding_us,
        }


def simulate(instance: Instance, schedule: Schedule, reduce_cost_us_per_byte: float = 0.0) -> SimResult:
    """Replay ``schedule`` in continuous time under the alpha-beta model (module docstring).

    Parameters
    ----------
    instance : Instance
    schedule : Schedule
    reduce_cost_us_per_byte : float
        Extra receiver time per byte for sends with ``reduce=True`` (>= 0).

    Returns
    -------
    SimResult

    Raises
    ------
    ValidationError
        A send on a missing link or of an unknown chunk; a send whose chunk is not at its
        sender by its slot (named by chunk, link and slot); a demand never met.
    """
    if not (isinstance(reduce_cost_us_per_byte, (int, float)) and math.isfinite(reduce_cost_us_per_byte)
            and reduce_cost_us_per_byte >= 0):
        raise ValidationError(
            f"reduce_cost_us_per_byte must be a non-negative number, got {reduce_cost_us_per_byte!r}"
        )
    topo = instance.topology
    coll = instance.collective
    holders = coll.holders
    combining = coll.combining
    latency = instance.latency
    transfer = instance.transfer_us
    alpha = topo.alpha
    mu = instance.chunk_bytes
    reduce_us = float(reduce_cost_us_per_byte) * mu

    sends = schedule.sends
    links = []
    for send in sends:
        if send.chunk not in holders:
            raise ValidationError(f"{send.describe()}: the collective has no such chunk")
        link = topo.link_index.get((send.src, send.dst))
        if link is None:
            raise ValidationError(f"{send.describe()}: the topology has no link {send.src}->{send.dst}")
        links.append(link)

    # Receives per (chunk, node), in schedule order: (usable slot, index of the send).
    receives: dict[tuple[Chunk, int], list[tuple[int, int]]] = {}
    for i, send in enumerate(sends):
        receives.setdefault((send.chunk, send.dst), []).append((send.slot + int(latency[links[i]]), i))

    start = np.zeros(len(sends))
    finish = np.zeros(len(sends))
    link_free = np.zeros(topo.num_links)
    bufferless = instance.bufferless
    order: list[int] = list(range(len(sends)))
    if bufferless:
        # A cut-through hop into a GPU may feed that GPU's send in the same slot (L = delta
        # can be 0): the switches' sends of a slot go first, as in the verifier.
        order.sort(key=lambda i: (sends[i].slot, sends[i].src not in bufferless))
    for i in order:
        send = sends[i]
        link = links[i]
        held = send.src in holders[send.chunk]
        if send.src in bufferless and not held:
            passing = [j for usable, j in receives.get((send.chunk, send.src), ()) if usable == send.slot]
            if not passing:
                raise ValidationError(
                    f"{send.describe()}: cut-through switch {send.src} does not receive the chunk in "
                    f"slot {send.slot}; the schedule is not causal"
                )
            j = min(passing, key=lambda k: finish[k])
            head = start[j] + alpha[links[j]]
            begin = max(head, link_free[link])
            end = max(begin + transfer[link], finish[j])
            start[i] = begin
            link_free[link] = end
            finish[i] = end + alpha[link]
            continue
        deps = [j for usable, j in receives.get((send.chunk, send.src), ()) if usable <= send.slot]
        if not deps and not held:
            later = [usable for usable, _ in receives.get((send.chunk, send.src), ())]
            when = f"it arrives only from slot {min(later)}" if later else "it never arrives there"
            raise ValidationError(
                f"{send.describe()}: node {send.src} does not hold the chunk by slot {send.slot} ({when}); "
                "the schedule is not causal"
            )
        if combining:
            ready = max((finish[j] for j in deps), default=0.0)
        else:
            ready = 0.0 if held else min(finish[j] for j in deps)
        begin = max(ready, link_free[link])
        start[i] = begin
        link_free[link] = begin + transfer[link]
        finish[i] = begin + alpha[link] + transfer[link] + (reduce_us if send.reduce else 0.0)

    arrival: dict[tuple[Chunk, int], float] = {}
    for chunk, nodes in holders.items():
        for v in nodes:
            arrival[(chunk, v)] = 0.0
    for key, recs in receives.items():
        times = [finish[j] for _, j in recs]
        if combining:
            arrival[key] = max(times)
        elif key not in arrival:
            arrival[key] = min(times)

    completion = 0.0
    slotted = 0
    for chunk, node in _targets(instance):
        if combining and (chunk, node) not in receives:
            if holders[chunk] - {node}:
                raise ValidationError(
                    f"chunk {list(chunk)}: node {node} never receives the other contributions"
                )
            continue
        at = arrival.get((chunk, node))
        if at is None:
            raise ValidationError(f"chunk {list(chunk)} never reaches node {node}")
        completion = max(completion, at)
        usable = [u for u, _ in receives.get((chunk, node), ())]
        # A combining target holds its own contribution from slot 0 but the reduction only
        # from its last receive; a data-movement holder of slot 0 needs no receive.
        if usable and (combining or node not in holders[chunk]):
            slotted = max(slotted, max(usable) if combining else min(usable))
    log.debug("simulated %d sends of %s: completion %.6g us", len(sends), instance.describe(), completion)
    return SimResult(
        completion_us=float(completion),
        algbw_GBps=instance.algbw_GBps(completion),
        start_us=start,
        finish_us=finish,
        arrival_us=arrival,
        slotted_us=instance.slots_to_us(slotted),
    )


def _targets(instance: Instance) -> list[tuple[Chunk, int]]:
    """(chunk, node) pairs whose arrival ends the collective."""
    coll = instance.collective
    if not coll.combining:
        return list(coll.demands)
    return sorted((c, w) for c, ws in coll.wanted.items() for w in ws)
