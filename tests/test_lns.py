"""Large neighbourhood search with the exact model (``ccplan.model.lns``).

Expected values are derived by hand in the docstrings or come from a solve of the whole
model (CP-SAT on the full MILP, an independent run of the same equations without any
fixing); every schedule goes through ``ccplan.schedule.verify``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import SolveInterrupted, ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.builtin import dgx1
from ccplan.model import exact
from ccplan.model import run as run_module
from ccplan.model.exact import greedy_schedule, solve_model_with, strategies
from ccplan.model.lns import Neighbourhood, build_neighbourhood_model, restrict, score
from ccplan.model.milp import build_model, schedule_from_model
from ccplan.model.size import estimate_size
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify


def _solve_round(inst: Instance, schedule: Schedule, chunks: tuple[Any, ...], from_slot: int = 0) -> Schedule:
    """One LNS round by hand: restrict, build, CP-SAT, merge."""
    restriction = restrict(inst, schedule, chunks)
    m = verify(inst, schedule).makespan_slots
    assert m is not None
    model, hint = build_neighbourhood_model(restriction, m, from_slot=from_slot)
    res = solve_model_with("cpsat", model, time_limit=30, hint=hint)
    assert res.status == "optimal"
    new = schedule_from_model(model, restriction.instance).sends
    return Schedule.of(restriction.fixed + tuple(new))


def _line(capacity: int = 1, single_port: bool = False, chunks: int = 3) -> Instance:
    topo = make_topology("line2", gpus=[0, 1], directed_links=[(0, 1, 50.0, 0.0)])
    coll = make_collective("broadcast", topo, chunks=chunks, root=0)
    return make_instance(topo, coll, "3MB", capacity=capacity, single_port=single_port)


def test_fixed_chunks_leave_only_the_residual_capacity() -> None:
    """Broadcast of 3 chunks over one link 0->1 with capacity 2 (l = L = 1, alpha 0).

    Hand derivation: the incumbent sends chunk k in slot k (makespan 3). Freeing chunks 1
    and 2 keeps chunk 0 in slot 0, which leaves capacity 1 there; the best the free pair can
    do is one chunk in slot 0 and one in slot 1, so the merged makespan is 2 (also the
    optimum: 3 chunks over a link of capacity 2 need 2 slots). Without the residual row
    both would go in slot 0 and overload the link (3 > 2)."""
    inst = _line(capacity=2)
    incumbent = Schedule.of([Send(k, (0, k), 0, 1) for k in range(3)])
    assert verify(inst, incumbent).makespan_slots == 3
    restriction = restrict(inst, incumbent, ((0, 1), (0, 2)))
    assert restriction.residual == {(0, 0): 1}
    assert restriction.fixed_makespan == 1
    merged = _solve_round(inst, incumbent, ((0, 1), (0, 2)))
    report = verify(inst, merged)
    assert report.ok and report.makespan_slots == 2


def test_fixed_sends_fill_a_link_as_an_outage() -> None:
    """Capacity 1: a slot the fixed chunk fills is an outage of the sub-instance.

    Incumbent: chunk 0 in slot 1, chunk 1 in slot 2 (makespan 3). Freeing chunk 1 with
    chunk 0 fixed in slot 1: chunk 1 can take slot 0 (free) -> merged makespan 2 = the
    optimum (2 chunks, one per slot)."""
    inst = _line(capacity=1, chunks=2)
    incumbent = Schedule.of([Send(1, (0, 0), 0, 1), Send(2, (0, 1), 0, 1)])
    restriction = restrict(inst, incumbent, ((0, 1),))
    assert (0, 1, 1) in restriction.instance.outages
    merged = _solve_round(inst, incumbent, ((0, 1),))
    assert verify(inst, merged).makespan_slots == 2


def test_fixed_sends_close_their_ports_under_single_port() -> None:
    """Node 0 feeds 1 and 2 on separate links (0->1, 0->2), broadcast of 2 chunks,
    single-port: node 0 sends one chunk per slot, 4 sends in all, so makespan >= 4.

    The incumbent sends chunk a to 1 and 2 in slots 0 and 1 and chunk b in slots 3 and 4
    (makespan 5). Freeing b with a fixed: 0's port is busy in slots 0 and 1, so b's best is
    slots 2 and 3 (makespan 4). A sub-model that ignored the fixed ports would send b on
    0->2 in slot 0 beside a on 0->1, which the verifier rejects."""
    topo = make_topology("fork", gpus=[0, 1, 2], directed_links=[(0, 1, 50.0, 0.0), (0, 2, 50.0, 0.0)])
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "2MB", single_port=True)
    a, b = (0, 0), (0, 1)
    incumbent = Schedule.of([Send(0, a, 0, 1), Send(1, a, 0, 2), Send(3, b, 0, 1), Send(4, b, 0, 2)])
    assert verify(inst, incumbent).makespan_slots == 5
    restriction = restrict(inst, incumbent, (b,))
    assert {(0, 0), (0, 1)} <= restriction.busy_send
    merged = _solve_round(inst, incumbent, (b,))
    report = verify(inst, merged)
    assert report.ok and report.makespan_slots == 4


def test_every_chunk_free_gives_the_whole_model_optimum() -> None:
    """With all chunks free nothing is fixed: the neighbourhood model is the whole model
    (plus the tie-break), so its optimum equals min D of the full MILP solved on its own."""
    d1 = dgx1()
    inst = make_instance(d1, make_collective("allgather", d1, chunks=1), "1GB")
    warm = greedy_schedule(inst)
    m = verify(inst, warm).makespan_slots
    assert m is not None
    whole = solve_model_with("cpsat", build_model(inst, m), time_limit=60)
    assert whole.status == "optimal" and whole.objective is not None
    merged = _solve_round(inst, warm, inst.collective.chunk_ids)
    assert verify(inst, merged).makespan_slots == round(whole.objective)


def test_window_keeps_the_early_sends() -> None:
    """``from_slot``: every send of a free chunk before that slot is kept as it was."""
    d1 = dgx1()
    inst = make_instance(d1, make_collective("allgather", d1, chunks=2), "1GB")
    warm = greedy_schedule(inst)
    chunks = inst.collective.chunk_ids[:4]
    cut = 2
    merged = _solve_round(inst, warm, chunks, from_slot=cut)
    assert verify(inst, merged).ok
    early = {s for s in warm.sends if s.chunk in chunks and s.slot < cut}
    assert early <= set(merged.sends)
    assert score(inst, merged) <= score(inst, warm)


def test_neighbourhood_is_validated() -> None:
    with pytest.raises(ValidationError, match="at least one chunk"):
        Neighbourhood("late", ())
    with pytest.raises(ValidationError, match="from_slot"):
        Neighbourhood("late", ((0, 0),), from_slot=-1)
    inst = _line()
    with pytest.raises(ValidationError, match="not in the collective"):
        restrict(inst, Schedule.of([]), ((5, 0),))


def _dgx1_c2(chunks: int = 2) -> tuple[Instance, Schedule, int]:
    d1 = dgx1()
    inst = make_instance(d1, make_collective("allgather", d1, chunks=chunks), "1GB")
    warm = greedy_schedule(inst)
    m = verify(inst, warm).makespan_slots
    assert m is not None
    return inst, warm, m


def test_lns_strategy_improves_the_greedy_schedule(tmp_path: Path) -> None:
    """``strategy="lns"`` from the greedy schedule with neighbourhoods of about two chunks:
    every accepted schedule is verified (the pipeline verifies the result), the makespan
    never goes below the whole model's optimum (CP-SAT on the full MILP) nor the bound, and
    the progress CSV shows the trajectory."""
    inst, warm, m = _dgx1_c2(chunks=1)
    whole = solve_model_with("cpsat", build_model(inst, m), time_limit=60)
    assert whole.status == "optimal" and whole.objective is not None
    optimum = round(whole.objective)
    assert m > optimum  # the greedy schedule leaves something to improve
    per_chunk = estimate_size(inst, m).nonzeros / len(inst.collective.chunk_ids)
    csv_path = tmp_path / "progress.csv"
    res = solve(inst, "milp", SolveOptions(progress_path=csv_path, extra={
        "strategy": "lns", "warm_start_schedule": warm, "lns_nonzeros": 2 * per_chunk, "lns_rounds": 12,
        # chunk neighbourhoods only (the default rotation starts with a slot window: every chunk)
        "lns_neighbourhoods": ["late", "links", "window", "random"],
    }))
    assert res.verified
    assert res.makespan_slots is not None and optimum <= res.makespan_slots < m
    assert res.makespan_slots >= lower_bound_slots(inst)
    lns = res.details["lns"]
    assert lns["improvements"] >= 1 and lns["start_makespan"] == m
    assert res.details["steps"][0]["chunks"] <= 3  # the size grows only after quick rounds
    rows = csv_path.read_text().splitlines()
    objectives = [float(r.split(",")[1]) for r in rows[1:] if r.split(",")[1]]
    assert objectives[0] == m and objectives[-1] == res.makespan_slots
    assert objectives == sorted(objectives, reverse=True)


def test_refused_model_falls_back_to_lns() -> None:
    """A memory budget below the whole model's estimate but above a few chunks' models:
    the whole model is refused, LNS runs on models under the budget and improves the
    incumbent (lexicographically: makespan, late demands, sum of arrivals); verified, and
    never below the bound."""
    inst, warm, m = _dgx1_c2()
    full = estimate_size(inst, m)
    budget = full.bytes // 3
    res = solve(inst, "milp", SolveOptions(time_limit=60, extra={
        "warm_start_schedule": warm, "memory_budget": budget, "lns_rounds": 4, "lns_slice": 5,
    }))
    assert res.verified and "memory budget" in res.details["fallback"]
    assert res.details["lns"]["rounds"] >= 1
    assert res.makespan_slots is not None and res.lower_bound_slots <= res.makespan_slots <= m
    assert res.schedule is not None and score(inst, res.schedule) < score(inst, warm)
    for st in res.details["steps"]:
        if st.get("question") == "lns slots":
            assert st["from_slot"] > 0  # every chunk free, but only in the last slots
        elif st.get("question", "").startswith("lns"):
            assert st["chunks"] < len(inst.collective.chunk_ids)


def test_auto_hands_a_stalled_ascending_search_to_lns(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` on a "large" model (threshold lowered to 0) gives the ascending questions a
    share of the time; with a share too short to build a question's model the search
    stalls at once and LNS gets the rest."""
    inst, warm, m = _dgx1_c2()
    monkeypatch.setattr(strategies, "AUTO_DIRECT_NONZEROS", 0)
    monkeypatch.setattr(strategies, "AUTO_ASCENDING_SHARE", 1e-4)
    res = solve(inst, "milp", SolveOptions(time_limit=40, extra={
        "warm_start_schedule": warm, "lns_rounds": 2, "lns_slice": 3,
    }))
    assert res.verified
    assert res.details["strategy"] == "auto:ascending+lns"
    assert res.details["lns"]["rounds"] >= 1
    assert res.makespan_slots is not None and res.lower_bound_slots <= res.makespan_slots <= m


def test_ctrl_c_in_an_lns_round_returns_the_verified_incumbent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend reports an interrupted search (as CP-SAT does on SIGINT): LNS keeps what
    the round found, stops, and ``solve`` raises SolveInterrupted carrying a verified result."""
    inst, warm, m = _dgx1_c2()
    # LNS calls the backend through ccplan.model.run (imported when it runs), not through
    # the engine's modules: patch it there
    real = run_module.solve_model_with

    def interrupted(*args: Any, **kwargs: Any) -> exact.BackendResult:
        out = real(*args, **kwargs)
        return dataclasses.replace(out, details={**out.details, "interrupted": True})

    monkeypatch.setattr(run_module, "solve_model_with", interrupted)
    with pytest.raises(SolveInterrupted) as info:
        solve(inst, "milp", SolveOptions(time_limit=30, extra={"strategy": "lns", "lns_slice": 3,
                                                               "warm_start_schedule": warm}))
    result = info.value.result
    assert result is not None and result.verified
    assert result.details["interrupted"] is True
    assert result.makespan_slots is not None and result.makespan_slots <= m
    assert result.details["lns"]["rounds"] == 1


@pytest.mark.parametrize("first_share", [1e-3, 0.99])
def test_auto_hands_a_long_question_to_lns(monkeypatch: pytest.MonkeyPatch, first_share: float) -> None:
    """``auto`` on a "large" model: the first question open longer than
    ``AUTO_FIRST_QUESTION_SHARE`` of the time left is a stalled search even when the
    ascending share is not used up. With the share at 0.99 and the first cap at 1e-3 of
    40 s, the first question stops within a few seconds (its CP-SAT call gets 0.05 s at
    least) instead of taking the whole 40 s, and LNS gets the rest. With the first cap at
    0.99 the later cap (``AUTO_QUESTION_SHARE``, 1e-3) does not apply to the first question:
    CP-SAT answers it (DGX1 C=2: "D <= 5?" yes, the bound), and no LNS is needed."""
    inst, warm, m = _dgx1_c2()
    monkeypatch.setattr(strategies, "AUTO_DIRECT_NONZEROS", 0)
    monkeypatch.setattr(strategies, "AUTO_ASCENDING_SHARE", 0.99)
    monkeypatch.setattr(strategies, "AUTO_FIRST_QUESTION_SHARE", first_share)
    monkeypatch.setattr(strategies, "AUTO_QUESTION_SHARE", 1e-3)
    res = solve(inst, "milp", SolveOptions(time_limit=40, extra={
        "warm_start_schedule": warm, "lns_rounds": 1, "lns_slice": 3,
    }))
    assert res.verified
    questions = [st for st in res.details["steps"] if st.get("question") == "D <= h ?"]
    if first_share > 0.5:
        assert questions and questions[0]["status"] != "unknown"
        assert res.status == "optimal" and res.makespan_slots == res.lower_bound_slots
        return
    assert questions and questions[0]["status"] == "unknown" and questions[0]["seconds"] < 5
    assert res.details["strategy"] == "auto:ascending+lns"
    assert res.details["lns"]["rounds"] == 1
    assert res.makespan_slots is not None and res.makespan_slots <= m


def test_sub_instance_keeps_switch_model_and_alpha_cap() -> None:
    """A neighbourhood's sub-instance differs from the incumbent's only in its collective and
    outages: under TE-CCL's semantics (cut-through switch, alpha cap) it keeps both, and so
    the slot length and every link's ``L`` (a store-and-forward sub-model would re-time the
    switch hop, one with another tau every ``l``)."""
    topo = make_topology("star3", gpus=[0, 1, 2], switches=[3],
                         duplex_links=[(g, 3, 50.0, 0.7) for g in range(3)])
    inst = make_instance(topo, make_collective("allgather", topo), "1KB",
                         switch_model="cut-through", alpha_cap=200)
    incumbent = solve(inst, "heuristic", SolveOptions(time_limit=10)).schedule
    assert incumbent is not None and verify(inst, incumbent).ok
    sub = restrict(inst, incumbent, ((0, 0),)).instance
    assert sub.switch_model == "cut-through" and sub.alpha_cap == 200
    assert sub.tau_us == inst.tau_us
    assert list(sub.latency) == list(inst.latency)
    assert sub.collective.chunk_ids == ((0, 0),)
