"""Memory and size estimates of the instance layer, computed before anything large is built.

Topologies, collectives' pre/postcondition tables, imported machines, and the per-hop slot
counts an instance checks on construction; the budget itself (:mod:`ccplan.limits`) knows no
domain type. :func:`horizon_lower_bound` sizes the work of every engine from the receivers'
in-links before any engine runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ccplan.limits import (
    BYTES_PER_LINK,
    BYTES_PER_NODE,
    BYTES_PER_TABLE_ENTRY,
    Estimate,
)

if TYPE_CHECKING:
    from ccplan.instances.instance import Instance
    from ccplan.instances.topology import Topology

MAX_SLOTS_PER_HOP: int = 10**12
"""Largest per-link occupancy ``l`` or delay ``delta`` (in slots) an instance may have.

Beyond it the slotted numbers stop being meaningful integers (a 1e300 us alpha, a bandwidth
of 1e308 GB/s next to a normal link); the instance is rejected when it is built."""


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
    """The sends ``instance`` needs at least: a data-movement collective's (chunk, node)
    deliveries (wanted at the end and not held at slot 0); a combining one's
    :func:`_combining_sends`."""
    if instance.collective.combining:
        return _combining_sends(instance)
    return int(_deliveries_per_node(instance).sum())


def _combining_sends(instance: Instance) -> int:
    """The sends a combining collective needs at least: per chunk, every contributor but one
    sends its (partial) sum once (``|holders| - 1``), and the finished sum, which is at one
    node, reaches every other node that wants it (``|wanted| - 1``)."""
    coll = instance.collective
    wanted = coll.wanted
    return sum(
        max(len(holders) - 1, 0) + max(len(wanted.get(chunk, ())) - 1, 0)
        for chunk, holders in coll.holders.items()
    )


def _deliveries_per_node(instance: Instance) -> np.ndarray:
    """Per node id (an array up to the largest id): the chunks it must receive, counted from
    the pre- and postcondition tables without the collective's tuple of ``(chunk, node)``
    pairs (``Collective.demands``: 16.8 million tuples, 1.45 GB and 5 s at 4,096 GPUs).

    A combining collective's node holds only its own contribution of a chunk it wants, so it
    must still receive a partial sum of it unless it is the chunk's only contributor.
    """
    coll = instance.collective
    width = max(instance.topology.node_ids) + 1
    wanted = np.zeros(width, dtype=np.int64)
    held_wanted = np.zeros(width, dtype=np.int64)
    for chunk, nodes in coll.post:
        wanted += np.bincount(np.asarray(nodes, dtype=np.int64), minlength=width)
        holders = coll.holders[chunk]
        if coll.combining and len(holders) > 1:
            continue
        for h in holders:
            if h in nodes:
                held_wanted[h] += 1
    return wanted - held_wanted
