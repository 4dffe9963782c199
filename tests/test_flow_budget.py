"""The flow-over-time bound after an engine stays within the solve's time limit."""

from __future__ import annotations

import pytest

import ccplan.bounds.flow_lp as flow_lp
from ccplan.contract import SolveOptions
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import ring
from ccplan.pipeline import solve


def test_flow_bound_gets_only_what_the_time_limit_leaves(monkeypatch):
    """Its own budget is the engine's time with a floor of 2 s (``flow_budget``); under a time
    limit it gets at most the limit less the engine's time, and nothing when under 0.5 s is
    left (a 20 s Broadcast once took 40 s: the bound's budget came on top of the limit)."""
    seen: list[float | None] = []
    real = flow_lp.gated_flow_bound

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs.get("time_limit"))
        return real(*args, **kwargs)

    monkeypatch.setattr(flow_lp, "gated_flow_bound", spy)
    topo = ring(4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "1MB")
    res = solve(inst, "mteg", SolveOptions(time_limit=1.0, workers=1))
    assert res.verified and len(seen) == 1
    assert seen[0] is not None and 0.5 <= seen[0] <= 1.0 - res.solve_seconds + 1e-9
    seen.clear()
    res = solve(inst, "mteg", SolveOptions(time_limit=0.3, workers=1))
    assert res.verified and seen == []
    res = solve(inst, "mteg", SolveOptions(workers=1))  # no limit: the bound's own budget
    assert res.verified and seen == [None]


def test_claim_says_when_the_slot_time_drops_alphas():
    """A 4-ring of 0.7 us alphas, AllGather 1 MB: at C = 1 a slot is 250 KB / 50 GB/s = 5 us,
    so alpha / tau = 0.14 > 0.1 keeps the alphas (one slot each); at 64 MB and C = 1 a slot is
    320 us and they are dropped. The claim says the slot time drops alphas exactly then (when it
    is above the physical bound; below it, it says the slot model is optimistic)."""
    topo = ring(4, alpha_us=0.7)
    kept = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    dropped = make_instance(topo, make_collective("allgather", topo, chunks=1), "64MB")
    assert not kept.drops_alphas and dropped.drops_alphas
    for inst in (kept, dropped):
        res = solve(inst, "ring", SolveOptions(time_limit=10, workers=1))
        assert res.verified and res.physical_gap is not None
        said = res.claim(inst)
        assert ("drops alphas" in said or "optimistic" in said) == inst.drops_alphas, said


def test_claim_below_the_bound_names_the_reason_the_instance_has():
    """A 6 x 6 torus AllGather of 64 MB at C = 4 by ``layered``: tau = 8.9 us, so the 0.7 us
    alphas are dropped (alpha / tau under 0.1) and the slot time falls below the physical bound
    (test_auto_chunks shows it). The claim calls the slot model optimistic and names the
    dropped alphas, and not the cut-through hop (the switches store and forward)."""
    from ccplan.instances.builtin import resolve_topology

    topo = resolve_topology("torus2d", rows=6, cols=6)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=4), "64MB")
    res = solve(inst, "layered", SolveOptions(time_limit=30, workers=1))
    assert res.verified and res.physical_gap is not None and res.physical_gap < 0
    said = res.claim(inst)
    assert "optimistic here (alphas below alpha_threshold are dropped from the slots)" in said, said
    assert "cut-through" not in said


def test_the_engine_gets_the_limit_less_the_work_after_it():
    """A 4-ring AllGather with C = 1,000: every GPU receives the 3 x 1,000 chunks of the
    others, 12,000 deliveries. Under a 10 s limit the engine gets 10 - 12,000 x 2e-6 = 9.976 s
    (the rest is kept for the verifier's replay and the bounds after it); under 0.04 s the
    share kept is capped at a quarter, 0.01 s, so the engine gets 0.03 s; without a limit,
    none."""
    from ccplan.pipeline.solve import _engine_options

    topo = ring(4, alpha_us=0.7)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1000), "1GB")
    assert _engine_options(inst, SolveOptions(time_limit=10.0)).time_limit == pytest.approx(9.976)
    assert _engine_options(inst, SolveOptions(time_limit=0.04)).time_limit == pytest.approx(0.03)
    assert _engine_options(inst, SolveOptions()).time_limit is None
