"""Schedule: the list of sends every engine produces, and its JSON file.

A schedule file is self-contained: it carries the instance (topology inline) and the sends::

    {"format": "ccplan-schedule/1", "method": "mteg", "instance": {...},
     "sends": [{"chunk": [0, 0], "src": 0, "dst": 1, "slot": 0}, ...]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.topology import check_keys
from ccplan.parsing import MAX_INDEX, int_value, show

SCHEDULE_FORMAT = "ccplan-schedule/1"
_BLOCK = 1 << 16  # rows listed at a time by Schedule.from_columns


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nonneg_int(value: object, what: str) -> int:
    # In memory any non-negative int is a Send (the verifier reports a node id far beyond the
    # topology as a missing link); files are held to MAX_INDEX by from_dict and the column check.
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        raise ValidationError(f"{what} must be a non-negative integer, got {show(value)}")
    return value  # type: ignore[return-value]


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
            or not all(_is_int(x) for x in self.chunk)
        ):
            raise ValidationError(f"send.chunk must be a pair of integers, got {show(self.chunk)}")
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
            raise ValidationError(f"{where}.chunk must be [source, index], got {show(chunk)}")
        if not all(_is_int(x) for x in chunk):
            raise ValidationError(f"{where}: send.chunk must be a pair of integers, got {show(chunk)}")
        try:
            # a file holds ids and slots to MAX_INDEX, as every reader of ids and slots
            return cls(
                slot=int_value(data["slot"], "send.slot"),
                chunk=(int_value(chunk[0], "send.chunk[0]", low=-MAX_INDEX),
                       int_value(chunk[1], "send.chunk[1]", low=-MAX_INDEX)),
                src=int_value(data["src"], "send.src"),
                dst=int_value(data["dst"], "send.dst"),
                reduce=data.get("reduce", False),
            )
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc}") from None

    def describe(self) -> str:
        """Human form used in verifier messages."""
        op = "reduce of chunk" if self.reduce else "chunk"
        return f"{op} {list(self.chunk)} on link {self.src}->{self.dst} at slot {self.slot}"


def _sends_of(columns: Mapping[str, np.ndarray]) -> tuple[Send, ...]:
    """The Send objects of sorted, checked columns (see :meth:`Schedule.from_columns`).

    One int object per distinct value (an object-array lookup hands out shared references;
    a column with values far beyond the row count lists fresh ints instead),
    one tuple per chunk, and the columns listed a block at a time: memory is the Send
    objects, not five lists of millions of fresh ints. The frozen dataclass's own
    ``__init__`` would check each value again, so the objects are filled directly.
    """
    n = len(columns["slot"])
    top = {name: int(columns[name].max()) + 1 if n else 0 for name in COLUMN_NAMES}
    # a shared table only for columns whose values are not far beyond the row count (a file
    # naming node 10**12 must not make a table of 10**12 ints); the others list fresh ints
    shared = {
        name: np.array(range(top[name]), dtype=object) for name in COLUMN_NAMES if top[name] <= 2 * n + 1024
    }
    flags = np.array([False, True], dtype=object)
    chunk_of: dict[tuple[int, int], tuple[int, int]] = {}
    new = object.__new__
    put = object.__setattr__
    sends = []
    for lo in range(0, n, _BLOCK):
        block = slice(lo, lo + _BLOCK)
        lists = [
            shared[name][columns[name][block]].tolist() if name in shared else columns[name][block].tolist()
            for name in COLUMN_NAMES
        ]
        reds = flags[columns["reduce"][block].astype(np.intp)].tolist()
        for t, a, b, u, v, r in zip(*lists, reds, strict=True):
            chunk = chunk_of.get((a, b))
            if chunk is None:
                chunk = chunk_of[(a, b)] = (a, b)
            send = new(Send)
            put(send, "slot", t)
            put(send, "chunk", chunk)
            put(send, "src", u)
            put(send, "dst", v)
            put(send, "reduce", r)
            sends.append(send)
    return tuple(sends)


COLUMN_NAMES: tuple[str, ...] = ("slot", "chunk_source", "chunk_index", "src", "dst")
"""The integer columns of a schedule, in the order of :class:`Send` (its ``reduce`` comes last)."""


def _sorted_order(cols: Mapping[str, np.ndarray], reduce: np.ndarray) -> np.ndarray | None:
    """Row order that sorts the columns like :class:`Send` objects (slot, chunk, src, dst,
    reduce), or None when they already are.

    One ``argsort`` of a packed key when the values fit 63 bits (a 64x64 torus AllGather
    needs 48), else one ``lexsort``; identical rows compare equal either way, so which of
    them comes first does not matter.
    """
    n = len(reduce)
    if n < 2:
        return None
    keys = [cols[name] for name in COLUMN_NAMES]
    widths = [int(col.max()).bit_length() for col in keys] + [1]
    if sum(widths) <= 63:
        packed = np.zeros(n, dtype=np.int64)
        for col, width in zip([*keys, reduce], widths, strict=True):
            packed <<= width
            packed |= col.astype(np.int64, copy=False)
        if bool(np.all(packed[1:] >= packed[:-1])):
            return None
        return np.argsort(packed)
    return np.lexsort((reduce, *reversed(keys)))


def _check_columns(cols: Mapping[str, Any], where: str) -> dict[str, np.ndarray]:
    """The columns as one-dimensional int64 arrays of equal length, values >= 0."""
    arrays = {name: np.asarray(col) for name, col in cols.items()}
    n = len(arrays["slot"])
    for name, col in arrays.items():
        if col.ndim != 1 or len(col) != n:
            raise ValidationError(f"{where} column {name!r} must be one-dimensional with {n} entries")
        if n and not np.issubdtype(col.dtype, np.integer):
            raise ValidationError(f"{where} column {name!r} must hold integers, got {col.dtype}")
        if n and int(col.min()) < 0:
            i = int(np.argmin(col))
            raise ValidationError(f"{where} column {name!r}[{i}] must be >= 0, got {int(col[i])}")
        if n and int(col.max()) > np.iinfo(np.int64).max:
            i = int(np.argmax(col))
            raise ValidationError(f"{where} column {name!r}[{i}] is too large, got {int(col[i])}")
    return {name: col.astype(np.int64, copy=False) for name, col in arrays.items()}


@dataclass(frozen=True)
class Schedule:
    """A frozen list of sends, kept sorted chronologically.

    A schedule made by :meth:`from_columns` keeps its sends as numpy columns
    (:meth:`columns`) and builds the :class:`Send` objects only when :attr:`sends` is first
    read (then they are kept): at 16.8 million sends the objects take about 2 GB and 40 s,
    the columns 0.7 GB and a sort of a few seconds. Length, :attr:`last_slot`, equality,
    hashing, pickling, the verifier and the columnar file use the columns.

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

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: ``sends`` of a schedule built from columns,
        # made on first use. ``__dict__`` is read directly because unpickling may ask for
        # attributes before the state (and its columns) is restored.
        columns = self.__dict__.get("_columns")
        if name != "sends" or columns is None:
            raise AttributeError(name)
        sends = _sends_of(columns)
        object.__setattr__(self, "sends", sends)
        return sends

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Schedule)
        if self.method != other.method:
            return False
        if "sends" in self.__dict__ and "sends" in other.__dict__:
            return self.sends == other.sends
        mine, theirs = self.columns(), other.columns()
        return all(np.array_equal(mine[name], theirs[name]) for name in mine)

    def __hash__(self) -> int:
        # consistent with __eq__ without building Send objects
        return hash((len(self), self.method, self.last_slot))

    def columns(self) -> Mapping[str, np.ndarray]:
        """The sends as columns in chronological (:class:`Send`) order.

        Returns
        -------
        Mapping of str to numpy.ndarray
            ``slot``, ``chunk_source``, ``chunk_index``, ``src``, ``dst`` (int64) and
            ``reduce`` (bool), one entry per send; read-only, computed once and kept.
        """
        columns = self.__dict__.get("_columns")
        if columns is None:
            sends = self.sends
            n = len(sends)
            columns = {
                name: np.fromiter(values, dtype=np.int64, count=n)
                for name, values in (
                    ("slot", (s.slot for s in sends)),
                    ("chunk_source", (s.chunk[0] for s in sends)),
                    ("chunk_index", (s.chunk[1] for s in sends)),
                    ("src", (s.src for s in sends)),
                    ("dst", (s.dst for s in sends)),
                )
            }
            columns["reduce"] = np.fromiter((s.reduce for s in sends), dtype=bool, count=n)
            for col in columns.values():
                col.flags.writeable = False
            object.__setattr__(self, "_columns", columns)
        return columns

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
        reduce: np.ndarray | None = None,
    ) -> Schedule:
        """Bulk constructor for engines (and files) that keep their sends as numpy columns.

        Equal to ``Schedule(tuple(Send(...) for each row), method=method)``, built for
        millions of sends: the columns are checked once, vectorised (one-dimensional, of
        equal length, integers >= 0, the same rules as :class:`Send`), put in the order of
        :class:`Send` (slot, chunk, src, dst, reduce) by one sort, and kept; the Send objects
        are made only if :attr:`sends` is read.

        Parameters
        ----------
        slot, chunk_source, chunk_index, src, dst : numpy.ndarray
            One entry per send.
        method : str
        reduce : numpy.ndarray of bool, optional
            Per send, whether it reduces (combining collectives); all False by default.

        Raises
        ------
        ValidationError
            A column that is not one-dimensional integers, of another length, or negative;
            a ``reduce`` column that is not booleans.
        """
        cols = _check_columns(
            {"slot": slot, "chunk_source": chunk_source, "chunk_index": chunk_index, "src": src, "dst": dst},
            "schedule",
        )
        n = len(cols["slot"])
        if reduce is None:
            red = np.zeros(n, dtype=bool)
        else:
            red = np.asarray(reduce)
            if red.ndim != 1 or len(red) != n:
                raise ValidationError(f"schedule column 'reduce' must be one-dimensional with {n} entries")
            if n and red.dtype != np.bool_:
                raise ValidationError(f"schedule column 'reduce' must hold booleans, got {red.dtype}")
            red = red.astype(bool, copy=False)
        order = _sorted_order(cols, red)
        cols["reduce"] = red
        # never keep (or freeze) the caller's own arrays: a copy or a reordered copy
        columns = {name: col.copy() if order is None else col[order] for name, col in cols.items()}
        for col in columns.values():
            col.flags.writeable = False
        out = object.__new__(cls)
        object.__setattr__(out, "method", method)
        object.__setattr__(out, "info", {})
        object.__setattr__(out, "_columns", columns)
        return out

    def __len__(self) -> int:
        columns = self.__dict__.get("_columns")
        return len(self.sends) if columns is None else len(columns["slot"])

    @property
    def last_slot(self) -> int:
        """Largest send slot (-1 for an empty schedule)."""
        columns = self.__dict__.get("_columns")
        if columns is not None:
            return int(columns["slot"][-1]) if len(columns["slot"]) else -1
        return max((s.slot for s in self.sends), default=-1)

    def last_arrival(self, instance: Instance) -> int:
        """Slot at which the last send lands, ``slot + L`` of its link (0 without sends): the
        makespan of a schedule its engine built valid, without a replay."""
        cols = self.columns()
        if not len(cols["slot"]):
            return 0
        links = instance.topology.links_between(cols["src"], cols["dst"])
        if int(links.min()) < 0:
            raise ValidationError(f"schedule {self.method!r}: a send on a pair of nodes without a link")
        lat = np.asarray(instance.latency, dtype=np.int64)
        return int((np.asarray(cols["slot"], dtype=np.int64) + lat[links]).max())

    def renamed(self, method: str) -> Schedule:
        """The same sends under another method name; a schedule built from columns stays so
        (the Send objects of a million sends take seconds to make)."""
        if "sends" in self.__dict__:
            return Schedule(self.sends, method=method)
        cols = self.columns()
        return Schedule.from_columns(
            slot=cols["slot"], chunk_source=cols["chunk_source"], chunk_index=cols["chunk_index"],
            src=cols["src"], dst=cols["dst"], reduce=cols["reduce"], method=method,
        )

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


