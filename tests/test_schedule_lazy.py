"""Schedules kept as columns (``Schedule.from_columns``) and the cheap-first bound.

A schedule built from columns must behave exactly like ``Schedule(sends)``: same sends once
read, length, last slot, equality both ways, pickling, JSON and the columnar file; its Send
objects are made only when ``.sends`` is read. ``lower_bound_slots(stop_at=...)`` must give the
full bound whenever ``stop_at`` is a valid schedule's makespan (or the bound itself).
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import numpy as np
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.bounds.movement import _movement_of
from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError, ValidationError
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.pipeline import get_engine
from ccplan.schedule import load_schedule, save_schedule
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

NAMES = ("slot", "chunk_source", "chunk_index", "src", "dst")


def _random_columns(seed: int, n: int = 400) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.integers(0, 7, n) for k in NAMES}


def _plain(cols: dict[str, np.ndarray], reduce: np.ndarray | None = None, method: str = "") -> Schedule:
    red = np.zeros(len(cols["slot"]), dtype=bool) if reduce is None else reduce
    return Schedule(
        tuple(
            Send(slot=int(t), chunk=(int(a), int(b)), src=int(u), dst=int(v), reduce=bool(r))
            for t, a, b, u, v, r in zip(*(cols[k] for k in NAMES), red, strict=True)
        ),
        method=method,
    )


@pytest.mark.parametrize("seed", range(5))
def test_lazy_schedule_equals_the_schedule_of_its_sends(seed: int) -> None:
    cols = _random_columns(seed)
    red = np.random.default_rng(seed + 100).random(len(cols["slot"])) < 0.3
    lazy = Schedule.from_columns(**cols, reduce=red, method="m")
    plain = _plain(cols, red, "m")
    assert "sends" not in lazy.__dict__
    assert len(lazy) == len(plain) and lazy.last_slot == plain.last_slot
    assert lazy == plain and plain == lazy and hash(lazy) == hash(plain)
    assert "sends" not in lazy.__dict__  # none of the above built Send objects
    assert lazy != Schedule.from_columns(**cols, reduce=red, method="other")
    other = dict(cols, slot=cols["slot"] + 1)
    assert lazy != Schedule.from_columns(**other, reduce=red, method="m")
    assert lazy.sends == plain.sends  # now built, in Send order
    assert all(isinstance(s, Send) for s in lazy.sends)
    for name in NAMES:
        assert np.array_equal(lazy.columns()[name], plain.columns()[name])


def test_lazy_schedule_pickles_and_does_not_alias_the_callers_arrays() -> None:
    cols = _random_columns(7)
    before = {k: v.copy() for k, v in cols.items()}
    lazy = Schedule.from_columns(**cols)
    cols["slot"][0] += 100  # the caller's array is the caller's
    assert cols["slot"].flags.writeable
    assert np.array_equal(lazy.columns()["slot"], np.sort(before["slot"]))  # slot is the first key
    assert lazy == _plain(before)
    with pytest.raises(ValueError):
        lazy.columns()["slot"][0] = 1  # kept columns are read-only
    again = pickle.loads(pickle.dumps(lazy))
    assert again == lazy and "sends" not in again.__dict__ and again.sends == _plain(before).sends
    empty = Schedule.from_columns(**{k: np.zeros(0, dtype=np.int64) for k in NAMES})
    assert len(empty) == 0 and empty.last_slot == -1 and empty == Schedule(())


def test_from_columns_rejects_a_bad_reduce_column() -> None:
    cols = _random_columns(1, 3)
    with pytest.raises(ValidationError, match="'reduce' must hold booleans"):
        Schedule.from_columns(**cols, reduce=np.array([0, 1, 0]))
    with pytest.raises(ValidationError, match="'reduce' must be one-dimensional with 3"):
        Schedule.from_columns(**cols, reduce=np.zeros(2, dtype=bool))


def test_columnar_file_round_trip_keeps_columns(tmp_path: Path) -> None:
    """Save from columns, load into columns, unsorted rows in a file sorted on load."""
    topo = bt.torus2d(3, 3)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    sched = get_engine("layered")(inst, SolveOptions()).schedule
    assert sched is not None
    cols = {k: np.asarray(v) for k, v in sched.columns().items() if k != "reduce"}
    lazy = Schedule.from_columns(**cols, method=sched.method)
    path = tmp_path / "run.npz"
    save_schedule(path, inst, lazy)
    assert "sends" not in lazy.__dict__
    inst2, loaded = load_schedule(path, check_budget=False)
    assert "sends" not in loaded.__dict__ and loaded == sched and inst2 == inst
    assert verify(inst2, loaded).ok and "sends" not in loaded.__dict__
    # a file whose rows are not in order loads as the same schedule
    perm = np.random.default_rng(3).permutation(len(sched))
    shuffled = Schedule.from_columns(**{k: v[perm] for k, v in cols.items()}, method=sched.method)
    assert shuffled == sched and shuffled.sends == sched.sends
    assert lazy.to_dict(inst) == sched.to_dict(inst)


def _bound_instances() -> list[Instance]:
    topologies = [bt.dgx1(), bt.ndv2(2), bt.dgx2(2), bt.ring(6), bt.torus2d(3, 4), bt.mesh2d(3, 3),
                  bt.star_switch(5), bt.leaf_spine(2, 3, 2), bt.fat_tree(4), bt.hypercube(3)]
    out = []
    for topo, kind, extra in itertools.product(
        topologies,
        ("allgather", "alltoall", "broadcast", "gather", "scatter"),
        ({}, {"switch_model": "cut-through"}, {"capacity": 2}, {"size": "64KB"}),
    ):
        kw = dict(extra)
        size = str(kw.pop("size", "1GB"))
        out.append(make_instance(topo, make_collective(kind, topo), size, **kw))  # type: ignore[arg-type]
    return out


def _fresh(inst: Instance) -> Instance:
    """The same instance without the bound memo."""
    inst.__dict__.pop("_ccplan_lower_bound_slots", None)
    return inst


def test_stop_at_gives_the_full_bound() -> None:
    """At a valid makespan, at the bound itself and above it the cheap-first bound is the full
    bound; below it, a valid bound of at least ``stop_at``. Checked on 200 instances (10
    topologies, 5 collectives, both switch models, capacity 2, 64 KB)."""
    early = 0
    for k, inst in enumerate(_bound_instances()):
        full = lower_bound_slots(_fresh(inst))
        assert lower_bound_slots(inst, stop_at=0) == full  # a full answer is remembered
        assert lower_bound_slots(_fresh(inst), stop_at=full) == full
        if k % 3 == 0:
            assert lower_bound_slots(_fresh(inst), stop_at=full + 5) == full
            low = lower_bound_slots(_fresh(inst), stop_at=max(full - 3, 0))
            assert max(full - 3, 0) <= low <= full
            assert lower_bound_slots(inst) == full  # a partial answer is not taken for it
        if inst.collective.kind == "alltoall" and inst.topology.num_nodes > 12:
            continue  # mteg takes seconds there
        try:
            sched = get_engine("mteg")(inst, SolveOptions(time_limit=10)).schedule
        except CCPlanError:
            sched = None
        if sched is not None:
            makespan = verify(inst, sched).makespan_slots
            assert makespan is not None
            assert lower_bound_slots(_fresh(inst), stop_at=makespan) == full
            early += makespan == full
    assert early >= 20  # schedules meeting the bound, where the cheap parts decide


def test_needs_match_the_collectives_demands() -> None:
    """K_v as arrays equals the demand list, destination order included (it decides which
    unreachable demand an error names)."""
    for inst in _bound_instances()[::4]:
        prob = _movement_of(inst)
        index = inst.topology.node_index
        cidx = {c: i for i, c in enumerate(prob.chunk_names)}
        expected: dict[int, list[int]] = {}
        for chunk, v in inst.collective.demands:
            expected.setdefault(index[v], []).append(cidx[chunk])
        assert list(prob.needs) == list(expected)
        assert all(prob.needs[v].tolist() == cs for v, cs in expected.items())


def test_huge_values_in_columns_build_sends_without_a_table() -> None:
    """Send objects of a column schedule naming node 10**12 (e.g. a bad file) are built
    without a lookup table as long as that value."""
    lazy = Schedule.from_columns(
        slot=np.array([0, 1]), chunk_source=np.array([0, 0]), chunk_index=np.array([0, 0]),
        src=np.array([0, 10**13]), dst=np.array([10**12, 1]),
    )
    assert lazy.sends == (Send(0, (0, 0), 0, 10**12), Send(1, (0, 0), 10**13, 1))
    topo = bt.torus2d(3, 3)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    assert [v.kind for v in verify(inst, lazy).violations[:2]] == ["no-link", "no-link"]


def test_last_arrival_and_renamed_keep_what_the_schedule_is() -> None:
    """``last_arrival`` is the verifier's makespan for a valid data-movement schedule (every
    wanted chunk's last receipt is a send landing); ``renamed`` keeps the sends, and a schedule
    built from columns stays columns (no Send objects made)."""
    from ccplan.instances.builtin import resolve_topology
    from ccplan.instances.catalog import make_collective
    from ccplan.instances.instance import make_instance
    from ccplan.pipeline import solve
    from ccplan.schedule.core import Schedule
    from ccplan.schedule.verify import verify

    topo = resolve_topology("dgx1")
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "1MB")
    sched = solve(inst, "ring").schedule
    assert sched is not None
    assert sched.last_arrival(inst) == verify(inst, sched).makespan_slots
    cols = sched.columns()
    kept = Schedule.from_columns(**{k: cols[k] for k in
                                    ("slot", "chunk_source", "chunk_index", "src", "dst", "reduce")},
                                 method="x")
    again = kept.renamed("y")
    assert again.method == "y" and "sends" not in again.__dict__
    assert all(np.array_equal(again.columns()[k], cols[k]) for k in cols)
    assert sched.renamed("z").sends == sched.sends
