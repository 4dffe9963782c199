"""The solve estimate counts deliveries from the pre/postcondition tables.

Expected values are the formula of :func:`ccplan.pipeline.estimate.estimate_solve` evaluated over the
collective's own ``demands`` tuple (the enumeration the estimate no longer builds).
"""

from __future__ import annotations

import pytest

from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.estimate import horizon_lower_bound
from ccplan.limits import (
    BYTES_PER_DEMAND,
    BYTES_PER_DEMAND_OF,
    BYTES_PER_HORIZON_SLOT,
    BYTES_PER_LINK_SLOT,
    BYTES_PER_LINK_SLOT_OF,
)
from ccplan.pipeline.estimate import estimate_solve

KINDS = ("allgather", "broadcast", "alltoall", "gather", "scatter", "reducescatter", "allreduce")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["dgx1", "ndv2-2", "torus3"])
def test_estimate_matches_demand_enumeration(name: str, kind: str) -> None:
    topo = {"dgx1": bt.dgx1, "ndv2-2": lambda: bt.ndv2(2), "torus3": lambda: bt.torus2d(3, 3)}[name]()
    inst = make_instance(topo, make_collective(kind, topo, chunks=2), "64KB")
    occ = inst.occupancy
    cheapest = {v: min((int(occ[j]) for j in topo.in_links[v]), default=1) for v in topo.node_ids}
    demands = inst.collective.demands
    link_slots = sum(cheapest[v] for _c, v in demands)
    horizon = horizon_lower_bound(inst)
    for method in (None, "mteg", "layered"):
        per_d = BYTES_PER_DEMAND_OF.get(method or "", BYTES_PER_DEMAND)
        per_l = BYTES_PER_LINK_SLOT_OF.get(method or "", BYTES_PER_LINK_SLOT)
        want = len(demands) * per_d + link_slots * per_l + horizon * BYTES_PER_HORIZON_SLOT
        assert estimate_solve(inst, method).bytes == pytest.approx(want)
    if demands:  # combining collectives list no (chunk, node) deliveries: both are 0 there
        assert estimate_solve(inst, "layered").bytes < estimate_solve(inst).bytes
