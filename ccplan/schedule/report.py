"""What the verifiers report: :class:`Violation`, :class:`Report`, and the capacity and
single-port rules over link and port occupancy (:class:`Occupancy`), shared by the replay
verifier, the column verifier and the combining rules (:mod:`ccplan.schedule.combining`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Send

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
    arrivals : Mapping
        ``(chunk, node) -> slot`` from which the node holds the chunk (0 for the precondition).
        A dict, or for a schedule accepted by the column verifier a read-only mapping over
        its arrays (:class:`ArrivalMap`), so 16.8 million deliveries are not 16.8 million
        dict entries.
    """

    ok: bool
    violations: tuple[Violation, ...]
    makespan_slots: int | None
    makespan_us: float | None
    num_sends: int
    arrivals: Mapping[tuple[Chunk, int], int] = field(repr=False, compare=False)

    @classmethod
    def accepted(
        cls, instance: Instance, makespan: int, num_sends: int, arrivals: Mapping[tuple[Chunk, int], int]
    ) -> Report:
        """The report of a schedule with no violation (a column verifier's verdict)."""
        return cls(
            ok=True,
            violations=(),
            makespan_slots=makespan,
            makespan_us=instance.slots_to_us(makespan),
            num_sends=num_sends,
            arrivals=arrivals,
        )

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


def _overloaded(
    owner: np.ndarray, slot: np.ndarray, limit: Callable[[np.ndarray], np.ndarray], with_rows: bool
) -> list[tuple[int, int, np.ndarray]]:
    """``(owner, slot, rows)`` of every (owner, slot) pair used by more than ``limit`` rows,
    in owner then slot order; ``rows`` lists the occupied-slot rows of the pair in insertion
    order (empty unless ``with_rows``)."""
    span = int(slot.max()) + 1
    keys = owner * span + slot
    if not with_rows:
        size = (int(owner.max()) + 1) * span
        if size <= 4 * len(keys) + 1024:
            # a count per (owner, slot) in one pass instead of a sort: the same pairs, in the
            # same order (AMD x2 AllReduce at C = 256, 562 k sends: 0.06 s instead of 0.16 s)
            counts = np.bincount(keys, minlength=size)
            uniq = np.flatnonzero(counts)
            counts = counts[uniq]
        else:
            uniq, counts = np.unique(keys, return_counts=True)
        return [
            (int(uniq[k] // span), int(uniq[k] % span), np.zeros(0, dtype=np.int64))
            for k in np.nonzero(counts > limit(uniq))[0]
        ]
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    bad = np.nonzero(counts > limit(uniq))[0]
    if not len(bad):
        return []
    order = np.argsort(inverse, kind="stable")  # rows grouped by key, in insertion order
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return [
        (int(uniq[k] // span), int(uniq[k] % span), order[starts[k] : starts[k] + counts[k]])
        for k in bad
    ]


def occupancy_overloads(
    instance: Instance,
    links: np.ndarray,
    slots: np.ndarray,
    srcs: np.ndarray,
    dsts: np.ndarray,
    *,
    with_sends: bool = True,
) -> list[tuple[str, int, int, np.ndarray]]:
    """Capacity (7) and single-port overloads of sends given as columns.

    Every send occupies its link (and, single-port, its two ends) in slots ``t .. t+l-1``;
    each (link, slot) is counted against ``omega`` (0 in an outage), each (node, slot) against
    1. Counting is one ``np.unique`` over integer keys per rule, so memory is a few integers
    per occupied slot.

    Parameters
    ----------
    instance : Instance
    links, slots, srcs, dsts : numpy.ndarray
        Per send: link index, start slot, sending and receiving node.
    with_sends : bool
        Also list, per overload, the sends behind it (their row numbers, in input order);
        the fast verifier only needs to know whether there is any.

    Returns
    -------
    list of (kind, owner, slot, rows)
        ``kind`` is ``"capacity"`` (owner: link index), ``"single-port-send"`` or
        ``"single-port-receive"`` (owner: node id), in that order, each by owner then slot.
    """
    out: list[tuple[str, int, int, np.ndarray]] = []
    if not len(links):
        return out
    per_link_occ = np.asarray(instance.occupancy, dtype=np.int64)
    links = np.asarray(links, dtype=np.int64)
    row: np.ndarray | None = None  # the send of each occupied slot (None: row i is send i)
    if bool(np.all(per_link_occ == 1)):
        # the common case: one occupied slot per send, no expansion
        slot = np.asarray(slots, dtype=np.int64)
    else:
        occ = per_link_occ[links]
        # one row per (send, slot of its occupancy window)
        row = np.repeat(np.arange(len(links)), occ)
        first = np.repeat(np.cumsum(occ) - occ, occ)
        slot = np.asarray(slots, dtype=np.int64)[row] + (np.arange(len(row)) - first)
    span = int(slot.max()) + 1
    down = np.array(sorted(lk * span + t for lk, t in instance.outage_set if t < span), dtype=np.int64)
    per_link = np.asarray(instance.link_capacity, dtype=np.int64)

    def capacity(keys: np.ndarray) -> np.ndarray:
        cap = per_link[keys // span]
        return np.where(np.isin(keys, down), 0, cap) if len(down) else cap

    def per_slot(column: np.ndarray) -> np.ndarray:
        return column if row is None else column[row]

    def sends_of(rows: np.ndarray) -> np.ndarray:
        return rows if row is None else row[rows]

    for link, t, rows in _overloaded(per_slot(links), slot, capacity, with_sends):
        out.append(("capacity", link, t, sends_of(rows)))
    if not instance.single_port:
        return out

    def one(keys: np.ndarray) -> np.ndarray:
        return np.ones(len(keys), dtype=np.int64)

    for kind, end in (("single-port-send", srcs), ("single-port-receive", dsts)):
        for node, t, rows in _overloaded(per_slot(np.asarray(end, dtype=np.int64)), slot, one, with_sends):
            out.append((kind, node, t, sends_of(rows)))
    return out


class Occupancy:
    """Link and port occupancy of accepted sends, and the capacity rules over it.

    Shared by both verifiers: capacity (7) over the occupancy window ``t .. t+l-1`` against
    ``omega``, and the single-port option. Sends are only recorded by :meth:`add`; the
    counting is done once, with numpy, in :meth:`violations` (:func:`occupancy_overloads`,
    which the column verifier calls directly).
    """

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self._sends: list[Send] = []
        self._links: list[int] = []

    def add(self, send: Send, link: int) -> None:
        """Record ``send`` on link index ``link`` for its ``l`` occupancy slots."""
        self._sends.append(send)
        self._links.append(link)

    def violations(self) -> list[Violation]:
        """Capacity and single-port violations, in link/node then slot order."""
        out: list[Violation] = []
        if not self._sends:
            return out
        inst = self.instance
        topo = inst.topology
        n = len(self._sends)
        overloads = occupancy_overloads(
            inst,
            np.asarray(self._links, dtype=np.int64),
            np.fromiter((s.slot for s in self._sends), dtype=np.int64, count=n),
            np.fromiter((s.src for s in self._sends), dtype=np.int64, count=n),
            np.fromiter((s.dst for s in self._sends), dtype=np.int64, count=n),
        )
        for kind, owner, t, rows in overloads:
            sends = [self._sends[i] for i in rows]
            if kind == "capacity":
                cap = inst.omega(owner, t)
                src, dst = topo.links[owner].key
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
                continue
            role = "sends" if kind == "single-port-send" else "receives"
            what = "; ".join(s.describe() for s in sends)
            out.append(
                Violation(
                    kind,
                    f"node {owner} {role} {len(sends)} chunks in slot {t} (single-port): {what}",
                    sends[-1].chunk,
                    (sends[-1].src, sends[-1].dst),
                    t,
                )
            )
        return out
