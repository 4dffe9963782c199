"""The flow-over-time bound after an engine stays within the solve's time limit."""

from __future__ import annotations

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
