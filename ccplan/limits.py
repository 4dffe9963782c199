"""Work estimates and budgets: refuse what would not fit before doing it.

Every entry point (``solve``, ``bounds``, ``verify``, ``simulate``, ``export``, ``sweep``)
estimates the memory its work needs from numbers that are cheap to compute (GPU count, chunk
count, demands, slots per hop, the sends of a schedule) and raises
:class:`~ccplan.errors.ResourceLimitError` when the estimate exceeds the memory budget. The
error names the value that drives the estimate and the limit, so the CLI can print one line
and exit with code 2 instead of growing until the machine swaps.

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
from typing import TYPE_CHECKING

import numpy as np

from ccplan.errors import ResourceLimitError, ValidationError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ccplan.instances.instance import Instance
    from ccplan.instances.topology import Topology
    from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BUDGET: int = 4 * 10**9
"""Bytes of working memory one command may plan for (4 GB) unless configured otherwise."""

BUDGET_ENV = "CCPLAN_MEMORY_BUDGET"
"""Environment variable that sets the budget, e.g. ``CCPLAN_MEMORY_BUDGET=8GB``."""

MAX_SLOTS_PER_HOP: int = 10**12
"""Largest per-link occupancy ``l`` or delay ``delta`` (in slots) an instance may have.

Beyond it the slotted numbers stop being meaningful integers (a 1e300 us alpha, a bandwidth
of 1e308 GB/s next to a normal link); the instance is rejected when it is built."""

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


def _entries_per_kind() -> dict[str, Callable[[int, int], int]]:
    # (GPUs N, chunks C) -> entries of the pre and post tables of each collective.
    return {
        "allgather": lambda n, c: n * c * (n + 1),
        "alltoall": lambda n, c: 3 * n * n * c,
        "broadcast": lambda n, c: c * (n + 1),
        "multicast": lambda n, c: c * (n + 1),
        "gather": lambda n, c: 3 * n * c,
        "scatter": lambda n, c: 3 * n * c,
        "reducescatter": lambda n, c: n * c * (n + 1),
        "allreduce": lambda n, c: 2 * n * n * c,
        "reduce": lambda n, c: c * (n + 1),
    }


TABLE_ENTRIES: dict[str, Callable[[int, int], int]] = _entries_per_kind()
"""Collective kind -> number of pre/postcondition entries for N GPUs and C chunks."""


def _worst_entries(n: int, c: int) -> int:
    return 3 * n * n * c


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
    from ccplan.instances.instance import parse_size

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


def estimate_topology(name: str, num_nodes: int, num_links: int) -> Estimate:
    """Memory of a topology's node and link objects and their index tables."""
    total = num_nodes * BYTES_PER_NODE + num_links * BYTES_PER_LINK
    return Estimate("topology", float(total), f"topology {name} with {num_nodes} nodes and {num_links} links")


BYTES_PER_IMPORTED_LINK = 1600
"""One link of a topology built by ``import-topology`` and written as JSON: 1.51 GB peak for
DGX-1 x 20,000 machines (1 million links, 180,000 nodes), rounded up."""

BYTES_PER_IMPORT_TEXT_BYTE = 10
"""Parsing a tool's output, per byte of the file (the text, its lines and the matrix rows):
a 40 MB ``rocm-smi`` matrix of 2,000 GPUs peaks at under 400 MB with the interpreter."""


def estimate_import_text(name: str, num_bytes: int) -> Estimate:
    """Memory of parsing an ``import-topology`` input of ``num_bytes`` (before reading it)."""
    return Estimate(
        "import-topology",
        float(num_bytes) * BYTES_PER_IMPORT_TEXT_BYTE,
        f"{name} of {num_bytes / 1e6:.3g} MB",
    )


def estimate_joined_machines(
    machine: Topology, copies: int, nics_per_node: int, flag: str = "--nodes"
) -> Estimate:
    """Memory of ``copies`` copies of ``machine`` joined by a network (``import-topology
    --nodes``), from counts known before any copy is made: per copy its nodes and links, at
    most one NIC node and two duplex NIC links per GPU and NIC, and the fabric switches."""
    gpus = len(machine.gpus)
    per_nodes = machine.num_nodes + nics_per_node
    per_links = machine.num_links + 4 * (gpus + nics_per_node)
    nodes = copies * per_nodes + nics_per_node
    links = copies * per_links
    return Estimate(
        "import-topology",
        float(nodes) * BYTES_PER_NODE + float(links) * BYTES_PER_IMPORTED_LINK,
        f"{flag} {copies} copies of {machine.name} ({nodes:.3g} nodes, {links:.3g} links)",
    )


def estimate_collective(kind: str, num_gpus: int, chunks: int) -> Estimate:
    """Memory of a collective's pre/postcondition tables, before they are built."""
    entries = TABLE_ENTRIES.get(kind, _worst_entries)(num_gpus, chunks)
    return Estimate(
        "collective",
        float(entries) * BYTES_PER_TABLE_ENTRY,
        f"{kind} with --chunks {chunks} on {num_gpus} GPUs ({entries:.3g} table entries)",
    )


def check_collective(kind: str, topology: Topology, chunks: object) -> None:
    """Refuse a collective whose tables would not fit the budget (called before building it)."""
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        return  # the collective's own validation names the bad value
    estimate_collective(kind, len(topology.gpus), chunks).check()


def slots_per_hop(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Per-link occupancy and delay as floats (no integer overflow), for validation."""
    tau = instance.tau_us
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        occupancy = np.maximum(1.0, np.ceil(instance.transfer_us / tau - 1e-9))
        ratio = instance.topology.alpha / tau
        delay = np.where(ratio <= instance.alpha_threshold, 0.0, np.ceil(ratio - 1e-9))
    return occupancy, delay


def horizon_lower_bound(instance: Instance) -> int:
    """A cheap lower bound on the makespan in slots, from each receiver's in-links.

    A GPU that must receive ``k`` chunks needs at least one hop over one of its in-links
    (at least the smallest ``L``) and, since in-link ``j`` admits ``omega / l_j`` chunks per
    slot, at least ``k / sum_j(omega / l_j)`` slots. Both bounds are valid for every engine
    (they are the latency and ingress bounds of :mod:`ccplan.bounds` restricted to one hop);
    here they size the work before any engine runs.
    """
    return _horizon_from(instance, _deliveries_per_node(instance))


def _horizon_from(instance: Instance, need: np.ndarray) -> int:
    """:func:`horizon_lower_bound` from the chunks each node must receive (``need``, by node id)."""
    topo = instance.topology
    latency = instance.latency
    occupancy = instance.occupancy
    best = 0
    for node in np.flatnonzero(need).tolist():
        k = int(need[node])
        links = topo.in_links[node]
        if not links:
            continue  # unreachable: the instance's own check reports it
        hop = int(min(latency[j] for j in links))
        rate = sum(int(instance.link_capacity[j]) / int(occupancy[j]) for j in links)
        best = max(best, hop, math.ceil(k / rate - 1e-9))
    return best


def count_deliveries(instance: Instance) -> int:
    """The (chunk, node) deliveries of ``instance``: wanted at the end and not held at slot 0."""
    return int(_deliveries_per_node(instance).sum())


def _deliveries_per_node(instance: Instance) -> np.ndarray:
    """Per node id (an array up to the largest id): the chunks it must receive, counted from
    the pre- and postcondition tables without the collective's tuple of ``(chunk, node)``
    pairs (``Collective.demands``: 16.8 million tuples, 1.45 GB and 5 s at 4,096 GPUs)."""
    coll = instance.collective
    width = max(instance.topology.node_ids) + 1
    wanted = np.zeros(width, dtype=np.int64)
    held_wanted = np.zeros(width, dtype=np.int64)
    for chunk, nodes in coll.post:
        wanted += np.bincount(np.asarray(nodes, dtype=np.int64), minlength=width)
        for h in coll.holders[chunk]:
            if h in nodes:
                held_wanted[h] += 1
    return wanted - held_wanted


def estimate_solve(instance: Instance, method: str | None = None) -> Estimate:
    """Memory of solving ``instance`` with a heuristic (and of its bounds and verification).

    Deliveries (one send each at least; :data:`BYTES_PER_DEMAND`, or the method's own figure
    in :data:`BYTES_PER_DEMAND_OF`), the link-slots they occupy (each delivery into a GPU
    occupies at least its cheapest in-link for ``l`` slots) and the per-slot arrays of the
    horizon. The exact engine estimates its own model on top of this. The deliveries are
    counted per destination from the pre- and postcondition tables, without the collective's
    tuple of ``(chunk, node)`` pairs (16.8 million tuples, 1.5 GB, at 4,096 GPUs).
    """
    topo = instance.topology
    occupancy = instance.occupancy
    per_delivery = BYTES_PER_DEMAND_OF.get(method or "", BYTES_PER_DEMAND)
    per_link_slot = BYTES_PER_LINK_SLOT_OF.get(method or "", BYTES_PER_LINK_SLOT)
    width = max(topo.node_ids) + 1
    cheapest_in = np.ones(width, dtype=np.int64)
    for v in topo.node_ids:
        cheapest_in[v] = min((int(occupancy[j]) for j in topo.in_links[v]), default=1)
    per_node = _deliveries_per_node(instance)
    deliveries = int(per_node.sum())
    link_slots = int((per_node * cheapest_in).sum())
    horizon = _horizon_from(instance, per_node)
    total = (
        deliveries * per_delivery
        + link_slots * per_link_slot
        + horizon * BYTES_PER_HORIZON_SLOT
    )
    parts = [(deliveries * per_delivery, f"{deliveries} deliveries")]
    worst = int(np.argmax(occupancy)) if len(occupancy) else 0
    slow = ""
    if len(occupancy) and int(occupancy[worst]) > 1:
        link = topo.links[worst]
        slow = (
            f" (link {link.src}->{link.dst} at {link.bandwidth_GBps:g} GB/s occupies "
            f"{int(occupancy[worst]):.3g} slots per chunk)"
        )
    parts.append((link_slots * per_link_slot, f"{link_slots:.3g} occupied link-slots{slow}"))
    slots = f"a makespan of at least {horizon:.3g} slots (tau={instance.tau_us:.3g} us)"
    parts.append((horizon * BYTES_PER_HORIZON_SLOT, slots))
    driver = max(parts)[1]
    return Estimate("solve", float(total), f"{instance.topology.name} {instance.collective.kind}: {driver}")


def estimate_columnar_load(sends: int, where: str) -> Estimate:
    """Memory of loading a columnar schedule file (and of the column verifier after it) that
    declares ``sends`` sends (:data:`BYTES_PER_SEND_COLUMNS` each), known from the arrays'
    headers before anything is decompressed."""
    return Estimate("load", float(sends) * BYTES_PER_SEND_COLUMNS, f"{where} declaring {sends} sends")


def estimate_verify(instance: Instance, schedule: Schedule, what: str = "verify") -> Estimate:
    """Memory of :func:`ccplan.schedule.verify` on ``schedule``: the column verifier's
    (:data:`BYTES_PER_SEND_COLUMNS`) for a schedule kept as columns that it can accept, else
    the replay's (:func:`estimate_schedule`). Should the column check find a violation, the
    replay that words it checks its own estimate first."""
    from ccplan.schedule.verify import column_check_applies

    if "_columns" not in schedule.__dict__ or not column_check_applies(instance, schedule):
        return estimate_schedule(instance, schedule, what)
    per_link_slot = BYTES_PER_LINK_SLOT_OF["layered"]
    return estimate_schedule(
        instance, schedule, what, per_send=BYTES_PER_SEND_COLUMNS, per_link_slot=per_link_slot
    )


def estimate_schedule(
    instance: Instance,
    schedule: Schedule,
    what: str = "verify",
    *,
    per_send: int = BYTES_PER_SEND,
    per_link_slot: int = BYTES_PER_LINK_SLOT,
) -> Estimate:
    """Memory of replaying ``schedule`` (verify, simulate, export): its sends and link-slots
    (:data:`BYTES_PER_SEND` and :data:`BYTES_PER_LINK_SLOT` each unless given).

    The verifier records every slot a send occupies its link (``l`` slots per send), so the
    sum of ``l`` over the sends is exact here, not estimated.
    """
    occupancy, _delay = slots_per_hop(instance)
    # from the columns, so a schedule kept as columns makes no Send objects here
    cols = schedule.columns()
    link = instance.topology.links_between(cols["src"], cols["dst"])
    # a send on no link counts one slot
    occ = np.append(np.asarray(occupancy, dtype=float), 1.0)
    link_slots = float(occ[link].sum())
    if instance.single_port:
        link_slots *= 3
    last = schedule.last_slot + 1
    total = len(schedule) * per_send + link_slots * per_link_slot
    total += last * BYTES_PER_HORIZON_SLOT
    driver = (
        f"{len(schedule)} sends occupying {link_slots:.3g} link-slots "
        f"(tau={instance.tau_us:.3g} us)"
    )
    if last * BYTES_PER_HORIZON_SLOT > link_slots * per_link_slot:
        driver = f"a schedule whose last send is at slot {last - 1}"
    return Estimate(what, float(total), driver)


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


def note_incumbent(instance: Instance, schedule: Schedule, source: str) -> None:
    """Record ``schedule`` as the best *verified* schedule of ``instance`` found so far.

    An engine whose search may sit in native code for long (``milp``: CP-SAT, HiGHS) calls
    this with every new verified incumbent, so that the CLI can still write it when Ctrl-C
    or SIGTERM arrives while the main thread cannot return in time (it then writes the
    schedule from its watcher thread; see ``ccplan.cli``).
    """
    _incumbent.clear()
    _incumbent.update(instance=instance, schedule=schedule, source=source)


def best_incumbent() -> tuple[Instance, Schedule, str] | None:
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
