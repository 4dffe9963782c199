"""The user path of a pipelined AllGather (``--method heuristic --chunks auto`` under a time
limit) reaches the tree packing: its order in the portfolio and the candidates' budgets."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from ccplan.contract import SolveOptions
from ccplan.heuristics.search import PROBE_GPUS, TREES_FIRST, heuristic_search
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import ring
from ccplan.schedule.verify import verify


def test_many_chunks_under_a_time_limit_run_the_tree_packing_first():
    """A ring of 4 GPUs with C = 64 chunks each has 256 = ``TREES_FIRST`` chunks. Under a time
    limit with a soft budget of 0 (the first complete schedule only, as ``--chunks auto`` runs
    its candidates) the portfolio builds the tree packing and nothing else: not the classic
    ring first (it only runs when nothing else gave a schedule), and no MTEGCCA variant after
    the first complete schedule. Before, the ring ran first and MTEGCCA's per-chunk trees
    were the first schedule, so the tree packing ran behind work that grows faster than
    linearly with the chunks."""
    topo = ring(4, alpha_us=0.5)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=64), "64MB")
    assert len(inst.collective.holders) == TREES_FIRST
    best, cands, facts = heuristic_search(inst, time_limit=60.0, budget=0.0)
    assert [c.label for c in cands] == ["trees"]
    assert best is not None and best.label == "trees"
    # kept as columns: no Send object per send (seconds per million sends)
    assert "sends" not in best.schedule.__dict__ and best.schedule.method == "heuristic"
    report = verify(inst, best.schedule)
    assert report.ok and report.makespan_slots == best.makespan
    assert best.makespan >= facts["lower_bound_slots"]  # type: ignore[operator]


def test_few_chunks_keep_the_portfolio_order():
    """Below ``TREES_FIRST`` chunks (4 GPUs, C = 2: 8 chunks) MTEGCCA's variants take well under
    a second and are the better ones at few chunks: with a budget, the ring safety net and the
    per-chunk MTEGCCA trees come first as before."""
    topo = ring(4, alpha_us=0.5)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "64MB")
    best, cands, _ = heuristic_search(inst, time_limit=60.0, budget=0.2)
    labels = [c.label for c in cands]
    assert labels[0] == "ring-1" and labels[1].startswith("mteg[")
    assert best is not None and verify(inst, best.schedule).ok


@pytest.mark.parametrize("chunks", [1, 2])
def test_a_probe_on_many_gpus_is_the_tree_packing_at_any_count(chunks):
    """A candidate of ``--chunks auto`` (``probe``) on ``PROBE_GPUS`` GPUs (a ring of 16) is
    the tree packing only, even with one chunk per GPU, where MTEGCCA's first variant can take
    most of a minute (leaf-spine of 64 GPUs, C = 1: 39 s, the packing 4 s). Not a probe: the
    portfolio's own order, the ring first; a probe on 4 GPUs: the portfolio too."""
    topo = ring(PROBE_GPUS, alpha_us=0.5)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=chunks), "64MB")
    best, cands, facts = heuristic_search(inst, time_limit=60.0, budget=1.0, probe=True)
    assert [c.label for c in cands] == ["trees"] and facts["auto_probe"] == "trees only"
    assert best is not None and verify(inst, best.schedule).ok
    _, cands, facts = heuristic_search(inst, time_limit=60.0, budget=0.0)
    assert cands[0].label == "ring-1" and "auto_probe" not in facts
    small = ring(4, alpha_us=0.5)
    inst = make_instance(small, make_collective("allgather", small, chunks=chunks), "64MB")
    _, cands, facts = heuristic_search(inst, time_limit=60.0, budget=0.0, probe=True)
    assert cands[0].label == "ring-1" and "auto_probe" not in facts


def test_auto_chunks_probes_a_portfolio_and_improves_the_chosen_count(monkeypatch):
    """``--chunks auto`` under a time limit runs each candidate of a portfolio as a probe
    (``extra["auto_probe"]``) and without the flow-over-time bound (stand-in engine: times
    1 -> 200, 2 -> 150, 4 -> 120, 8 -> 125, 16 -> 130 us, slot bounds 190, 140, 100, 100.5,
    100.8 us, physical bound 100 us: the doubling stops at C = 16, two doublings in a row
    without a gain while the slot bound is within 1 % of the physical one), then solves once
    more, with the options as given, the probed C whose slot bound is the lowest below the
    best time, C = 4 (the probes built the tree packing only, their details say so); that
    second run (110 us) is kept, being faster. Options the caller set are not overridden: a
    flow bound asked for stays."""
    import ccplan.pipeline.chunks as chunks

    times = {1: 200.0, 2: 150.0, 4: 120.0, 8: 125.0, 16: 130.0, 32: 135.0}
    bounds = {1: 190.0, 2: 140.0, 4: 100.0, 8: 100.5, 16: 100.8, 32: 100.9}  # slot bounds in us
    calls: list[tuple[int, dict]] = []

    @dataclass(frozen=True)
    class Fake:
        makespan_us: float
        makespan_slots: int = 2
        lower_bound_slots: int = 1
        verified: bool = True
        physical_bound_us: float = 100.0
        solve_seconds: float = 0.0
        details: dict = field(default_factory=dict)

    topo = ring(4, alpha_us=0.0)

    def build(c: int):
        return make_instance(topo, make_collective("allgather", topo, chunks=c), "1MB")

    def fake_solve(instance, method, options):
        c = instance.collective.chunks
        calls.append((c, dict(options.extra)))
        slots = math.ceil(bounds[c] / instance.tau_us)
        if "auto_probe" not in options.extra:
            return Fake(110.0, lower_bound_slots=slots)
        return Fake(times[c], lower_bound_slots=slots, details={"auto_probe": "trees only"})

    monkeypatch.setattr(chunks, "solve", fake_solve)
    inst, result = chunks.solve_auto_chunks(build, "heuristic", SolveOptions(time_limit=600))
    probes = [extra for c, extra in calls[:-1]]
    assert probes and all(e == {"auto_probe": True, "flow_bound": False} for e in probes)
    assert calls[-1] == (4, {})
    assert inst.collective.chunks == 4 and result.makespan_us == 110.0

    calls.clear()
    given = SolveOptions(time_limit=600, extra={"flow_bound": True})
    chunks.solve_auto_chunks(build, "heuristic", given)
    assert all(extra == {"auto_probe": True, "flow_bound": True} for _, extra in calls[:-1])
