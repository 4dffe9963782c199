"""The independent verifier: checks a schedule against an instance, nothing else.

It depends only on :class:`~ccplan.instances.Instance` and :class:`Schedule` (no engine, no
solver), replays the sends slot by slot with the canonical semantics of DESIGN.md and names
the chunk, link and slot of every violation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule, Send

VIOLATION_KINDS: tuple[str, ...] = (
    "unknown-chunk",
    "no-link",
    "causality",
    "duplicate-receive",
    "capacity",
    "single-port-send",
    "single-port-receive",
    "postcondition",
    "reduce-not-combining",
    # combining collectives (ccplan.schedule.combining)
    "double-count",
    "copy-overwrite",
    "switch-reduce",
)


@dataclass(frozen=True)
class Violation:
    """One broken rule.

    Parameters
    ----------
    kind : str
        One of :data:`VIOLATION_KINDS`.
    message : str
        Human text naming chunk, link and slot.
    chunk, link, slot
        The offending chunk, ``(src, dst)`` and slot, where they apply.
    """

    kind: str
    message: str
    chunk: Chunk | None = None
    link: tuple[int, int] | None = None
    slot: int | None = None

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class Report:
    """Outcome of :func:`verify`.

    Attributes
    ----------
    ok : bool
        No violation.
    violations : tuple of Violation
    makespan_slots : int or None
        First slot at whose start every postcondition holds (None when one never holds).
    makespan_us : float or None
        ``makespan_slots * tau``.
    arrivals : dict
        ``(chunk, node) -> slot`` from which the node holds the chunk (0 for the precondition).
    """

    ok: bool
    violations: tuple[Violation, ...]
    makespan_slots: int | None
    makespan_us: float | None
    num_sends: int
    arrivals: dict[tuple[Chunk, int], int] = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {
            "ok": self.ok,
            "makespan_slots": self.makespan_slots,
            "makespan_us": self.makespan_us,
            "num_sends": self.num_sends,
            "violations": [
                {
                    "kind": v.kind,
                    "message": v.message,
                    "chunk": list(v.chunk) if v.chunk else None,
                    "link": list(v.link) if v.link else None,
                    "slot": v.slot,
                }
                for v in self.violations
            ],
        }


class Occupancy:
    """Link and port occupancy of accepted sends, and the capacity rules over it.

    Shared by both verifiers: capacity (7) over the occupancy window ``t .. t+l-1`` against
    ``omega``, and the single-port option. Sends are only recorded by :meth:`add`; the
    counting is done once, with numpy, in :meth:`violations` (one row per occupied link-slot,
    so memory is a few integers per send rather than a Python list per link-slot).
    """

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self._sends: list[Send] = []
        self._links: list[int] = []

    def add(self, send: Send, link: int) -> None:
        """Record ``send`` on link index ``link`` for its ``l`` occupancy slots."""
        self._sends.append(send)
        self._links.append(link)

    def _overloaded(
        self, owner: np.ndarray, slot: np.ndarray, row: np.ndarray, limit: Callable[[np.ndarray], np.ndarray]
    ) -> list[tuple[int, int, list[Send]]]:
        """``(owner, slot, sends)`` of every (owner, slot) pair used by more than ``limit``
        sends, in owner then slot order; ``row[i]`` is the send behind occupied slot ``i``."""
        span = int(slot.max()) + 1
        keys = owner * span + slot
        uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        bad = np.nonzero(counts > limit(uniq))[0]
        if not len(bad):
            return []
        order = np.argsort(inverse, kind="stable")  # rows grouped by key, in insertion order
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        return [
            (int(uniq[k] // span), int(uniq[k] % span),
             [self._sends[i] for i in row[order[starts[k]:starts[k] + counts[k]]]])
            for k in bad
        ]

    def violations(self) -> list[Violation]:
        """Capacity and single-port violations, in link/node then slot order."""
        out: list[Violation] = []
        if not self._sends:
            return out
        inst = self.instance
        topo = inst.topology
        links = np.asarray(self._links, dtype=np.int64)
        occ = np.asarray(inst.occupancy, dtype=np.int64)[links]
        # one row per (send, slot of its occupancy window)
        row = np.repeat(np.arange(len(links)), occ)
        first = np.repeat(np.cumsum(occ) - occ, occ)
        slot = np.fromiter((s.slot for s in self._sends), dtype=np.int64, count=len(links))[row]
        slot = slot + (np.arange(len(row)) - first)
        span = int(slot.max()) + 1
        down = np.array(sorted(lk * span + t for lk, t in inst.outage_set if t < span), dtype=np.int64)

        per_link = np.asarray(inst.link_capacity, dtype=np.int64)

        def capacity(keys: np.ndarray) -> np.ndarray:
            return np.where(np.isin(keys, down), 0, per_link[keys // span])

        for link, t, sends in self._overloaded(links[row], slot, row, capacity):
            cap = inst.omega(link, t)
            src, dst = topo.links[link].key
            chunks = ", ".join(str(list(s.chunk)) for s in sends)
            out.append(
                Violation(
                    "capacity",
                    f"link {src}->{dst} at slot {t} carries {len(sends)} chunks ({chunks}) "
                    f"but its capacity omega is {cap}",
                    sends[-1].chunk,
                    (src, dst),
                    t,
                )
            )
        if not inst.single_port:
            return out

        def one(keys: np.ndarray) -> np.ndarray:
            return np.ones(len(keys), dtype=np.int64)

        ends = {
            "src": np.fromiter((s.src for s in self._sends), dtype=np.int64, count=len(links)),
            "dst": np.fromiter((s.dst for s in self._sends), dtype=np.int64, count=len(links)),
        }
        for kind, end, role in (
            ("single-port-send", "src", "sends"),
            ("single-port-receive", "dst", "receives"),
        ):
            for node, t, sends in self._overloaded(ends[end][row], slot, row, one):
                what = "; ".join(s.describe() for s in sends)
                out.append(
                    Violation(
                        kind,
                        f"node {node} {role} {len(sends)} chunks in slot {t} (single-port): {what}",
                        sends[-1].chunk,
                        (sends[-1].src, sends[-1].dst),
                        t,
                    )
                )
        return out


def verify(instance: Instance, schedule: Schedule) -> Report:
    """Check ``schedule`` against ``instance`` under the canonical slot semantics.

    Rules checked (numbers refer to the MILP of ``000_*.txt``):

    - every send uses an existing link and a chunk of the collective;
    - causality (5): the sender holds the chunk at the start of the send slot;
    - a node receives a chunk at most once and never one it already held (6 as an equality);
    - capacity (7) over the whole occupancy window ``t .. t+l-1`` against ``omega``;
    - single-port (instance option): one send and one receive per node per slot;
    - the postcondition (8);
    - under ``switch_model == "cut-through"``: a switch holds nothing, so it sends a chunk
      only in a slot in which that chunk arrives there (it may receive a chunk again in a
      later slot, never twice in one slot), and a hop from a switch into a GPU delivers at
      ``t + delta`` (``instance.latency``); see docs/model.md.

    Parameters
    ----------
    instance : Instance
    schedule : Schedule

    Returns
    -------
    Report
    """
    if instance.collective.combining:
        # Combining collectives track sets of contributions, not copies.
        from ccplan.schedule.combining import verify_combining

        return verify_combining(instance, schedule)
    topo = instance.topology
    coll = instance.collective
    holders = coll.holders
    latency = instance.latency
    violations: list[Violation] = []

    hold: dict[tuple[Chunk, int], int] = {}
    for chunk, nodes in holders.items():
        for v in nodes:
            hold[(chunk, v)] = 0

    occupied = Occupancy(instance)
    bufferless = instance.bufferless
    # Arrival slots at bufferless (cut-through) switches: they forward only in those slots.
    passing: dict[tuple[Chunk, int], set[int]] = {}

    # Sends are chronological; every arrival is at least one slot after its send, so all
    # arrivals that a send in slot t may rely on are registered before slot t is processed.
    # The exception is a cut-through hop (switch into GPU, L = delta may be 0): it may feed a
    # GPU's send in the same slot, so within a slot the switches' sends go first (a switch
    # itself is fed only by links of L >= 1, i.e. by earlier slots).
    sends_in_order = schedule.sends
    if bufferless:
        sends_in_order = tuple(sorted(schedule.sends, key=lambda s: (s.slot, s.src not in bufferless)))
    for send in sends_in_order:
        key = (send.src, send.dst)
        if send.reduce:
            # A reduce combines contributions; a data-movement collective has none to combine.
            violations.append(
                Violation(
                    "reduce-not-combining",
                    f"{send.describe()}: {coll.kind} is not a combining collective, a send "
                    "cannot reduce",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        if send.chunk not in holders:
            violations.append(
                Violation(
                    "unknown-chunk",
                    f"{send.describe()}: the collective has no such chunk",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        if key not in topo.link_index:
            violations.append(
                Violation(
                    "no-link",
                    f"{send.describe()}: the topology has no link {send.src}->{send.dst}",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        link = topo.link_index[key]
        if send.src in bufferless and send.src not in holders[send.chunk]:
            slots = passing.get((send.chunk, send.src), set())
            if send.slot not in slots:
                where = f"slots {sorted(slots)}" if slots else "no slot"
                violations.append(
                    Violation(
                        "causality",
                        f"{send.describe()}: cut-through switch {send.src} holds nothing and the "
                        f"chunk passes it in {where}, not in slot {send.slot}",
                        send.chunk,
                        key,
                        send.slot,
                    )
                )
                continue
            held_from: int | None = send.slot
        else:
            held_from = hold.get((send.chunk, send.src))
        if held_from is None or held_from > send.slot:
            when = "never holds it" if held_from is None else f"holds it only from slot {held_from}"
            violations.append(
                Violation(
                    "causality",
                    f"{send.describe()}: node {send.src} does not hold the chunk at the start "
                    f"of slot {send.slot} ({when})",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        arrive = send.slot + int(latency[link])
        if send.dst in bufferless and send.dst not in holders[send.chunk]:
            slots = passing.setdefault((send.chunk, send.dst), set())
            if arrive in slots:
                violations.append(
                    Violation(
                        "duplicate-receive",
                        f"{send.describe()}: cut-through switch {send.dst} already receives the "
                        f"chunk in slot {arrive}",
                        send.chunk,
                        key,
                        send.slot,
                    )
                )
            else:
                slots.add(arrive)
                hold[(send.chunk, send.dst)] = min(arrive, hold.get((send.chunk, send.dst), arrive))
            occupied.add(send, link)
            continue
        previous = hold.get((send.chunk, send.dst))
        if previous is not None:
            violations.append(
                Violation(
                    "duplicate-receive",
                    f"{send.describe()}: node {send.dst} already receives or holds the chunk "
                    f"(from slot {previous}); a node holds a chunk at most once",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
        else:
            hold[(send.chunk, send.dst)] = arrive
        occupied.add(send, link)

    violations.extend(occupied.violations())

    makespan = 0
    missing = False
    for chunk, node in coll.demands:
        at = hold.get((chunk, node))
        if at is None:
            missing = True
            violations.append(
                Violation(
                    "postcondition", f"chunk {list(chunk)} never reaches node {node}", chunk, None, None
                )
            )
        else:
            makespan = max(makespan, at)
    ms = None if missing else makespan
    return Report(
        ok=not violations,
        violations=tuple(violations),
        makespan_slots=ms,
        makespan_us=None if ms is None else instance.slots_to_us(ms),
        num_sends=len(schedule.sends),
        arrivals=hold,
    )
