"""``--chunks auto`` (``ccplan.pipeline.combining.solve_auto_chunks``) and busbw in the CLI."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from ccplan.cli import main
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances.builtin import fully_connected, ring
from ccplan.instances.combining import allreduce
from ccplan.instances.instance import make_instance
from ccplan.pipeline.chunks import AUTO_PATIENCE, AUTO_TOLERANCE, solve_auto_chunks
from ccplan.pipeline.solve import solve


@dataclass(frozen=True)
class _Fake:
    """A stand-in engine's result: what ``solve_auto_chunks`` reads of a ``Result``."""

    makespan_us: float
    lower_bound_slots: int = 1
    verified: bool = True
    physical_bound_us: float = 100.0
    details: dict = field(default_factory=dict)


def _ring4_allreduce(c: int):
    topo = ring(4, alpha_us=0.0)
    return make_instance(topo, allreduce(topo, chunks=c), "1MB")


def test_auto_chunks_keeps_the_fastest_verified_candidate():
    """Every candidate is solved again here, independently: the reported times are theirs, and
    the chosen instance is the one with the smallest time in microseconds (a slot's length
    changes with C, so slots would not compare). C is doubled from 1 without gaps, and the
    doubling stopped for one of the rules of ``ccplan.pipeline.chunks``: the last candidate's
    slot bound, or the best time, within 1 % of the physical bound."""
    topo = ring(4, alpha_us=0.0)

    def build(c: int):
        return make_instance(topo, allreduce(topo, chunks=c), "1MB")

    inst, result = solve_auto_chunks(build, "ring")
    reported = result.details["auto_chunks"]
    assert [int(c) for c in reported] == [2**i for i in range(len(reported))]
    times = {}
    for c in reported:
        r = solve(build(int(c)), "ring")
        assert r.verified
        times[c] = r.makespan_us
    assert reported == pytest.approx(times)
    assert result.verified and result.makespan_us == min(times.values())
    assert inst.collective.chunks == int(min(times, key=lambda k: times[k]))
    physical = result.physical_bound_us
    assert physical is not None and physical <= result.makespan_us
    last = build(int(list(reported)[-1]))
    last_bound_us = solve(last, "ring").lower_bound_slots * last.tau_us
    assert (result.makespan_us <= (1 + AUTO_TOLERANCE) * physical
            or last_bound_us <= (1 + AUTO_TOLERANCE) * physical), result.details["auto_stop"]


def test_auto_chunks_stops_at_the_memory_budget_with_the_best_so_far():
    """No fixed cap on C: the memory budget ends the doubling. A pipelined Broadcast down a
    line of 4 GPUs gains from every doubling (the chain's time is ``(N - 2 + C)`` chunk times
    of ``M / C``, which tends to ``M / B``, the physical bound, from above), so without a budget
    C would grow to 256. Under a budget between the solve estimates of the first refused C and
    the one before it (``estimate_solve`` grows with the chunk count), the search returns the
    best schedule of the C that fit and says why it stopped."""
    from ccplan.instances import make_topology
    from ccplan.instances.catalog import make_collective
    from ccplan.limits import budget
    from ccplan.pipeline.estimate import estimate_solve

    topo = make_topology("line4", range(4), duplex_links=[(i, i + 1, 50.0, 0.0) for i in range(3)])

    def build(c: int):
        return make_instance(topo, make_collective("broadcast", topo, chunks=c, root=0), "16MB")

    cap = 1_200_000
    refused = next(c for c in (2**i for i in range(12)) if estimate_solve(build(c), "mteg").bytes > cap)
    assert refused > 4  # the test needs a few doublings before the budget bites
    with budget(cap):
        inst, result = solve_auto_chunks(build, "mteg")
    tried = [int(c) for c in result.details["auto_chunks"]]
    assert tried == [2**i for i in range(tried.index(refused // 2) + 1)]
    assert "memory budget" in result.details["auto_stop"]
    assert result.verified and inst.collective.chunks == refused // 2
    assert result.makespan_us == min(result.details["auto_chunks"].values())


def test_auto_chunks_pipelines_where_it_pays():
    """Fully connected 3 GPUs, alpha 1 us, heuristic AllReduce: the result is never slower than
    the C = 1 schedule, and it is one of the candidates' own results. "Slower" in the time the
    candidates are ranked by (:func:`ccplan.pipeline.chunks._candidate_us`): at C = 1 the slots
    (about 10 us) drop the 1 us alphas, so its slot time alone is a time the machine cannot
    reach, and its alpha-beta replay counts them."""
    from ccplan.pipeline.chunks import _candidate_us

    topo = fully_connected(3, alpha_us=1.0)

    def build(c: int):
        return make_instance(topo, allreduce(topo, chunks=c), "4MB")

    inst, result = solve_auto_chunks(build, "mteg", SolveOptions(time_limit=20))
    one = solve(build(1), "mteg", SolveOptions(time_limit=5))
    ranked = _candidate_us(inst, result)
    assert result.verified and ranked is not None and ranked <= _candidate_us(build(1), one)
    assert result.details["auto_chunks"][str(inst.collective.chunks)] == ranked


def test_auto_chunks_fails_with_one_line_when_nothing_verifies():
    topo = ring(4, alpha_us=0.0)
    with pytest.raises(ValidationError, match="no chunk count"):
        solve_auto_chunks(lambda c: make_instance(topo, allreduce(topo, chunks=c), "1MB"), "pairwise")


def test_cli_chunks_auto_and_busbw(capsys):
    code = main(["solve", "--topology", "ring", "--topo-arg", "n=4", "--collective", "allreduce",
                 "--size", "1MB", "--chunks", "auto", "--method", "ring", "--json", "--quiet",
                 "--time-limit", "10"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    tried = data["details"]["auto_chunks"]
    assert data["verified"], data
    order = sorted(tried, key=int)  # the JSON may list the keys as text, sorted
    assert order[:2] == ["1", "2"], tried
    # the doubling may end with C's that ran out of time on a loaded machine (at most
    # AUTO_PATIENCE in a row), never with a gap before them
    times = [tried[c] for c in order]
    trailing = len(times) - max(i + 1 for i, v in enumerate(times) if v is not None)
    assert trailing <= AUTO_PATIENCE, tried
    assert all(v is not None for v in times[: len(times) - trailing]), tried
    assert data["makespan_us"] == min(v for v in times if v is not None), (data["makespan_us"], tried)
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 2 * 3 / 4)


@pytest.mark.parametrize("argv", [
    ["bounds", "--topology", "dgx1", "--collective", "allreduce", "--chunks", "auto"],
    ["solve", "--topology", "dgx1", "--chunks", "0x"],
])
def test_cli_chunks_auto_bad_use_exits_2(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse rejects a malformed value itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chunks" in err[0]


def test_one_doubling_that_gains_little_does_not_end_the_search(monkeypatch):
    """A weak slot bound (below the physical one, as when it lets switches reduce) says nothing
    about larger C. Times by C (a stand-in engine): 1 -> 200, 2 -> 160, 4 -> 159 (a gain under
    1 %), 8 -> 120, 16 -> 102, 32 -> 101.5 (under 1 %), 64 -> 101.2 (under 1 % again); physical
    bound 100 (none of them within 1 % of it), slot bound 50 us at every C. The search must go
    past C = 4 and stop after two doublings in a row that gained under 1 %, at C = 64, keeping
    C = 64's 101.2 us."""
    import ccplan.pipeline.chunks as chunks

    times = {1: 200.0, 2: 160.0, 4: 159.0, 8: 120.0, 16: 102.0, 32: 101.5, 64: 101.2, 128: 101.1}


    def fake_solve(instance, method, options):
        c = instance.collective.chunks
        return _Fake(times[c], lower_bound_slots=max(1, round(50.0 / instance.tau_us)))

    monkeypatch.setattr(chunks, "solve", fake_solve)
    inst, result = solve_auto_chunks(_ring4_allreduce, "stand-in", SolveOptions(time_limit=600))
    assert [int(c) for c in result.details["auto_chunks"]] == [1, 2, 4, 8, 16, 32, 64]
    assert inst.collective.chunks == 64 and result.makespan_us == 101.2
    assert "2 doublings in a row" in result.details["auto_stop"]


def test_the_doubling_does_not_start_a_candidate_it_cannot_finish(monkeypatch):
    """A stand-in engine whose run (verification and bounds included) takes 2 C seconds on a
    clock the test keeps, 60 s limit: C = 1, 2, 4, 8 end at 2, 6, 14 and 30 s; C = 16 would take
    about twice C = 8's 16 s, 32 s, and only 30 s are left, so the doubling stops at C = 8
    within the limit (it used to start C = 16 and end at 62 s). Times 100 / C + 100 us against
    a physical bound of 100 us, so no other rule stops it."""
    import ccplan.pipeline.chunks as chunks

    clock = {"now": 0.0}

    class FakeTime:
        @staticmethod
        def perf_counter() -> float:
            return clock["now"]

    def fake_solve(instance, method, options):
        c = instance.collective.chunks
        clock["now"] += 2.0 * c
        return _Fake(100.0 / c + 100.0 * (1 + 0.5 / c))

    monkeypatch.setattr(chunks, "time", FakeTime)
    monkeypatch.setattr(chunks, "solve", fake_solve)
    inst, result = solve_auto_chunks(_ring4_allreduce, "stand-in", SolveOptions(time_limit=60))
    assert [int(c) for c in result.details["auto_chunks"]] == [1, 2, 4, 8]
    assert clock["now"] <= 60.0
    assert inst.collective.chunks == 8
    assert "would take about 32 s" in result.details["auto_stop"]


def test_no_schedule_in_time_at_any_c_is_the_engine_answer_not_bad_input(monkeypatch, capsys):
    """An engine that runs at every C but finds nothing in its time (a real solve of the ring,
    its schedule taken away, status ``"unknown"``): ``--chunks auto`` returns the last
    candidate's result, with every C tried, and the CLI exits 3 ("no schedule") naming the
    method, not 2 (bad input) as before. A method that refuses the instance at every C still
    raises (see test_auto_chunks_fails_with_one_line_when_nothing_verifies)."""
    from dataclasses import replace

    import ccplan.pipeline.chunks as chunks

    real = chunks.solve

    def out_of_time(instance, method, options):
        r = real(instance, "ring", options)
        return replace(r, status="unknown", schedule=None, makespan_slots=None, verified=False, report=None)

    monkeypatch.setattr(chunks, "solve", out_of_time)
    topo = ring(4, alpha_us=0.0)
    inst, result = solve_auto_chunks(lambda c: make_instance(topo, allreduce(topo, chunks=c), "1MB"),
                                     "ring", SolveOptions(time_limit=20))
    assert result.schedule is None and not result.verified
    assert list(result.details["auto_chunks"]) == ["1", "2"]  # AUTO_PATIENCE failures in a row
    assert all(v is None for v in result.details["auto_chunks"].values())
    assert inst.collective.chunks == 2
    code = main(["solve", "--topology", "ring", "--topo-arg", "n=4", "--collective", "allreduce",
                 "--size", "1MB", "--chunks", "auto", "--method", "ring", "--quiet", "--time-limit", "20"])
    assert code == 3
    assert "found no schedule" in capsys.readouterr().err


def test_candidates_with_dropped_alphas_are_ranked_by_their_replay():
    """A 6 x 6 torus AllGather of 64 MB at C = 4: tau = 8.9 us, so the 0.7 us alphas are under
    ``alpha_threshold`` (0.1 tau) and the slot model drops them; ``layered``'s schedule is then
    shorter in slots than the physical bound (a bound on every alpha-beta schedule), i.e. a
    time the machine cannot reach. ``--chunks auto`` ranks such a candidate by its alpha-beta
    replay, which the physical bound holds for: at or above it."""
    from ccplan.instances import make_collective
    from ccplan.instances.builtin import resolve_topology
    from ccplan.pipeline.chunks import _candidate_us
    from ccplan.schedule.simulate import simulate

    topo = resolve_topology("torus2d", rows=6, cols=6)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=4), "64MB")
    assert inst.drops_alphas
    res = solve(inst, "layered", SolveOptions(time_limit=30, workers=1))
    assert res.verified and res.makespan_us is not None and res.physical_bound_us is not None
    assert res.makespan_us < res.physical_bound_us  # the slot time alone: below the physics
    ranked = _candidate_us(inst, res)
    assert ranked is not None and ranked >= res.physical_bound_us
    assert ranked == max(res.makespan_us, simulate(inst, res.schedule).completion_us)
    # where no alpha is dropped, the slot time is kept (it bounds the replay from above)
    big = make_instance(topo, make_collective("allgather", topo, chunks=64), "64MB")
    assert not big.drops_alphas


def test_a_slot_bound_that_drops_alphas_does_not_end_the_doubling(monkeypatch):
    """A ring of 4 with 0.1 us alphas at 1 MB: tau = 5 / C us, so C = 1, 2, 4 drop the alphas
    (tau > 10 alpha) and C = 8 on counts them. A stand-in engine whose slot bound is the
    physical bound (100 us) at every C and whose times are 110 (C = 1), 109.5, 109.2 (each
    doubling gains under 1 %), 104 (C = 8), 103.9, 103.8, 103.7: the slot bound within 1 %
    and two doublings that gained under 1 % stopped the search at C = 4 before, but a slot
    model that drops alphas bounds only its slot time. The doubling goes on to C = 8, which
    gains 4.8 %, and stops at C = 32, the second doubling in a row after it that gained under
    1 %, keeping C = 32's 103.8 us."""
    import ccplan.pipeline.chunks as chunks

    times = {1: 110.0, 2: 109.5, 4: 109.2, 8: 104.0, 16: 103.9, 32: 103.8, 64: 103.7}

    def build(c: int):
        topo = ring(4, alpha_us=0.1)
        return make_instance(topo, allreduce(topo, chunks=c), "1MB")

    def fake_solve(instance, method, options):
        c = instance.collective.chunks
        assert instance.drops_alphas == (c <= 4)
        return _Fake(times[c], lower_bound_slots=round(100.0 / instance.tau_us))

    monkeypatch.setattr(chunks, "solve", fake_solve)
    inst, result = solve_auto_chunks(build, "stand-in", SolveOptions(time_limit=600))
    assert [int(c) for c in result.details["auto_chunks"]] == [1, 2, 4, 8, 16, 32]
    assert inst.collective.chunks == 32 and result.makespan_us == 103.8
    assert "2 doublings in a row" in result.details["auto_stop"]


def test_a_schedule_within_one_percent_but_not_half_does_not_end_the_doubling(monkeypatch):
    """Physical bound 100 us, slot bound 50 us (weak) at every C; times 200 (C = 1), 100.8
    (C = 2: within 1 % of the bound, 0.992 of it, which the doubling used to stop at), 100.3
    (C = 4: within 0.5 %, AUTO_CLOSE). The doubling goes on to C = 4 and stops there."""
    import ccplan.pipeline.chunks as chunks

    times = {1: 200.0, 2: 100.8, 4: 100.3, 8: 100.2}

    def fake_solve(instance, method, options):
        c = instance.collective.chunks
        return _Fake(times[c], lower_bound_slots=max(1, round(50.0 / instance.tau_us)))

    monkeypatch.setattr(chunks, "solve", fake_solve)
    inst, result = solve_auto_chunks(_ring4_allreduce, "stand-in", SolveOptions(time_limit=600))
    assert [int(c) for c in result.details["auto_chunks"]] == [1, 2, 4]
    assert inst.collective.chunks == 4 and result.makespan_us == 100.3
    assert "within 0.5% of the physical bound" in result.details["auto_stop"]
