"""Schedule: the list of sends every engine produces, and its JSON file.

A schedule file is self-contained: it carries the instance (topology inline) and the sends::

    {"format": "ccplan-schedule/1", "method": "mteg", "instance": {...},
     "sends": [{"chunk": [0, 0], "src": 0, "dst": 1, "slot": 0}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.topology import check_keys, load_json

SCHEDULE_FORMAT = "ccplan-schedule/1"
_BLOCK = 1 << 16  # rows listed at a time by Schedule.from_columns


def _nonneg_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValidationError(f"{what} must be a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True, order=True)
class Send:
    """One transmission: ``chunk`` leaves ``src`` on link ``src -> dst`` in ``slot``.

    Ordering is by slot first, so ``sorted(sends)`` is chronological.
    """

    slot: int
    chunk: Chunk
    src: int
    dst: int
    reduce: bool = False
    """True when the receiver combines (reduces) the chunk into its own copy instead of
    storing it; only meaningful for combining collectives (ReduceScatter, AllReduce, Reduce)."""

    def __post_init__(self) -> None:
        _nonneg_int(self.slot, "send.slot")
        if not isinstance(self.reduce, bool):
            raise ValidationError(f"send.reduce must be true or false, got {self.reduce!r}")
        if (
            not isinstance(self.chunk, tuple)
            or len(self.chunk) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in self.chunk)
        ):
            raise ValidationError(f"send.chunk must be a pair of integers, got {self.chunk!r}")
        _nonneg_int(self.src, "send.src")
        _nonneg_int(self.dst, "send.dst")

    def to_dict(self) -> dict[str, Any]:
        """JSON form ``{"chunk": [s, i], "src": u, "dst": v, "slot": t}`` (+ ``"reduce": true``)."""
        out: dict[str, Any] = {"chunk": list(self.chunk), "src": self.src, "dst": self.dst, "slot": self.slot}
        if self.reduce:
            out["reduce"] = True
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "send") -> Send:
        """Parse the JSON form; names the offending field on error."""
        if not isinstance(data, Mapping):
            raise ValidationError(f"{where} must be an object")
        check_keys(data, {"chunk", "src", "dst", "slot", "reduce"}, {"chunk", "src", "dst", "slot"}, where)
        chunk = data["chunk"]
        if not isinstance(chunk, list) or len(chunk) != 2:
            raise ValidationError(f"{where}.chunk must be [source, index], got {chunk!r}")
        try:
            return cls(
                slot=data["slot"],
                chunk=(chunk[0], chunk[1]),
                src=data["src"],
                dst=data["dst"],
                reduce=data.get("reduce", False),
            )
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc}") from None

    def describe(self) -> str:
        """Human form used in verifier messages."""
        op = "reduce of chunk" if self.reduce else "chunk"
        return f"{op} {list(self.chunk)} on link {self.src}->{self.dst} at slot {self.slot}"


@dataclass(frozen=True)
class Schedule:
    """A frozen list of sends, kept sorted chronologically.

    Parameters
    ----------
    sends : tuple of Send
    method : str
        Name of the engine (or variant) that produced it; informational.
    """

    sends: tuple[Send, ...]
    method: str = ""
    info: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        sends = tuple(self.sends)
        # Check before sorting: comparing a non-Send with a Send raises TypeError.
        for s in sends:
            if not isinstance(s, Send):
                raise ValidationError(f"schedule.sends must hold Send objects, got {s!r}")
        object.__setattr__(self, "sends", tuple(sorted(sends)))

    @classmethod
    def of(cls, sends: Iterable[Send | tuple[Chunk, int, int, int]], method: str = "") -> Schedule:
        """Build from Sends or ``(chunk, src, dst, slot)`` tuples."""
        out = []
        for s in sends:
            if isinstance(s, Send):
                out.append(s)
            else:
                chunk, src, dst, slot = s
                out.append(Send(slot=slot, chunk=tuple(chunk), src=src, dst=dst))  # type: ignore[arg-type]
        return cls(tuple(out), method=method)

    @classmethod
    def from_columns(
        cls,
        *,
        slot: np.ndarray,
        chunk_source: np.ndarray,
        chunk_index: np.ndarray,
        src: np.ndarray,
        dst: np.ndarray,
        method: str = "",
    ) -> Schedule:
        """Bulk constructor for engines that keep their sends as numpy columns (no reduce).

        Equal to ``Schedule(tuple(Send(...) for each row), method=method)``, built for a
        million sends: the columns are checked once, vectorised (one-dimensional, of equal
        length, integers >= 0, the same rules as :class:`Send`), put in the order of
        :class:`Send` (slot, chunk, src, dst) by one ``lexsort`` instead of comparing Send
        objects, and the Sends are made without their per-object check; rows with the same
        chunk share one chunk tuple.

        Raises
        ------
        ValidationError
            A column that is not one-dimensional integers, of another length, or negative.
        """
        cols = {
            "slot": slot,
            "chunk_source": chunk_source,
            "chunk_index": chunk_index,
            "src": src,
            "dst": dst,
        }
        arrays = {name: np.asarray(col) for name, col in cols.items()}
        n = len(arrays["slot"])
        for name, col in arrays.items():
            if col.ndim != 1 or len(col) != n:
                raise ValidationError(f"schedule column {name!r} must be one-dimensional with {n} entries")
            if n and not np.issubdtype(col.dtype, np.integer):
                raise ValidationError(f"schedule column {name!r} must hold integers, got {col.dtype}")
            if n and int(col.min()) < 0:
                i = int(np.argmin(col))
                raise ValidationError(f"schedule column {name!r}[{i}] must be >= 0, got {int(col[i])}")
        order = np.lexsort(
            (arrays["dst"], arrays["src"], arrays["chunk_index"], arrays["chunk_source"], arrays["slot"])
        )
        # one int object per distinct value (an object-array lookup hands out shared
        # references), one tuple per chunk, and the columns listed a block at a time: memory
        # is the Send objects, not five lists of a million fresh ints
        top = {name: int(col.max()) + 1 if n else 0 for name, col in arrays.items()}
        shared = {name: np.array(range(top[name]), dtype=object) for name in arrays}
        chunk_of: dict[tuple[int, int], tuple[int, int]] = {}
        new = object.__new__
        put = object.__setattr__
        sends = []
        for lo in range(0, n, _BLOCK):
            rows = order[lo : lo + _BLOCK]
            lists = [shared[name][arrays[name][rows]].tolist() for name in cols]
            for t, a, b, u, v in zip(*lists, strict=True):
                chunk = chunk_of.get((a, b))
                if chunk is None:
                    chunk = chunk_of[(a, b)] = (a, b)
                # the frozen dataclass's own __init__ would check each value again
                send = new(Send)
                put(send, "slot", t)
                put(send, "chunk", chunk)
                put(send, "src", u)
                put(send, "dst", v)
                put(send, "reduce", False)
                sends.append(send)
        out = new(cls)
        put(out, "sends", tuple(sends))  # already sorted: __post_init__'s sort is skipped
        put(out, "method", method)
        put(out, "info", {})
        return out

    def __len__(self) -> int:
        return len(self.sends)

    @property
    def last_slot(self) -> int:
        """Largest send slot (-1 for an empty schedule)."""
        return max((s.slot for s in self.sends), default=-1)

    def to_dict(self, instance: Instance) -> dict[str, Any]:
        """Self-contained JSON form with the instance."""
        return {
            "format": SCHEDULE_FORMAT,
            "method": self.method,
            "instance": instance.to_dict(),
            "sends": [s.to_dict() for s in self.sends],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> tuple[Instance, Schedule]:
        """Parse a schedule file's content into ``(instance, schedule)``."""
        if not isinstance(data, Mapping):
            raise ValidationError("schedule: top level must be a JSON object")
        check_keys(
            data,
            {"format", "method", "instance", "sends", "makespan_slots"},
            {"instance", "sends"},
            "schedule",
        )
        fmt = data.get("format", SCHEDULE_FORMAT)
        if fmt != SCHEDULE_FORMAT:
            raise ValidationError(f"schedule.format must be {SCHEDULE_FORMAT!r}, got {fmt!r}")
        instance = Instance.from_dict(data["instance"])
        raw = data["sends"]
        if not isinstance(raw, list):
            raise ValidationError("schedule.sends must be a list")
        sends = tuple(Send.from_dict(s, f"sends[{i}]") for i, s in enumerate(raw))
        if not instance.collective.combining:
            for i, send in enumerate(sends):
                if send.reduce:
                    raise ValidationError(
                        f"sends[{i}].reduce is true but {instance.collective.kind} is not a combining "
                        "collective (reduce applies to reducescatter, allreduce and reduce)"
                    )
        method = data.get("method", "")
        if not isinstance(method, str):
            raise ValidationError(f"schedule.method must be a string, got {method!r}")
        return instance, cls(sends, method=method)


def save_schedule(path: str | Path, instance: Instance, schedule: Schedule) -> None:
    """Write a schedule file atomically (a temporary file renamed into place).

    A path ending in ``.npz`` gets the compact columnar file of :mod:`ccplan.schedule.columnar`
    (for big schedules); any other path the JSON file.
    """
    from ccplan.export.atomic import write_atomic
    from ccplan.schedule.columnar import is_columnar, save_columnar

    if is_columnar(path):
        save_columnar(path, instance, schedule)
        return

    text = json.dumps(schedule.to_dict(instance), indent=None, separators=(",", ":"))
    write_atomic(path, text + "\n")


def load_schedule(path: str | Path, *, check_budget: bool = True) -> tuple[Instance, Schedule]:
    """Read a schedule file written by :func:`save_schedule` (JSON, or columnar for ``.npz``).

    Parameters
    ----------
    path : str or Path
    check_budget : bool
        Refuse (:class:`~ccplan.errors.ResourceLimitError`) a schedule whose replay by the
        verifier, simulator or exporters would not fit the memory budget
        (:func:`ccplan.limits.estimate_schedule`).
    """
    from ccplan.schedule.columnar import is_columnar, load_columnar

    if is_columnar(path):
        instance, schedule = load_columnar(path)
    else:
        instance, schedule = Schedule.from_dict(load_json(path, "schedule"))
    if check_budget:
        from ccplan.limits import estimate_schedule

        estimate_schedule(instance, schedule, f"schedule file {str(path)!r}").check()
    return instance, schedule
