"""The heuristic portfolio on combining collectives also tries NCCL's rings.

DGX-1 AllReduce of 4 MB with C = 12 chunks per GPU: NCCL's ring search finds 6 channels of
25 GB/s on a DGX-1 (docs/collectives.md §4a), so the rings carry ``2 (N-1)/N x M / (6 x 25 GB/s)``
= 1.75 x 4 MB / 150 GB/s = 46.67 us, the physical bound (each GPU sends and receives
2 (N-1)/N x M over 150 GB/s); the reversal of the AllGather trees pays a slot more. The
portfolio's answer must be at most the ring's own, and every schedule verifies.
"""

from __future__ import annotations

import pytest

from ccplan.contract import SolveOptions
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import dgx1, ring
from ccplan.pipeline.solve import solve


@pytest.mark.parametrize("chunks", [6, 12])
def test_heuristic_allreduce_is_never_slower_than_the_nccl_rings(chunks: int) -> None:
    topo = dgx1()
    inst = make_instance(topo, make_collective("allreduce", topo, chunks=chunks), "4MB")
    best = solve(inst, "heuristic", SolveOptions(time_limit=10))
    rings = solve(inst, "ring", SolveOptions(time_limit=10))
    assert best.verified and rings.verified
    assert best.makespan_slots <= rings.makespan_slots
    assert best.physical_bound_us == pytest.approx(46.67, abs=0.01)
    assert best.makespan_us >= best.physical_bound_us - 1e-9
    if best.makespan_slots == rings.makespan_slots and best.details.get("portfolio"):
        assert "NCCL-style ring" in best.details["portfolio"]


def test_the_ring_is_chosen_where_it_is_strictly_shorter() -> None:
    """C = 12 (a multiple of the 6 channels): the rings fill every NVLink in every slot
    after their fill, so they beat the reversal; the portfolio hands out the ring schedule
    and says so."""
    topo = dgx1()
    inst = make_instance(topo, make_collective("allreduce", topo, chunks=12), "4MB")
    best = solve(inst, "heuristic", SolveOptions(time_limit=10))
    rings = solve(inst, "ring", SolveOptions(time_limit=10))
    assert best.makespan_slots == rings.makespan_slots
    assert "NCCL-style ring" in best.details.get("portfolio", "")


def test_reducescatter_on_a_ring_keeps_the_shorter() -> None:
    """Ring of 4 (2 directed rings = NCCL's 2 channels): ReduceScatter by the portfolio is at
    most the rings' (N-1) C / 2 hops per channel, checked against the ring engine's own."""
    topo = ring(4)
    inst = make_instance(topo, make_collective("reducescatter", topo, chunks=4), "1MB")
    best = solve(inst, "heuristic", SolveOptions(time_limit=5))
    rings = solve(inst, "ring", SolveOptions(time_limit=5))
    assert best.verified and rings.verified
    assert best.makespan_slots <= rings.makespan_slots
