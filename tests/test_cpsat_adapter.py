"""Tests of the Pyomo -> CP-SAT adapter on toy models (expected values derived by hand or by HiGHS)."""

from __future__ import annotations

import itertools
import sys

import pyomo.environ as pyo
import pytest

from ccplan.errors import SolverUnavailableError, ValidationError
from ccplan.model.cpsat import (
    CpSatOptions,
    compile_model,
    hint_status_from_log,
    set_objective_limits,
    solve_compiled,
    solve_with_cpsat,
)

OPTS = CpSatOptions(workers=2, time_limit=20)


def _highs_optimum(model: pyo.ConcreteModel) -> float:
    """Optimum by HiGHS through Pyomo (an independent solver)."""
    solver = pyo.SolverFactory("appsi_highs")
    if not solver.available():
        pytest.skip("HiGHS (highspy) is not available to Pyomo")
    res = solver.solve(model, load_solutions=False)
    assert str(res.solver.termination_condition) == "optimal"
    return float(res.problem.lower_bound if model.o.sense == pyo.minimize else res.problem.upper_bound)


def _knapsack() -> pyo.ConcreteModel:
    """A small 0-1/integer model with a non-trivial optimum."""
    m = pyo.ConcreteModel()
    w = [5, 7, 4, 3, 9, 6, 8, 2]
    v = [10, 13, 7, 5, 16, 11, 14, 3]
    m.I = pyo.RangeSet(0, len(w) - 1)
    m.x = pyo.Var(m.I, domain=pyo.Binary)
    m.k = pyo.Var(domain=pyo.Integers, bounds=(0, 3))
    m.cap = pyo.Constraint(expr=sum(w[i] * m.x[i] for i in m.I) + 2 * m.k <= 22)
    m.pair = pyo.Constraint(expr=m.x[0] + m.x[1] <= 1)
    m.o = pyo.Objective(expr=-sum(v[i] * m.x[i] for i in m.I) - 3 * m.k + 100, sense=pyo.minimize)
    return m


def test_optimum_equals_highs() -> None:
    model = _knapsack()
    expected = _highs_optimum(_knapsack())
    out = solve_with_cpsat(model, OPTS)
    assert out.status == "optimal"
    assert out.objective == pytest.approx(expected)
    assert out.best_bound == pytest.approx(expected)
    # values were written back: the Pyomo objective evaluates to the reported optimum
    assert pyo.value(model.o) == pytest.approx(expected)
    assert pyo.value(model.cap.body) <= 22 + 1e-9


def test_maximisation_with_offset() -> None:
    """max 2a + 3b + c + 0.25, a + 2b + c <= 17.5, a - c + f = 3 with f fixed to 2, bounds 0..10.

    With f = 2: a = c + 1, so 2c + 2b + 1 <= 17 (rhs floored), b + c <= 8; the objective is
    3c + 3b + 2.25 <= 26.25, reached e.g. at b = 0, c = 8, a = 9.
    """
    m = pyo.ConcreteModel()
    m.a = pyo.Var(domain=pyo.Integers, bounds=(0, 10))
    m.b = pyo.Var(domain=pyo.Integers, bounds=(0, 10))
    m.c = pyo.Var(domain=pyo.Integers, bounds=(0, 10))
    m.f = pyo.Var(domain=pyo.Integers, bounds=(0, 5))
    m.f.fix(2)
    m.r1 = pyo.Constraint(expr=m.a + 2 * m.b + m.c <= 17.5)
    m.r2 = pyo.Constraint(expr=m.a - m.c + m.f == 3)
    m.r3 = pyo.Constraint(expr=3 * m.f <= 7)  # constant row, satisfied
    m.o = pyo.Objective(expr=2 * m.a + 3 * m.b + m.c + 0.25, sense=pyo.maximize)
    out = solve_with_cpsat(m, OPTS)
    assert out.status == "optimal"
    assert out.objective == pytest.approx(26.25)
    assert pyo.value(m.o) == pytest.approx(26.25)
    assert pyo.value(m.a) - pyo.value(m.c) == 1
    assert _highs_optimum(m) == pytest.approx(26.25)


def test_non_integer_coefficient_rejected_naming_constraint() -> None:
    m = pyo.ConcreteModel()
    m.x = pyo.Var([1, 2], domain=pyo.Binary)
    m.half_row = pyo.Constraint(expr=0.5 * m.x[1] + m.x[2] <= 1)
    m.o = pyo.Objective(expr=m.x[1] + m.x[2])
    with pytest.raises(ValidationError, match=r"half_row.*x\[1\].*not integral"):
        solve_with_cpsat(m, OPTS)


def test_equality_with_fractional_rhs_rejected() -> None:
    m = pyo.ConcreteModel()
    m.x = pyo.Var([1, 2], domain=pyo.Integers, bounds=(0, 5))
    m.eq = pyo.Constraint(expr=m.x[1] + m.x[2] == 2.5)
    m.o = pyo.Objective(expr=m.x[1])
    with pytest.raises(ValidationError, match=r"eq.*right-hand side.*2\.5"):
        solve_with_cpsat(m, OPTS)


def test_continuous_and_unbounded_variables_rejected() -> None:
    m = pyo.ConcreteModel()
    m.x = pyo.Var(domain=pyo.Reals, bounds=(0, 1))
    m.c = pyo.Constraint(expr=m.x <= 1)
    with pytest.raises(ValidationError, match=r"constraint c.*x is continuous"):
        compile_model(m)
    m2 = pyo.ConcreteModel()
    m2.n = pyo.Var(domain=pyo.NonNegativeIntegers)
    m2.c = pyo.Constraint(expr=m2.n >= 1)
    with pytest.raises(ValidationError, match=r"n needs finite bounds"):
        compile_model(m2)


def test_hint_accepted_and_recorded() -> None:
    """The hint x = 0, k = 0 satisfies every row (objective 100), so CP-SAT must accept it."""
    model = _knapsack()
    hint = pyo.ComponentMap((v, 0) for v in model.x.values())
    hint[model.k] = 0
    out = solve_with_cpsat(model, OPTS, hint=hint)
    assert out.hint_status == "accepted"
    assert out.status == "optimal"
    assert any("solution hint is complete and is feasible" in line for line in out.log_lines)


def test_infeasible_hint_reported_rejected() -> None:
    """Every x = 1 weighs 44 > 22: the hint breaks the capacity row."""
    model = _knapsack()
    hint = pyo.ComponentMap((v, 1) for v in model.x.values())
    hint[model.k] = 0
    out = solve_with_cpsat(model, OPTS, hint=hint)
    assert out.hint_status == "rejected"
    assert out.status == "optimal"


def test_hint_status_parser() -> None:
    assert hint_status_from_log(["x"], hinted=False) == "none"
    assert hint_status_from_log(["The solution hint is incomplete: 1 out of 2"], hinted=True) == "unknown"
    # the first message wins: later ones describe the presolved model
    lines = ["The solution hint is complete, but it is infeasible! we will try to repair it.",
             "The solution hint is complete and is feasible. Its objective value is 3."]
    assert hint_status_from_log(lines, hinted=True) == "rejected"


def test_infeasible_model() -> None:
    """x1 + x2 >= 3 with two binaries has no solution."""
    m = pyo.ConcreteModel()
    m.x = pyo.Var([1, 2], domain=pyo.Binary)
    m.c = pyo.Constraint(expr=m.x[1] + m.x[2] >= 3)
    m.o = pyo.Objective(expr=m.x[1])
    out = solve_with_cpsat(m, OPTS)
    assert out.status == "infeasible"
    assert out.objective is None
    assert not out.has_solution


def test_violated_constant_row_makes_model_infeasible() -> None:
    m = pyo.ConcreteModel()
    m.x = pyo.Var(domain=pyo.Binary)
    m.f = pyo.Var(domain=pyo.Integers, bounds=(0, 9))
    m.f.fix(4)
    m.c = pyo.Constraint(expr=2 * m.f <= 7)
    m.o = pyo.Objective(expr=m.x)
    assert solve_with_cpsat(m, OPTS).status == "infeasible"


def test_objective_limits_restrict_value() -> None:
    """Knapsack optimum v*: objective <= v* - 1 is infeasible; objective >= v* + 1 is feasible
    (every value up to 100 is reachable by dropping items) with optimum v* + 1."""
    opt = solve_with_cpsat(_knapsack(), OPTS).objective
    assert opt is not None
    compiled = compile_model(_knapsack())
    set_objective_limits(compiled, upper=opt - 1)
    assert solve_compiled(compiled, OPTS).status == "infeasible"
    set_objective_limits(compiled, lower=opt + 1)
    out = solve_compiled(compiled, OPTS)
    assert out.status == "optimal" and out.objective == pytest.approx(opt + 1)


def test_params_text_unknown_field_rejected() -> None:
    with pytest.raises(ValidationError, match="no_such_parameter"):
        CpSatOptions(params_text="no_such_parameter: 3")
    ok = CpSatOptions(params_text="linearization_level: 2")
    out = solve_with_cpsat(_knapsack(), ok)
    assert "linearization_level: 2" in out.params_text


def test_log_file_written(tmp_path) -> None:
    path = tmp_path / "sub" / "cpsat.log"
    out = solve_with_cpsat(_knapsack(), CpSatOptions(workers=2, log_path=path))
    text = path.read_text()
    assert "Starting CP-SAT solver" in text
    assert text.count("\n") == len(out.log_lines)


def test_trajectory_monotone_and_progress_called() -> None:
    events: list[tuple[float, float | None, float | None, float | None]] = []
    model = _knapsack()
    out = solve_with_cpsat(model, CpSatOptions(workers=2, progress_callback=lambda *e: events.append(e)))
    assert out.trajectory, "at least one incumbent must be recorded"
    times = [t for t, _, _ in out.trajectory]
    objs = [o for _, o, _ in out.trajectory]
    bounds = [b for _, _, b in out.trajectory]
    assert times == sorted(times)
    assert all(a >= b for a, b in itertools.pairwise(objs))  # minimisation: never worse
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(bounds))
    assert objs[-1] == pytest.approx(out.objective)
    final = out.objective
    assert final is not None
    assert all(b <= final + 1e-9 for b in bounds)
    assert events and events[-1][1] is not None


def test_missing_ortools_gives_one_line_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ortools.sat.python.cp_model", None)
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    with pytest.raises(SolverUnavailableError, match="ortools") as info:
        solve_with_cpsat(_knapsack(), CpSatOptions())
    assert "\n" not in str(info.value)
