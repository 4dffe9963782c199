"""The vectorised model build and the array path of the CP-SAT translation.

Ground truths: ``milp_rows_reference.reference_rows`` (the equations written as one plain
loop per row) for the rows of every component, Pyomo's linear walker (the row-by-row
translation) for the CP-SAT rows, and CP-SAT / HiGHS optima of small instances.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

import pyomo.environ as pyo
import pytest
from milp_rows_reference import reference_rows
from pyomo.repn.linear import LinearRepnVisitor

from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.model.cpsat import CpSatOptions, compile_model, solve_compiled
from ccplan.model.milp import build_model, model_index
from ccplan.model.rows import array_form

OPTS = CpSatOptions(workers=2, time_limit=30)


def random_instance(seed: int) -> tuple[Instance, int]:
    """A small connected network with mixed bandwidths, alpha > 0 on some links, maybe a
    switch (store-and-forward or cut-through); a random collective, capacity, single-port
    option, outage, slot rule (the slowest link's tau gives links several chunks per slot)
    and horizon."""
    rng = random.Random(seed)
    n = rng.randint(2, 4)
    switches = [n] if rng.random() < 0.4 else []
    nodes = list(range(n)) + switches
    order = nodes[:]
    rng.shuffle(order)
    pairs = {(min(a, b), max(a, b)) for a, b in itertools.pairwise(order)}
    pairs |= {(a, b) for a in nodes for b in nodes if a < b and rng.random() < 0.3}
    links = [(a, b, rng.choice([100, 50, 25]), rng.choice([0.0, 0.0, 0.5, 3.0])) for a, b in sorted(pairs)]
    topo = make_topology("random", range(n), duplex_links=links, switches=switches)
    kind = rng.choice(["allgather", "broadcast", "gather", "scatter", "alltoall"])
    coll = make_collective(kind, topo, chunks=rng.randint(1, 3), root=0)
    outages = []
    if rng.random() < 0.3:
        link = rng.choice(topo.links)
        outages = [(link.src, link.dst, rng.randint(0, 3))]
    inst = make_instance(topo, coll, rng.choice(["64KB", "1MB"]), single_port=rng.random() < 0.3,
                         capacity=rng.choice([1, 1, 2]), outages=outages,
                         tau_rule=rng.choice(["fastest", "fastest", "slowest"]),
                         switch_model="cut-through" if switches and rng.random() < 0.5
                         else "store-and-forward")
    return inst, rng.randint(2, 9)


def _var_key(var: Any) -> tuple[object, ...]:
    name = var.parent_component().local_name
    index = var.index()
    return (name,) if index is None else (name, *index)


def _model_rows(model: pyo.ConcreteModel) -> dict[str, dict[object, tuple[Any, Any, Any]]]:
    """Every active row as the reference writes it, read through Pyomo's linear walker."""
    visitor = LinearRepnVisitor({})
    out: dict[str, dict[object, tuple[Any, Any, Any]]] = {}
    for con in model.component_data_objects(pyo.Constraint, active=True):
        lb, body, ub = con.to_bounded_expression(evaluate_bounds=True)
        repn = visitor.walk_expression(body)
        assert repn.nonlinear is None and repn.constant == 0
        terms = tuple(sorted((_var_key(visitor.var_map[i]), int(c)) for i, c in repn.linear.items() if c))
        key = con.index()
        out.setdefault(con.parent_component().local_name, {})[key] = (
            terms, None if lb is None else int(lb), None if ub is None else int(ub))
    return out


def _array_rows(model: pyo.ConcreteModel) -> dict[str, dict[object, tuple[Any, Any, Any]]]:
    """The rows of the model's attached arrays, in the same form."""
    form = array_form(model)
    assert form is not None
    names = [_var_key(v) for v in form.columns]
    out: dict[str, dict[object, tuple[Any, Any, Any]]] = {}
    for name, block in form.blocks.items():
        rows = out.setdefault(name, {})
        for r, key in enumerate(block.keys):
            terms, lb, ub = block.row(r)
            rows[key] = (tuple(sorted((names[c], a) for c, a in terms)), lb, ub)
    return out


CASES = [(seed, dense, cuts) for seed in range(10) for dense, cuts in ((False, True), (True, False))]


@pytest.mark.parametrize(("seed", "dense", "cuts"), CASES)
def test_rows_match_the_per_row_reference(seed: int, dense: bool, cuts: bool) -> None:
    """Same components, same row keys, same terms and bounds as the per-row statement of
    the equations; the arrays kept on the model hold the same rows as its Pyomo components."""
    inst, horizon = random_instance(seed)
    lb = 1 if cuts else None
    model = build_model(inst, horizon, dense=dense, cuts=cuts, lower_bound=lb)
    ref = reference_rows(inst, horizon, dense=dense, cuts=cuts, lower_bound=lb)
    ref = {name: rows for name, rows in ref.items() if rows}
    got = {name: rows for name, rows in _model_rows(model).items() if rows}
    assert set(got) == set(ref)
    for name in ref:
        assert got[name] == ref[name], name
    arrays = _array_rows(model)
    for name, rows in arrays.items():
        assert rows == got.get(name, {}), name
    # every component except the scalar D >= LB row is kept as arrays
    assert set(got) - set(arrays) <= {"cut_lower_bound"}
    nnz = sum(len(t) for rows in ref.values() for t, _, _ in rows.values())
    assert model_index(model).nonzeros == nnz


def _canonical(compiled: Any) -> tuple[Counter[Any], dict[Any, tuple[int, ...]]]:
    """CP-SAT rows as a multiset of (sorted (variable key, coef) terms, domain), and the
    domain of every variable, both by Pyomo variable keys."""
    proto = compiled.cp_model.proto
    names = [_var_key(v) for v in compiled.variables]
    rows: Counter[Any] = Counter()
    for con in proto.constraints:
        lin = con.linear
        terms = tuple(sorted(zip((names[i] for i in lin.vars), lin.coeffs, strict=True)))
        rows[(terms, tuple(lin.domain))] += 1
    domains = {names[i]: tuple(v.domain) for i, v in enumerate(proto.variables)}
    return rows, domains


@pytest.mark.parametrize("seed", range(10))
def test_array_translation_equals_row_by_row(seed: int) -> None:
    """The proto filled from arrays and the one walked row by row are the same model."""
    inst, horizon = random_instance(seed)
    model = build_model(inst, horizon, lower_bound=1)
    fast = compile_model(model)
    slow = compile_model(model, use_arrays=False)
    assert fast.array_rows == fast.num_constraints - 1  # all but D >= LB
    assert slow.array_rows == 0
    rows_fast, dom_fast = _canonical(fast)
    rows_slow, dom_slow = _canonical(slow)
    assert rows_fast == rows_slow
    # the walker registers only variables that occur in a row; those agree
    assert all(dom_fast[k] == d for k, d in dom_slow.items())
    assert list(fast.cp_model.proto.objective.vars) == [fast.index[id(model.D)]]


def test_changed_components_fall_back_to_the_walker() -> None:
    """A deactivated row, a replaced row and a fixed variable: the touched components are
    walked row by row, the fixed column keeps a one-value domain, and the optimum equals
    that of the plain row-by-row translation (CP-SAT on both, proven)."""
    for seed in range(30):
        inst, horizon = random_instance(seed)
        model = build_model(inst, horizon + 3)
        if len(model.c7_capacity) and len(model.x) > 2:
            break
    first_c7 = next(iter(model.c7_capacity.values()))
    first_c7.deactivate()
    key6, row6 = next(iter(model.c6_buffer.items()))
    model.c6_buffer[key6].set_value(row6.body == 0)  # same meaning, a new expression object
    var = next(iter(model.x.values()))
    var.fix(0)
    fast = compile_model(model)
    slow = compile_model(model, use_arrays=False)
    walked = len(model.c7_capacity) - 1 + len(model.c6_buffer) + int(hasattr(model, "cut_lower_bound"))
    assert fast.num_constraints - fast.array_rows == walked
    assert tuple(fast.cp_model.proto.variables[fast.index[id(var)]].domain) == (0, 0)
    a = solve_compiled(fast, OPTS, load_values=False)
    b = solve_compiled(slow, OPTS, load_values=False)
    assert a.status == b.status
    assert a.objective == b.objective


@pytest.mark.parametrize("seed", range(5))
def test_horizon_restriction_is_the_smaller_model(seed: int) -> None:
    """For every h <= H: the sends left free in the model for H restricted to h are exactly
    the sends of a fresh build for h, and CP-SAT gives both the same answer (status and
    optimum; the restricted one through the proto's domains, translated once)."""
    from pyomo.common.collections import ComponentMap

    from ccplan.model.cpsat import restrict_domains
    from ccplan.model.milp import horizon_restriction

    inst, horizon = random_instance(seed)
    top = horizon + 3
    model = build_model(inst, top)
    compiled = compile_model(model)
    for h in range(1, top + 1):
        fixed = horizon_restriction(model, h)
        fixed_ids = {id(v) for v in fixed}
        free_x = {key for key, var in model.x.items() if id(var) not in fixed_ids}
        fresh = build_model(inst, h)
        assert free_x == set(fresh.x.keys()), h
        domains = ComponentMap((var, (0, 0)) for var in fixed)
        domains[model.D] = (0, h)
        restrict_domains(compiled, domains)
        a = solve_compiled(compiled, OPTS, load_values=False)
        b = solve_compiled(compile_model(fresh), OPTS, load_values=False)
        assert (a.status, a.objective) == (b.status, b.objective), h
    restrict_domains(compiled, {})  # back to the model for the full horizon
    assert all(tuple(v.domain) in ((0, 1), (0, top)) for v in compiled.cp_model.proto.variables)


@pytest.mark.parametrize("strategy", ["ascending", "descending"])
def test_questions_on_one_model_answer_as_fresh_builds(strategy: str) -> None:
    """The engine's "D <= h ?" questions on one model built for the largest h (the
    default) and on a fresh model per h (``reuse_model=False``) get the same answers, step
    by step; the result is HiGHS's optimum, above ccplan.bounds, and it verifies."""
    from test_exact_search import ABOVE, _highs_optimum

    from ccplan.bounds import lower_bound_slots
    from ccplan.contract import SolveOptions
    from ccplan.pipeline.solve import solve

    inst = ABOVE["switch-broadcast-C2-16MB-single-port"]
    truth = _highs_optimum(inst)
    assert truth > lower_bound_slots(inst)
    answers = []
    for reuse in (True, False):
        extra = {"strategy": strategy, "always_solve": True, "reuse_model": reuse,
                 "warm_start_method": "mteg"}
        res = solve(inst, "milp", SolveOptions(time_limit=60, extra=extra))
        assert res.verified and res.status == "optimal" and res.makespan_slots == truth
        answers.append([(st["horizon"], st["status"]) for st in res.details["steps"]])
    assert answers[0] == answers[1]
    assert len(answers[0]) >= 2  # at least one "no" (or one "yes" below the warm start) and the last answer
