"""Time limits are deadlines for the whole engine run, and an engine past its deadline hands
back a verified schedule where it has one (or can make one cheaply).

Each test runs the engine on an instance whose work (model build, translation, layered's
construction) takes far longer than the limit given, so before the deadline fixes the
engine ran on (``exact-combining``: the build and translation of the AMD x1 model alone
take over a minute) or ended without a schedule (``layered``).
"""

from __future__ import annotations

import time

import pytest

from ccplan.contract import SolveOptions
from ccplan.heuristics.layered import engine as layered_mod
from ccplan.heuristics.tree_fallback import applies, tree_fallback
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.limits import OutOfTimeError
from ccplan.pipeline.solve import solve
from ccplan.schedule.verify import verify

# What the engine may run past its limit: the deadline is read once per model row or layer,
# and the verification and bounds of solve() come after the engine's time. On a loaded
# 2-core machine everything runs several times slower, so the allowance scales with the limit;
# the defects these tests guard against ran 10-50x past it (36 s for 3 s).
SLACK = 1.5


def within(seconds: float, limit: float) -> bool:
    """Whether a run of ``seconds`` honoured ``limit`` (see SLACK)."""
    return seconds < 3 * limit + SLACK


def test_exact_combining_returns_its_upper_bound_when_the_model_cannot_be_built_in_time() -> None:
    """AMD x1 ReduceScatter: the upper-bound heuristics take well under a second, the model's
    build about 30 s and its translation about 45 s on the development machine; with a 2 s
    limit the engine must stop building and return the heuristic's (verified) schedule as
    ``feasible``. Before the deadline covered build and translation it took over a minute."""
    topo = resolve_topology("amd", chassis=1)
    inst = make_instance(topo, make_collective("reducescatter", topo, chunks=1), "1MB")
    limit = 2.0
    result = solve(inst, "exact-combining", SolveOptions(time_limit=limit, workers=1))
    assert within(result.solve_seconds, limit), result.solve_seconds
    assert result.schedule is not None and result.verified
    assert result.status == "feasible"
    assert "time limit" in result.details["reason"]


def _slow_layered(instance: object, opts: object, deadline: object) -> object:
    """Stands in for a construction too big for its limit: it only waits for the deadline."""
    while True:
        deadline.check()  # type: ignore[attr-defined]
        time.sleep(0.01)


def test_layered_past_its_deadline_returns_the_tree_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """``layered`` that cannot finish in time (simulated: it waits for its deadline) still
    ends with a verified schedule, the shortest-path-tree fallback's, within the limit.
    Before, it returned no schedule (``unknown``; ``ccplan solve`` exit 3)."""
    topo = resolve_topology("torus2d", rows=6, cols=6)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    tree_fallback(inst)  # compiles the kernels once per installation (cached), not timed here
    monkeypatch.setattr(layered_mod, "layered_schedule", _slow_layered)
    limit = 2.5
    start = time.perf_counter()
    result = solve(inst, "layered", SolveOptions(time_limit=limit))
    assert within(time.perf_counter() - start, limit)
    assert result.schedule is not None and result.verified
    assert result.status == "feasible"
    assert "did not finish" in result.details["fallback"]


def test_layered_with_a_limit_below_the_fallbacks_reserve_goes_straight_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A limit shorter than the fallback's reserve (0.05 s plus 3 us per delivery) leaves the
    construction no time: the fallback runs at once (layered is never called)."""

    def never(*args: object) -> object:
        raise AssertionError("layered_schedule must not run")

    monkeypatch.setattr(layered_mod, "layered_schedule", never)
    topo = resolve_topology("torus2d", rows=4, cols=4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "1MB")
    result = solve(inst, "layered", SolveOptions(time_limit=0.01))
    assert result.schedule is not None and result.verified and result.status == "feasible"
    assert "no time" in result.details["fallback"]


def test_layered_without_a_fallback_still_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """single_port is outside the fallback: a construction past its deadline then reports
    the time limit as before (no schedule, status unknown)."""
    monkeypatch.setattr(layered_mod, "layered_schedule", _slow_layered)
    topo = resolve_topology("ring", n=4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB", single_port=True)
    assert not applies(inst)
    result = solve(inst, "layered", SolveOptions(time_limit=0.3))
    assert result.schedule is None and result.status == "unknown"
    assert "time limit" in result.details["reason"]


def _cases() -> list[tuple[str, object]]:
    out = []
    for name, kw, kind, chunks, extra in [
        ("dgx1", {}, "allgather", 2, {}),
        ("ndv2", {"chassis": 2}, "alltoall", 1, {}),
        ("dgx2", {"chassis": 2}, "broadcast", 3, {}),  # switches relay
        ("star_switch", {"n": 5}, "gather", 1, {}),
        ("amd", {"chassis": 2}, "scatter", 1, {}),
        ("ndv2", {"chassis": 2}, "allgather", 1, {"tau_rule": "slowest"}),  # omega > 1 on fast links
        ("torus2d", {"rows": 3, "cols": 5}, "allgather", 1, {}),
    ]:
        topo = resolve_topology(name, **kw)
        inst = make_instance(topo, make_collective(kind, topo, chunks=chunks), "1MB", **extra)
        out.append((f"{name}-{kind}", inst))
    return out


@pytest.mark.parametrize(("label", "inst"), _cases(), ids=[c[0] for c in _cases()])
def test_tree_fallback_schedules_are_valid(label: str, inst: object) -> None:
    """The fallback's schedules pass the independent verifier on switched and direct
    topologies, several holders per chunk (gather/scatter), C > 1 and capacities > 1; and
    its makespan is at least the bounds' (a verified schedule cannot beat a valid bound)."""
    schedule = tree_fallback(inst)  # type: ignore[arg-type]
    assert schedule is not None
    report = verify(inst, schedule)  # type: ignore[arg-type]
    assert report.ok, report.violations[:3]
    from ccplan.bounds import lower_bound_slots

    assert report.makespan_slots is not None
    assert report.makespan_slots >= lower_bound_slots(inst)  # type: ignore[arg-type]


def test_tree_fallback_declines_what_it_does_not_cover() -> None:
    """Combining collectives and single-port instances are outside the construction."""
    topo = resolve_topology("dgx1")
    combining = make_instance(topo, make_collective("allreduce", topo, chunks=1), "1MB")
    single = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB", single_port=True)
    assert tree_fallback(combining) is None
    assert tree_fallback(single) is None


def test_out_of_time_error_is_what_the_slow_stand_in_raises() -> None:
    """Guard for the stand-in above: it ends through the deadline, not some other error."""
    from ccplan.limits import Deadline

    with pytest.raises(OutOfTimeError):
        _slow_layered(None, None, Deadline.after(0.05))
