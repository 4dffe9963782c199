"""Slot windows: the window model of ``build_model(..., start=...)`` and the LNS rule ``slots``.

Expected values are derived by hand in the docstrings or come from an independent
construction of the same restricted problem: the *whole* model with the incumbent's sends
before the window fixed through Pyomo (``var.fix``), which builds every slot and lets CP-SAT
remove the fixed part, against the window model, which builds nothing before the window.
Every schedule goes through ``ccplan.schedule.verify``.
"""

from __future__ import annotations

from typing import Any

import pytest

from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.builtin import resolve_topology
from ccplan.model import exact
from ccplan.model.exact import solve_model_with, warmstart
from ccplan.model.lns import NEIGHBOURHOODS, build_window_model, score, window_start
from ccplan.model.milp import build_model, model_size, schedule_from_model
from ccplan.model.milp.schedules import _contributing
from ccplan.model.size import StartState, estimate_size, start_state
from ccplan.pipeline import get_engine
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify


def _star() -> Instance:
    """GPU 0 -> switch 9 -> GPUs 1 and 2 (one direction), Broadcast of one chunk from 0;
    every link 50 GB/s, alpha 0: l = L = 1."""
    topo = make_topology(
        "star3", gpus=[0, 1, 2], switches=[9],
        directed_links=[(0, 9, 50.0, 0.0), (9, 1, 50.0, 0.0), (9, 2, 50.0, 0.0)],
    )
    return make_instance(topo, make_collective("broadcast", topo, chunks=1, root=0), "1MB")


def _leaf_spine() -> Instance:
    """Leaf-spine, 2 leaves of 2 GPUs, one spine, uplinks 100 GB/s and GPU links 50 GB/s: a
    GPU link has l = 2, so sends are in flight across most slots; AllGather of 1 GB (alpha
    negligible)."""
    topo = resolve_topology("leaf_spine", gpus_per_leaf=2, spines=1)
    return make_instance(topo, make_collective("allgather", topo, chunks=1), "1GB")


def _window_round(inst: Instance, schedule: Schedule, a: int) -> tuple[Schedule, Any]:
    """One slot-window round by hand: start state at ``a``, window model, CP-SAT, merge."""
    m = verify(inst, schedule).makespan_slots
    assert m is not None
    model, hint = build_window_model(inst, schedule, start_state(inst, schedule, a), m)
    res = solve_model_with("cpsat", model, time_limit=60, workers=1, hint=hint)
    assert res.status == "optimal"
    new = schedule_from_model(model, inst).sends
    return Schedule.of(tuple(s for s in schedule.sends if s.slot < a) + tuple(new)), res


def test_window_round_repairs_a_late_send_from_a_switch_copy() -> None:
    """The switch holds the chunk at the window's first slot; the window re-times its copy.

    Hand derivation: 0 -> 9 in slot 0 (at 9 from slot 1), 9 -> 1 in slot 1 and, padded,
    9 -> 2 in slot 3: makespan 4. At slot 1 the switch 9 holds the chunk (a switch owns no
    data: only a start state, not a collective, can say so); with every send from slot 1 on
    free, 9 -> 2 moves to slot 1 and the makespan is 2, which is optimal (two hops of L = 1
    from the root)."""
    inst = _star()
    padded = Schedule.of([Send(0, (0, 0), 0, 9), Send(1, (0, 0), 9, 1), Send(3, (0, 0), 9, 2)])
    assert verify(inst, padded).makespan_slots == 4
    start = start_state(inst, padded, 1)
    assert start.ready[((0, 0), 9)] == 1  # the switch's copy
    assert start.demands(inst.collective) == (((0, 0), 1), ((0, 0), 2))
    merged, _ = _window_round(inst, padded, 1)
    report = verify(inst, merged)
    assert report.ok and report.makespan_slots == 2
    assert Send(0, (0, 0), 0, 9) in merged.sends  # the send before the window is kept


def test_in_flight_sends_keep_their_arrival_and_their_link() -> None:
    """A send in flight at the window's first slot keeps its link busy and its arrival.

    Leaf-spine: a GPU link has l = 2. The start state at a slot where a send is in flight on
    such a link names its receiver ready at the arrival (not before) and the link as used in
    the slot it still occupies; the window round's merged schedule verifies (the verifier
    would reject a second send on that link in that slot, or a forward before the arrival)."""
    inst = _leaf_spine()
    warm = get_engine("mteg")(inst, SolveOptions()).schedule
    assert warm is not None
    occ, lat, index = inst.occupancy, inst.latency, inst.topology.link_index
    flying = max((s for s in warm.sends if int(occ[index[(s.src, s.dst)]]) == 2), key=lambda s: s.slot)
    a = flying.slot + 1
    start = start_state(inst, warm, a)
    e = index[(flying.src, flying.dst)]
    assert start.ready[(flying.chunk, flying.dst)] == flying.slot + int(lat[e]) > a
    assert start.used[(e, a)] == 1
    merged, _ = _window_round(inst, warm, a)
    report = verify(inst, merged)
    assert report.ok and score(inst, merged) <= score(inst, warm)


def _overtaken() -> tuple[Instance, Schedule]:
    """GPUs 0..3, Broadcast of one chunk from 0, alpha 0, directed links 0 -> 1 at 10 GB/s
    (l = L = 5) and 0 -> 2, 2 -> 1, 1 -> 3 at 50 GB/s (L = 1). The incumbent sends 0 -> 1 and
    0 -> 2 in slot 0 and 1 -> 3 in slot 5 (1 holds the chunk from 0 + 5): makespan 6."""
    topo = make_topology(
        "overtaken", gpus=[0, 1, 2, 3],
        directed_links=[(0, 1, 10.0, 0.0), (0, 2, 50.0, 0.0), (2, 1, 50.0, 0.0), (1, 3, 50.0, 0.0)],
    )
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=1, root=0), "1MB")
    return inst, Schedule.of([Send(0, (0, 0), 0, 1), Send(0, (0, 0), 0, 2), Send(5, (0, 0), 1, 3)])


def test_a_receiver_in_flight_forwards_from_its_arrival_even_when_another_way_is_faster() -> None:
    """A node whose chunk is in flight at the window's first slot cannot forward it before
    the arrival, even if another holder could have got it there sooner.

    Hand derivation (:func:`_overtaken`): at slot 1 the send 0 -> 1 is in flight (ready at 5)
    and 2 holds the chunk (from 1). Node 1 already receives the chunk, so the way 2 -> 1
    (at 1 from 2) is closed to it: its sends start at 5, and 3 gets the chunk at 6 at the
    earliest (the only link into 3 is 1 -> 3). So the window's optimum keeps makespan 6 and
    the merged schedule verifies. The window model once took node 1's first slot from the
    shortest path (2, via 2), so CP-SAT sent 1 -> 3 in slot 2: makespan 3, and the merge
    failed verification (causality) -- the error AMD 2 chassis logged from LNS."""
    inst, incumbent = _overtaken()
    assert verify(inst, incumbent).makespan_slots == 6
    start = start_state(inst, incumbent, 1)
    assert start.ready[((0, 0), 1)] == 5
    merged, _ = _window_round(inst, incumbent, 1)
    report = verify(inst, merged)
    assert report.ok, report.violations[:1]
    assert report.makespan_slots == 6


def test_window_model_at_slot_0_is_the_whole_model() -> None:
    """A window from slot 0 frees everything: the same variables as the whole model and the
    estimate counts them exactly."""
    inst = _leaf_spine()
    warm = get_engine("mteg")(inst, SolveOptions()).schedule
    assert warm is not None
    m = verify(inst, warm).makespan_slots
    assert m is not None
    start = start_state(inst, warm, 0)
    whole, window = build_model(inst, m), build_model(inst, m, start=start)
    assert model_size(window)["variables"] == model_size(whole)["variables"]
    assert estimate_size(inst, m, start=start).variables == model_size(window)["variables"]
    assert list(window.x) == list(whole.x)


@pytest.mark.parametrize("a", [1, 3, 5])
def test_window_optimum_equals_the_whole_model_with_early_sends_fixed(a: int) -> None:
    """Independent check of the window model: the whole model over the same horizon with
    every ``x`` of a slot before ``a`` fixed to the incumbent (1 on its sends, 0 elsewhere)
    has the same optimum ``min D``. The incumbent keeps only sends that help a demand (the
    whole model has no variable for the others)."""
    inst = _leaf_spine()
    warm = get_engine("mteg")(inst, SolveOptions()).schedule
    assert warm is not None
    warm = Schedule.of(_contributing(inst, warm))
    m = verify(inst, warm).makespan_slots
    assert m is not None and a < m
    index = inst.topology.link_index
    sends = {(s.chunk[0], s.chunk[1], index[(s.src, s.dst)], s.slot) for s in warm.sends}
    whole = build_model(inst, m)
    for key, var in whole.x.items():
        if key[3] < a:
            var.fix(1 if key in sends else 0)
    ref = solve_model_with("cpsat", whole, time_limit=60, workers=1)
    window = build_model(inst, m, start=start_state(inst, warm, a))
    got = solve_model_with("cpsat", window, time_limit=60, workers=1)
    assert ref.status == got.status == "optimal"
    assert got.objective == ref.objective
    merged = Schedule.of(tuple(s for s in warm.sends if s.slot < a) + schedule_from_model(window, inst).sends)
    assert verify(inst, merged).makespan_slots == round(ref.objective or 0)
    assert model_size(window)["variables"] < model_size(whole)["variables"]


def test_slots_rounds_in_the_engine_on_a_switch_fabric() -> None:
    """``strategy="lns"`` with only ``slots`` rounds on a star of 8 GPUs around one switch,
    AllGather 1 GB (l = L = 1), from MTEGCCA's schedule with its last delivery padded to
    two slots after its makespan m0.

    Hand derivation of the optimum: every chunk reaches GPU j over the one link switch -> j,
    seven chunks one per slot, the first of them at the switch at slot 1 at the earliest, so
    the last arrives at slot >= 1 + 7 = 8; sending every chunk to the switch in slot 0 and
    chunk (j + k) mod 8 to GPU j in slot k + 1 (k = 1..7) meets it: optimum 8. The rounds must
    undo the padding (the window reaches back past the moved send): the result is verified,
    at most m0 (8 when MTEGCCA is optimal) and never below 8."""
    topo = resolve_topology("star_switch")
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1GB")
    base = get_engine("mteg")(inst, SolveOptions()).schedule
    assert base is not None
    m0 = verify(inst, base).makespan_slots
    assert m0 is not None and m0 >= 8
    padded = _delay_last(inst, base, m0)
    m_pad = verify(inst, padded).makespan_slots
    assert m_pad == m0 + 2
    half = estimate_size(inst, m_pad).nonzeros // 2  # a window of about the last half
    res = solve(inst, "milp", SolveOptions(workers=1, extra={
        "strategy": "lns", "warm_start_schedule": padded, "lns_neighbourhoods": ["slots"],
        "lns_rounds": 2, "lns_window_nonzeros": half,
    }))
    assert res.verified and res.makespan_slots is not None
    assert 8 <= res.makespan_slots <= m0
    steps = [st for st in res.details["steps"] if st.get("question") == "lns slots"]
    assert steps and all(st["from_slot"] > 0 for st in steps)


def _delay_last(inst: Instance, schedule: Schedule, m: int) -> Schedule:
    """The send that arrives last, arriving two slots later (at ``m + 2``:
    its sender still holds the chunk, its link is free after the makespan, and nothing
    forwards from its receiver after the last arrival)."""
    lat, index = inst.latency, inst.topology.link_index
    last = max(schedule.sends, key=lambda s: s.slot + int(lat[index[(s.src, s.dst)]]))
    hop = int(lat[index[(last.src, last.dst)]])
    assert last.slot + hop == m
    rest = tuple(s for s in schedule.sends if s != last)
    return Schedule.of((*rest, Send(m + 2 - hop, last.chunk, last.src, last.dst)))


def test_window_start_fits_the_target_and_slides_back_as_it_grows() -> None:
    """``window_start``: the earliest slot whose window model is under the size target; a
    larger target reaches further back (down to slot 0 when the whole model fits)."""
    inst = _leaf_spine()
    warm = get_engine("mteg")(inst, SolveOptions()).schedule
    assert warm is not None
    m = verify(inst, warm).makespan_slots
    assert m is not None
    whole = estimate_size(inst, m).nonzeros
    small = window_start(inst, warm, m, whole / 4)
    large = window_start(inst, warm, m, whole / 2)
    assert 0 < large < small < m
    assert estimate_size(inst, m, start=start_state(inst, warm, small)).nonzeros <= whole / 4
    assert window_start(inst, warm, m, 2 * whole) == 0
    assert window_start(inst, warm, m, 1) == m - 1  # nothing fits: the last slot alone


def test_start_state_is_validated() -> None:
    inst = _star()
    with pytest.raises(ValidationError, match="slot"):
        StartState(slot=-1, ready={})
    with pytest.raises(ValidationError, match="ready before"):
        StartState(slot=2, ready={((0, 0), 0): 1})
    with pytest.raises(ValidationError, match="below the horizon"):
        build_model(inst, 2, start=start_state(inst, Schedule.of([]), 2))
    topo = inst.topology
    cut = make_instance(topo, inst.collective, "1MB", switch_model="cut-through")
    with pytest.raises(ValidationError, match="store-and-forward"):
        start_state(cut, Schedule.of([]), 1)
    assert "slots" in NEIGHBOURHOODS


def test_warm_start_runs_the_cut_aware_companion_on_chassis(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine of several chassis the warm start is at most the ``cut-aware`` engine's
    makespan, whatever the portfolio's rounds reached (here: the portfolio replaced by a
    stub returning the greedy schedule with its last delivery padded)."""
    topo = resolve_topology("ndv2", chassis=2)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1GB")
    cut = get_engine("cut-aware")(inst, SolveOptions()).schedule
    assert cut is not None
    m_cut = verify(inst, cut).makespan_slots
    greedy = exact.greedy_schedule(inst)
    m_greedy = verify(inst, greedy).makespan_slots
    assert m_greedy is not None
    greedy = _delay_last(inst, greedy, m_greedy)
    assert m_cut is not None and m_cut < (verify(inst, greedy).makespan_slots or 0)

    padded = verify(inst, greedy).makespan_slots

    def stub(*_: Any, **__: Any) -> tuple[Schedule, int | None]:
        return greedy, padded

    monkeypatch.setattr(warmstart, "_heuristic_until_stagnation", stub)
    facts: dict[str, Any] = {}
    schedule, method, _ = warmstart._warm_start(inst, SolveOptions(time_limit=60), 0, facts)
    assert method == "heuristic" and schedule is not None
    assert verify(inst, schedule).makespan_slots == m_cut
    assert facts["companion"] == "cut-aware"
