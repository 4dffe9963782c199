"""Tests of the exact engine ``milp`` and its backends (CP-SAT, HiGHS) on small instances.

Expected optima come from HiGHS (an independent solver on the same Pyomo model), from hand
derivations in the docstrings, or from lower bounds; never from the engine itself.
"""

from __future__ import annotations

import sys

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import SolverUnavailableError, ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.builtin import line, ring, star_switch
from ccplan.model.exact import greedy_schedule, solve_model_with
from ccplan.model.milp import build_model, hint_from_schedule, schedule_from_model
from ccplan.pipeline import get_engine
from ccplan.schedule.verify import verify


def _mixed() -> Instance:
    """4-ring with alternating 50/25 GB/s links (l = 1 and 2), alpha 0."""
    cables = [(0, 1, 50, 0), (1, 2, 25, 0), (2, 3, 50, 0), (3, 0, 25, 0)]
    topo = make_topology("mixed", gpus=range(4), duplex_links=cables)
    return make_instance(topo, make_collective("allgather", topo, chunks=1), "1GB")


def _upper(inst: Instance) -> int:
    """Makespan of the engine's greedy fallback schedule (verified): a valid horizon."""
    report = verify(inst, greedy_schedule(inst))
    assert report.ok and report.makespan_slots is not None
    return report.makespan_slots


def _line3(single_port: bool = False, chunks: int = 1) -> Instance:
    topo = line(3, alpha_us=0)
    coll = make_collective("allgather", topo, chunks=chunks)
    return make_instance(topo, coll, "1GB", single_port=single_port)


def _small_instances() -> dict[str, Instance]:
    ring4 = ring(4, alpha_us=0)
    star3 = star_switch(3, alpha_us=0)
    return {
        "line3-allgather": _line3(),
        "line3-allgather-single-port": _line3(single_port=True),
        "ring4-alltoall-2": make_instance(ring4, make_collective("alltoall", ring4, chunks=2), "1GB"),
        "ring4-allgather-outage": make_instance(
            ring4, make_collective("allgather", ring4, chunks=1), "1GB", outages=[(0, 1, 0), (0, 1, 1)]
        ),
        "star3-allgather": make_instance(star3, make_collective("allgather", star3, chunks=1), "1GB"),
        "mixed-allgather": _mixed(),
    }


SMALL = _small_instances()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_cpsat_and_highs_agree_on_optimum(name: str) -> None:
    """Both backends solve the same model (horizon = greedy makespan, a valid upper bound) to
    proven optimality with the same makespan; both schedules verify; the optimum lies between
    the lower bounds and the greedy makespan."""
    inst = SMALL[name]
    upper = _upper(inst)
    results = {}
    for backend in ("cpsat", "highs"):
        model = build_model(inst, upper)
        res = solve_model_with(backend, model, time_limit=30)
        assert res.status == "optimal", (backend, res)
        report = verify(inst, schedule_from_model(model, inst))
        assert report.ok, report.violations[:1]
        assert report.makespan_slots == pytest.approx(res.objective)
        assert res.objective is not None
        results[backend] = res.objective
    assert results["cpsat"] == pytest.approx(results["highs"])
    assert lower_bound_slots(inst) <= results["cpsat"] <= upper


def test_hand_derived_optima() -> None:
    """Line 0-1-2, equal links, alpha 0, so L = 1.

    AllGather: chunk 0 needs two hops to reach GPU 2 (and chunk 2 to reach GPU 0), so D >= 2;
    sending chunks 0 and 2 to GPU 1 in slot 0 and forwarding them in slot 1 meets it: D = 2.

    The same with single_port: GPU 1 must send four chunks (1 to 0 and 2, 0 to 2, 2 to 0),
    one per slot, and the last one arrives a slot after it starts: D >= 4; the greedy
    schedule reaches 4, so D = 4.
    """
    for inst, expected in ((_line3(), 2), (_line3(single_port=True), 4)):
        out = get_engine("milp")(
            inst, SolveOptions(time_limit=30, extra={"always_solve": True, "heuristic_time_limit": 0.5})
        )
        assert out.status == "optimal"
        assert out.schedule is not None
        assert verify(inst, out.schedule).makespan_slots == expected
        assert out.bound_slots == expected


@pytest.mark.parametrize("strategy", ["direct", "descending", "ascending"])
def test_engine_schedule_verifies_and_bound_is_valid(strategy: str) -> None:
    """The engine's schedule verifies, its makespan is the reported optimum, and the reported
    bound never exceeds the optimum HiGHS proves on its own model."""
    inst = SMALL["ring4-alltoall-2"]
    upper = _upper(inst)
    highs_model = build_model(inst, upper)
    truth = solve_model_with("highs", highs_model, time_limit=30)
    assert truth.status == "optimal" and truth.objective is not None
    out = get_engine("milp")(
        inst,
        SolveOptions(time_limit=30, extra={"strategy": strategy, "always_solve": True,
                                           "warm_start_method": "mteg"}),
    )
    assert out.status == "optimal"
    assert out.schedule is not None
    report = verify(inst, out.schedule)
    assert report.ok
    assert report.makespan_slots == truth.objective
    assert out.bound_slots is not None and out.bound_slots <= truth.objective
    for key in ("horizon", "model_size", "build_seconds", "solve_seconds", "cpsat_status", "best_bound",
                "trajectory", "hint_method", "hint_status", "heuristic_makespan", "cpsat_params"):
        assert key in out.details


def test_bound_under_time_limit_never_exceeds_optimum() -> None:
    """With a tiny time limit the engine may stop early; whatever it reports as bound must
    still be <= the optimum (8 for single-port AllGather on a 3-line with 2 chunks: GPU 1
    sends 8 chunks one per slot, and HiGHS confirms it below)."""
    inst = _line3(single_port=True, chunks=2)
    model = build_model(inst, _upper(inst))
    truth = solve_model_with("highs", model, time_limit=30)
    assert truth.status == "optimal" and truth.objective == 8
    out = get_engine("milp")(inst, SolveOptions(time_limit=0.5, extra={"always_solve": True}))
    assert out.bound_slots is not None and out.bound_slots <= 8
    if out.schedule is not None:
        assert verify(inst, out.schedule).ok


def test_infeasible_horizon_reports_infeasible() -> None:
    """Single-port 3-line AllGather needs 4 slots (see test_hand_derived_optima): horizon 3 is
    above the lower bounds (so CP-SAT itself must prove it) and infeasible; horizon 1 is below
    the latency bound and is rejected without a solve."""
    inst = _line3(single_port=True)
    assert lower_bound_slots(inst) <= 3
    quick = {"heuristic_time_limit": 0.5}
    out = get_engine("milp")(inst, SolveOptions(time_limit=30, horizon=3, extra=quick))
    assert out.status == "infeasible"
    assert out.schedule is None
    assert out.details["cpsat_status"] == "infeasible"
    out = get_engine("milp")(inst, SolveOptions(time_limit=30, horizon=1, extra=quick))
    assert out.status == "infeasible" and out.schedule is None


def test_warm_start_hint_accepted() -> None:
    inst = _mixed()
    given = greedy_schedule(inst)
    assert verify(inst, given).ok
    out = get_engine("milp")(
        inst,
        SolveOptions(time_limit=30, extra={"warm_start_schedule": given, "always_solve": True,
                                           "strategy": "direct"}),
    )
    assert out.details["hint_method"] == "given"
    assert out.details["hint_status"] == "accepted"
    assert out.status == "optimal"
    # the same through the backend API
    model = build_model(inst, _upper(inst))
    res = solve_model_with("cpsat", model, hint=hint_from_schedule(model, inst, given))
    assert res.hint_status == "accepted"


def test_invalid_warm_start_schedule_rejected() -> None:
    inst = _mixed()
    broken = type(greedy_schedule(inst))(greedy_schedule(inst).sends[1:])
    with pytest.raises(ValidationError, match="warm_start_schedule"):
        get_engine("milp")(inst, SolveOptions(extra={"warm_start_schedule": broken}))


def test_logs_progress_and_dump(tmp_path) -> None:
    inst = SMALL["ring4-alltoall-2"]
    events: list[tuple] = []
    opts = SolveOptions(
        time_limit=30,
        log_path=tmp_path / "cpsat.log",
        progress_path=tmp_path / "progress.csv",
        dump_model=tmp_path / "model.lp",
        extra={"always_solve": True, "warm_start_method": "mteg",
               "progress_callback": lambda *e: events.append(e)},
    )
    out = get_engine("milp")(inst, opts)
    assert out.status == "optimal"
    assert "Starting CP-SAT solver" in (tmp_path / "cpsat.log").read_text()
    rows = (tmp_path / "progress.csv").read_text().splitlines()
    assert rows[0] == "seconds,objective,bound" and len(rows) >= 2
    assert "c6_buffer" in (tmp_path / "model.lp").read_text()
    assert events


def test_unknown_solver_and_strategy_rejected() -> None:
    inst = _mixed()
    with pytest.raises(ValidationError, match="gurobi"):
        get_engine("milp")(inst, SolveOptions(extra={"solver": "gurobi"}))
    with pytest.raises(ValidationError, match="sideways"):
        get_engine("milp")(inst, SolveOptions(extra={"strategy": "sideways"}))
    with pytest.raises(ValidationError, match="not_a_field"):
        get_engine("milp")(inst, SolveOptions(extra={"cpsat_params": "not_a_field: 1"}))


def test_missing_ortools_is_one_line_naming_package(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ortools.sat.python.cp_model", None)
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    inst = _mixed()
    with pytest.raises(SolverUnavailableError, match="ortools") as info:
        get_engine("milp")(inst, SolveOptions(extra={"always_solve": True}))
    assert "\n" not in str(info.value)


def test_missing_highspy_is_one_line_naming_package(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "highspy", None)
    inst = _mixed()
    with pytest.raises(SolverUnavailableError, match="highspy") as info:
        get_engine("milp")(inst, SolveOptions(extra={"solver": "highs", "always_solve": True,
                                                     "strategy": "direct"}))
    assert "\n" not in str(info.value)
