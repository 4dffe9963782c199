"""The solve estimate counts deliveries from the pre/postcondition tables.

Expected values are the formula of :func:`ccplan.pipeline.estimate.estimate_solve` evaluated over the
collective's own ``demands`` tuple (the enumeration the estimate no longer builds), and for
combining collectives over its holders and wanted tables (which list no deliveries).
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
    coll = inst.collective
    if coll.combining:
        # every wanted (chunk, node) pair needs a receive (a node holds only its own share);
        # sends: per chunk |holders| - 1 partial sums and |wanted| - 1 copies of the result
        received = [(c, v) for c, nodes in coll.wanted.items() for v in nodes]
        sends = sum(len(h) - 1 + len(coll.wanted[c]) - 1 for c, h in coll.holders.items())
    else:
        received = list(coll.demands)
        sends = len(received)
    link_slots = sum(cheapest[v] for _c, v in received)
    horizon = horizon_lower_bound(inst)
    for method in (None, "mteg", "layered"):
        per_d = BYTES_PER_DEMAND_OF.get(method or "", BYTES_PER_DEMAND)
        per_l = BYTES_PER_LINK_SLOT_OF.get(method or "", BYTES_PER_LINK_SLOT)
        want = max(sends, len(received)) * per_d + link_slots * per_l + horizon * BYTES_PER_HORIZON_SLOT
        assert estimate_solve(inst, method).bytes == pytest.approx(want)
    assert sends > 0 and estimate_solve(inst, "layered").bytes < estimate_solve(inst).bytes
