"""Memory estimate of a solve (the pipeline's share: deliveries, occupied link-slots and the
horizon's per-slot arrays), checked before any engine runs; the exact engine adds its model's.
"""

from __future__ import annotations

import numpy as np

from ccplan.instances.estimate import _deliveries_per_node, _horizon_from
from ccplan.instances.instance import Instance
from ccplan.limits import (
    BYTES_PER_DEMAND,
    BYTES_PER_DEMAND_OF,
    BYTES_PER_HORIZON_SLOT,
    BYTES_PER_LINK_SLOT,
    BYTES_PER_LINK_SLOT_OF,
    BYTES_PER_REDUCTION_DELIVERY,
    Estimate,
)


def estimate_solve(instance: Instance, method: str | None = None) -> Estimate:
    """Memory of solving ``instance`` with a heuristic (and of its bounds and verification).

    Deliveries (one send each at least; :data:`BYTES_PER_DEMAND`, or the method's own figure
    in :data:`BYTES_PER_DEMAND_OF`), the link-slots they occupy (each delivery into a GPU
    occupies at least its cheapest in-link for ``l`` slots) and the per-slot arrays of the
    horizon. The exact engine estimates its own model on top of this. The deliveries are
    counted per destination from the pre- and postcondition tables, without the collective's
    tuple of ``(chunk, node)`` pairs (16.8 million tuples, 1.5 GB, at 4,096 GPUs); a combining
    collective's from its contributors too (:func:`ccplan.instances.estimate.count_deliveries`).
    A ReduceScatter / Reduce that the trees reduction alone builds is charged
    :data:`BYTES_PER_REDUCTION_DELIVERY` per delivery (:func:`_reduction_only`).
    """
    topo = instance.topology
    occupancy = instance.occupancy
    per_delivery = BYTES_PER_DEMAND_OF.get(method or "", BYTES_PER_DEMAND)
    if _reduction_only(instance, method):
        per_delivery = min(per_delivery, BYTES_PER_REDUCTION_DELIVERY)
    per_link_slot = BYTES_PER_LINK_SLOT_OF.get(method or "", BYTES_PER_LINK_SLOT)
    width = max(topo.node_ids) + 1
    cheapest_in = np.ones(width, dtype=np.int64)
    for v in topo.node_ids:
        cheapest_in[v] = min((int(occupancy[j]) for j in topo.in_links[v]), default=1)
    per_node = _deliveries_per_node(instance)
    # a combining collective's sends outnumber the (chunk, node) pairs it must receive
    deliveries = max(int(per_node.sum()), instance.deliveries)
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


def _reduction_only(instance: Instance, method: str | None) -> bool:
    """Whether ``method`` builds ``instance`` by the trees reduction alone (the reversal's
    native reduction above ``NATIVE_ONLY_ABOVE`` chunks in all; ``ccplan.pipeline.combining``),
    whose deliveries live in arrays, not in the send and tree records of the other engines."""
    from ccplan.heuristics.trees_reduce import applies
    from ccplan.pipeline.combining import NATIVE_ONLY_ABOVE, NATIVE_REDUCTION

    coll = instance.collective
    if method not in NATIVE_REDUCTION or coll.kind not in ("reducescatter", "reduce"):
        return False
    return coll.chunks * len(instance.topology.gpus) > NATIVE_ONLY_ABOVE and applies(instance)
