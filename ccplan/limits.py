"""The budget and the clock: the ground every layer estimates its work against.

This module knows no domain type. Each layer estimates its own work from numbers that are
cheap to compute (:mod:`ccplan.instances.estimate`: topologies, collectives, imports, slots
per hop; :mod:`ccplan.schedule.estimate`: replaying and loading schedules;
:mod:`ccplan.pipeline.estimate`: a solve) and checks the :class:`Estimate` made here. Every
entry point (``solve``, ``bounds``, ``verify``, ``simulate``, ``export``, ``sweep``) does so
before its work and raises :class:`~ccplan.errors.ResourceLimitError` when the estimate
exceeds the memory budget. The error names the value that drives the estimate and the limit,
so the CLI can print one line and exit with code 2 instead of growing until the machine swaps.

The budget is :data:`DEFAULT_MEMORY_BUDGET` bytes unless the environment variable
``CCPLAN_MEMORY_BUDGET`` (e.g. ``8GB``) or :func:`set_memory_budget` (the CLI's global
``--memory-budget`` option) says otherwise.

The per-item costs below were measured on CPython 3.11 (peak resident memory of a solve
divided by the item count) and rounded up; they are estimates, not guarantees, and err on the
generous side so that the refusal only hits work that could not finish anyway.

:class:`Deadline` is the clock the heuristics check between stages (``--time-limit``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ccplan.errors import ResourceLimitError, ValidationError

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BUDGET: int = 4 * 10**9
"""Bytes of working memory one command may plan for (4 GB) unless configured otherwise."""

BUDGET_ENV = "CCPLAN_MEMORY_BUDGET"
"""Environment variable that sets the budget, e.g. ``CCPLAN_MEMORY_BUDGET=8GB``."""


# Bytes per item, measured and rounded up (see the module docstring).
BYTES_PER_TABLE_ENTRY = 120
"""One (chunk, node) membership in a collective's pre/postcondition tables (~92 measured)."""
BYTES_PER_DEMAND = 2000
"""One (chunk, destination) delivery while solving: its send, tree and verifier records
(~1400 measured for MTEG plus verification on DGX-1, C=200)."""
BYTES_PER_DEMAND_OF = {"layered": 300}
"""Methods that keep their deliveries in arrays: ``layered`` (dense holdings, candidate bits,
send columns; the schedule kept as columns into the column verifier and the bound): 64x64
torus AllGather, 16.8 million deliveries, 1.6 GB resident before the schedule is made,
3.7 GB peak for the whole ``ccplan solve`` while the estimate built the collective's demand
tuples, 2.5 GB since (docs/scale.md); kept at the larger figure, rounded up."""
BYTES_PER_REDUCTION_DELIVERY = 1000
"""One delivery of a ReduceScatter / Reduce built by the trees reduction alone (the pipeline's
native reduction through switches that cannot reduce, above its chunk threshold): sends kept
in arrays, checked by the fast combining verifier. Measured on AMD x2 1 GB, ``heuristic``, the
process's peak resident memory above its warmed-up base per delivery: 652 B at C = 256 (254 k
deliveries), 669 B at C = 1,024 (1.0 M); rounded up by half."""
BYTES_PER_LINK_SLOT = 200
"""One occupied (link, slot) record in the reservation tables and the verifier."""
BYTES_PER_LINK_SLOT_OF = {"layered": 40}
"""``layered``'s link-slots are rows of the column verifier's occupancy arrays (a few int64
per occupied slot), not records in reservation tables."""
BYTES_PER_HORIZON_SLOT = 64
"""One slot of the horizon in per-slot arrays (plots, progress, layered construction)."""
BYTES_PER_NODE = 400
"""One node: its object and its entries in the per-node index tables."""
BYTES_PER_LINK = 400
"""One directed link: its object, the duplex tuple it came from, the index tables."""
BYTES_PER_SEND = 600
"""One send of a loaded schedule (object, JSON form, verifier state)."""
BYTES_PER_SEND_COLUMNS = 120
"""One send of a schedule kept as columns (a ``.npz`` file) checked by the column verifier,
with :data:`BYTES_PER_LINK_SLOT_OF` ``["layered"]`` per occupied link-slot on top: loading
the 64x64 torus AllGather file (16.8 million sends) and verifying it peaks at 2.04 GB,
122 bytes per send in all."""


# --------------------------------------------------------------------------- the budget
def _budget_from_env() -> int:
    raw = os.environ.get(BUDGET_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MEMORY_BUDGET
    return parse_budget(raw, BUDGET_ENV)


def parse_budget(text: str, what: str = "memory budget") -> int:
    """Parse a budget such as ``"8GB"`` or ``"500MB"`` into bytes.

    Raises
    ------
    ValidationError
        Text that is not a size, or a size under 1 MB.
    """
    from ccplan.parsing import parse_size

    try:
        value = parse_size(text)
    except ValidationError as exc:
        raise ValidationError(f"{what}: {exc}") from None
    if value < 10**6:
        raise ValidationError(f"{what} must be at least 1MB, got {text!r}")
    return int(value)


_budget: int | None = None


def memory_budget() -> int:
    """The memory budget in bytes now in force."""
    return _budget if _budget is not None else _budget_from_env()


def set_memory_budget(value: int | str | None) -> None:
    """Set the budget (bytes or text like ``"8GB"``); None returns to the default/env value."""
    global _budget
    if value is None:
        _budget = None
    elif isinstance(value, str):
        _budget = parse_budget(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        # 1.5e9 is a number of bytes like 1500000000: a float is fine if it is finite
        if not (math.isfinite(value) and value >= 10**6):
            raise ValidationError(
                f"memory budget must be at least 1MB (a finite number of bytes), got {value!r}"
            )
        _budget = int(value)
    else:
        raise ValidationError(
            f"memory budget must be a number of bytes or text like '8GB', got {type(value).__name__}"
        )


@contextmanager
def budget(value: int | str) -> Iterator[None]:
    """Context manager: run a block under another memory budget."""
    global _budget
    old = _budget
    set_memory_budget(value)
    try:
        yield
    finally:
        _budget = old


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.3g} GB"


# --------------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class Estimate:
    """Estimated memory of a piece of work and the quantity that drives it.

    Parameters
    ----------
    what : str
        The work, e.g. ``"solve"`` or ``"verify"``.
    bytes : float
        Estimated peak memory in bytes.
    driver : str
        The user-facing value behind most of the estimate (e.g. ``"--chunks 1000000000 on
        8 GPUs: 8e+09 chunks"``) so the refusal says what to change.
    """

    what: str
    bytes: float
    driver: str

    def check(self, limit: int | None = None) -> Estimate:
        """Raise :class:`ResourceLimitError` when ``bytes`` exceeds the budget; return self."""
        cap = memory_budget() if limit is None else limit
        if not self.bytes <= cap:
            raise ResourceLimitError(
                f"{self.what} refused: {self.driver} needs about {_gb(self.bytes)}, over the "
                f"memory budget of {_gb(cap)} (raise it with --memory-budget or {BUDGET_ENV})"
            )
        return self


# --------------------------------------------------------------------------- the clock
class OutOfTimeError(Exception):
    """Raised inside a heuristic stage when its :class:`Deadline` has passed.

    Internal: the stage's caller catches it and keeps the best schedule it already has.
    """


@dataclass(frozen=True)
class Deadline:
    """A point on the ``time.perf_counter()`` clock; ``None`` seconds means never.

    Parameters
    ----------
    at : float
        ``perf_counter()`` value at which the time is up (``inf`` for no limit).
    """

    at: float = math.inf

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """The deadline ``seconds`` from now (never when None)."""
        return cls(math.inf if seconds is None else time.perf_counter() + float(seconds))

    @property
    def expired(self) -> bool:
        """Whether the time is up."""
        return time.perf_counter() >= self.at

    def check(self) -> None:
        """Raise :class:`OutOfTimeError` when the time is up."""
        if time.perf_counter() >= self.at:
            raise OutOfTimeError

    def remaining(self) -> float:
        """Seconds left (``inf`` without a limit, never negative)."""
        return max(0.0, self.at - time.perf_counter())


NEVER = Deadline()
"""The deadline that never passes (no ``--time-limit``)."""


# --------------------------------------------------------------------------- stopping on Ctrl-C
_stop_callbacks: list[Callable[[], None]] = []

_incumbent: dict[str, object] = {}


def note_incumbent(instance: object, schedule: object, source: str) -> None:
    """Record ``schedule`` as the best *verified* schedule of ``instance`` found so far.

    An engine whose search may sit in native code for long (``milp``: CP-SAT, HiGHS) calls
    this with every new verified incumbent, so that the CLI can still write it when Ctrl-C
    or SIGTERM arrives while the main thread cannot return in time (it then writes the
    schedule from its watcher thread; see ``ccplan.cli``).
    """
    _incumbent.clear()
    _incumbent.update(instance=instance, schedule=schedule, source=source)


def best_incumbent() -> tuple[Any, Any, str] | None:
    """The last schedule given to :func:`note_incumbent`: ``(instance, schedule, source)``."""
    found = dict(_incumbent)  # one copy: the engine may note a new one meanwhile
    if not found:
        return None
    return found["instance"], found["schedule"], str(found["source"])  # type: ignore[return-value]


def clear_incumbent() -> None:
    """Forget the noted incumbent (a command starts afresh)."""
    _incumbent.clear()


def on_stop(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to run when the user asks to stop (Ctrl-C, SIGTERM).

    For an engine whose search runs in native code, where Python's own Ctrl-C handling waits
    for the call to return: e.g. ``remove = on_stop(solver.StopSearch)`` before the solve and
    ``remove()`` after it. The CLI calls the callbacks from a helper thread as soon as the
    signal arrives; the engine then returns its best schedule with ``details["interrupted"]``.

    Returns
    -------
    callable
        Removes the callback again.
    """
    _stop_callbacks.append(callback)

    def remove() -> None:
        if callback in _stop_callbacks:
            _stop_callbacks.remove(callback)

    return remove


def request_stop() -> int:
    """Run every registered stop callback (errors are logged, not raised); return how many ran."""
    ran = 0
    for callback in list(_stop_callbacks):
        try:
            callback()
            ran += 1
        except Exception:  # a failing callback must not hide the others
            log.exception("stop callback %r failed", callback)
    return ran
