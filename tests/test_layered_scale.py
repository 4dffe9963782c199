"""The layered constructor's per-layer fast path and the bulk Schedule constructor.

The fast path (:class:`ccplan.heuristics.layered.fastpath._FastPath`) must commit exactly what the
reference per-receiver matching (:func:`~ccplan.heuristics.layered.state._match_per_receiver`)
commits: the tests run both on the same instances and compare the schedules send for send
(and every schedule goes through the independent verifier). The row-by-row assignment rests
on a claim about :func:`scipy.optimize.linear_sum_assignment` (see ``_FastPath``), checked
here on random tie-heavy matrices.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from ccplan.bounds import lower_bound_slots
from ccplan.errors import ValidationError
from ccplan.heuristics.layered import LayeredOptions, construct, fastpath, layered_schedule, state
from ccplan.heuristics.layered import rows as layered_rows
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_distances, latency_matrix
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify


def _cases() -> list[tuple[str, Instance, LayeredOptions]]:
    out: list[tuple[str, Instance, LayeredOptions]] = []
    for name, topo in (
        ("torus6", bt.torus2d(6, 6)),
        ("mesh5", bt.mesh2d(5, 5)),
        ("ndv2-3", bt.ndv2(3)),
        ("dgx2-2", bt.dgx2(2)),
        ("amd-2", bt.amd(2)),
        ("leaf-spine", bt.leaf_spine(4, 4, 2)),
        ("fat-tree-4", bt.fat_tree(4)),
        ("leaf-spine hub", bt.leaf_spine(2, 34, 1)),  # 35-link switches: the numpy count updates
    ):
        out.append(
            (
                f"{name} allgather",
                make_instance(topo, make_collective("allgather", topo), "1GB"),
                LayeredOptions(),
            )
        )
    t = bt.ndv2(2)
    out += [
        ("ndv2-2 64KB C=2", make_instance(t, make_collective("allgather", t, 2), "64KB"), LayeredOptions()),
        (
            "ndv2-2 capacity 2",
            make_instance(t, make_collective("allgather", t, 2), "1GB", capacity=2),
            LayeredOptions(),
        ),
        (
            "ndv2-2 outages",
            make_instance(
                t, make_collective("allgather", t), "1GB", outages=[(0, 1, 2), (1, 0, 3), (0, 1, 5)]
            ),
            LayeredOptions(),
        ),
        ("ndv2-2 gather", make_instance(t, make_collective("gather", t, root=5), "1GB"), LayeredOptions()),
        (
            "ndv2-2 broadcast",
            make_instance(t, make_collective("broadcast", t, 4, root=3), "1GB"),
            LayeredOptions(),
        ),
        (
            "torus6 slack 1 seed 3",
            make_instance(bt.torus2d(6, 6), make_collective("allgather", bt.torus2d(6, 6)), "1GB"),
            LayeredOptions(slack=1, seed=3),
        ),
    ]
    return out


@pytest.mark.parametrize(("name", "inst", "opts"), _cases(), ids=[c[0] for c in _cases()])
def test_fast_path_equals_reference_matching(
    name: str, inst: Instance, opts: LayeredOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same sends as the per-receiver reference, and the verifier accepts them."""
    fast = layered_schedule(inst, opts)
    monkeypatch.setattr(construct, "_REFERENCE_LAYER", True)
    ref = layered_schedule(inst, opts)
    assert fast.sends == ref.sends, name
    report = verify(inst, fast)
    assert report.ok, report.violations[:3]


@pytest.mark.parametrize(("keep", "block"), [(1, 10**9), (2, 10**9), (3, 3)])
@pytest.mark.parametrize(
    ("name", "inst", "opts"),
    [
        c
        for c in _cases()
        if c[0] in ("torus6 allgather", "mesh5 allgather", "ndv2-3 allgather", "ndv2-2 64KB C=2")
    ],
    ids=["torus6", "mesh5", "ndv2-3", "ndv2-2 C=2"],
)
def test_fast_path_with_few_kept_pairs_equals_reference(
    name: str,
    inst: Instance,
    opts: LayeredOptions,
    keep: int,
    block: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same with at most ``keep`` kept pairs per link, in one block per layer (scores a
    whole layer old at the receiver's turn: many kept pairs have fallen) or in blocks of 3
    in-links: the cut lists (a floor at the last kept pair, ties with it left out) are
    exercised on every receiver and must not change a send. The torus and the mesh run on the
    blocks here (``_COMPILED`` off), not on the compiled rule, which keeps no lists."""
    monkeypatch.setattr(construct, "_COMPILED", False)
    monkeypatch.setattr(fastpath, "_KEEP", keep)
    monkeypatch.setattr(fastpath, "_BLOCK_LINKS", block)
    fast = layered_schedule(inst, opts)
    monkeypatch.setattr(construct, "_REFERENCE_LAYER", True)
    ref = layered_schedule(inst, opts)
    assert fast.sends == ref.sends, name
    assert verify(inst, fast).ok


def _uniform_cases() -> list[tuple[str, Instance]]:
    """Instances whose receivers are all uniform (every in-link one latency, few in-links, no
    relay), so the compiled rule applies: torus and mesh, C = 1 and 2, capacity 2 (two units per
    link: rows that take two chunks), a broadcast, 15 in-links (fully connected 16: the
    exclusive term clips at 9 rivals), three-slot windows (sends that reserve their links:
    committed one by one, not in compiled runs), slack 1 and a shuffled rank."""
    torus, mesh, full = bt.torus2d(6, 6), bt.mesh2d(5, 5), bt.fully_connected(16)
    slot = make_instance(torus, make_collective("allgather", torus), "1GB").tau_us
    return [
        ("torus6", make_instance(torus, make_collective("allgather", torus), "1GB")),
        ("mesh5", make_instance(mesh, make_collective("allgather", mesh), "1GB")),
        ("torus6 64KB C=2", make_instance(torus, make_collective("allgather", torus, 2), "64KB")),
        (
            "torus6 capacity 2",
            make_instance(torus, make_collective("allgather", torus, 2), "1GB", capacity=2),
        ),
        ("mesh5 broadcast", make_instance(mesh, make_collective("broadcast", mesh, 4, root=7), "1GB")),
        ("fully connected 16 C=2", make_instance(full, make_collective("allgather", full, 2), "1GB")),
        # three-slot windows: the sends reserve their links, so they are committed one by one
        (
            "torus6 occupancy 3",
            make_instance(
                torus, make_collective("allgather", torus), "1GB", tau_rule="explicit", tau_us=slot / 2.5
            ),
        ),
    ]


@pytest.mark.parametrize(("name", "inst"), _uniform_cases(), ids=[c[0] for c in _uniform_cases()])
@pytest.mark.parametrize("slack_seed", [(0, None), (1, 3)], ids=["plain", "slack1 seed3"])
def test_compiled_path_equals_reference_and_blocks(
    name: str,
    inst: Instance,
    slack_seed: tuple[int, int | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled row-by-row rule (``layered_jit``) commits what the per-receiver reference
    commits, and what the blocks commit on the same instance. Each run must take its path:
    the compiled one on every layer with a free link, the blocks not at all, and the other
    way round."""
    opts = LayeredOptions(slack=slack_seed[0], seed=slack_seed[1])
    calls = {"compiled": 0, "block": 0}
    compiled_layer, block_layer = fastpath._FastPath.compiled_layer, fastpath._FastPath.layer

    def count(kind: str, fn):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls[kind] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(fastpath._FastPath, "compiled_layer", count("compiled", compiled_layer))
    monkeypatch.setattr(fastpath._FastPath, "layer", count("block", block_layer))
    fast = layered_schedule(inst, opts)
    assert calls["compiled"] > 0 and calls["block"] == 0
    monkeypatch.setattr(construct, "_COMPILED", False)
    blocks = layered_schedule(inst, opts)
    assert calls["block"] > 0
    monkeypatch.setattr(construct, "_REFERENCE_LAYER", True)
    ref = layered_schedule(inst, opts)
    assert fast.sends == ref.sends, name
    assert blocks.sends == ref.sends, name
    assert verify(inst, fast).ok


def test_compiled_path_falls_back_to_the_full_assignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torus 6x6 AllGather has receivers whose row-by-row rule fails (two in-links whose
    only best chunk is the same): the compiled run must stop there and hand them to the full
    assignment (its matrix, then scipy); the schedule is the reference's (test above)."""
    from ccplan.heuristics import layered_jit

    torus = bt.torus2d(6, 6)
    inst = make_instance(torus, make_collective("allgather", torus), "1GB")
    seen = []
    original = layered_jit.assignment_matrix

    def spy(*args):  # type: ignore[no-untyped-def]
        seen.append(1)
        return original(*args)

    monkeypatch.setattr(layered_jit, "assignment_matrix", spy)
    layered_schedule(inst)
    assert seen


def test_assignment_matrix_is_the_matrix_of_assign() -> None:
    """``layered_jit.assignment_matrix`` builds the matrix ``_assign`` gives scipy (rows: link
    units in order, columns: offered chunks ascending, the pair's weight or 0), compared on
    random candidate bits, holdings and scores with one and two units per link."""
    from ccplan.heuristics.layered_jit import assignment_matrix

    rng = np.random.default_rng(7)
    for trial in range(200):
        n_chunks = int(rng.integers(1, 40))
        n_links = int(rng.integers(1, 6))
        offered = rng.random((n_links, n_chunks)) < rng.uniform(0.05, 0.9)
        offered[:, int(rng.integers(n_chunks))] = True  # every link offers something
        cand = np.packbits(offered, axis=1, bitorder="little")
        in_held = rng.integers(1, 5, size=(3, n_chunks)).astype(np.uint8)
        score = rng.integers(0, 3, size=n_chunks).astype(np.int64) * 10**4
        units = rng.integers(1, 3, size=n_links).astype(np.int64) if trial % 2 else np.ones(n_links, np.int64)
        p = int(rng.integers(3))
        links = np.arange(n_links, dtype=np.intp)
        mat, cols, row_link = assignment_matrix(cand, links, units, p, in_held, state._FIXED_BY_HELD, score)
        row, chunk = np.nonzero(offered)
        w = state._FIXED[in_held[p, chunk].astype(np.intp) - 1] + score[chunk]
        assert np.array_equal(cols, np.unique(chunk))
        rows_of = [i for i in range(n_links) for _ in range(int(units[i]))]
        assert row_link.tolist() == rows_of
        expect = np.zeros((n_links, len(cols)), dtype=np.int64)
        expect[row, np.searchsorted(cols, chunk)] = w
        assert np.array_equal(mat, expect[rows_of])


@pytest.mark.parametrize("mask_from", [256, 0], ids=["columns sorted", "columns by mask"])
def test_rows_first_matches_linear_sum_assignment(mask_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever the row-by-row rule answers, scipy's assignment picks the same columns.

    Random receivers (1-4 links, 1-2 units each, weights from a few values so ties abound):
    the rule takes, row by row, the lowest unassigned chunk of the row's largest weight; on the
    matrix :func:`_match_receiver` builds, scipy must return the same rows and columns. The
    full assignment ``_assign`` must equal scipy on that matrix with either way of finding its
    columns (by sorting, or by a mask over chunk ids as above ``_ASSIGN_MASK_FROM`` pairs).
    """
    monkeypatch.setattr(layered_rows, "_ASSIGN_MASK_FROM", mask_from)
    rng = np.random.default_rng(7)
    answered = 0
    for _ in range(3000):
        n_links = int(rng.integers(1, 5))
        units = [int(u) for u in rng.integers(1, 3, n_links)]
        chunk_lists = [
            np.sort(rng.choice(12, int(rng.integers(1, 7)), replace=False)) for _ in range(n_links)
        ]
        counts = np.array([len(c) for c in chunk_lists])
        chunks = np.concatenate(chunk_lists)
        w = 10**9 + rng.integers(0, 3, len(chunks)) * 10**4
        rel = np.concatenate(([0], np.cumsum(counts)[:-1]))
        found = layered_rows._rows_first(w, chunks, rel, counts, units)
        cols = np.unique(chunks)
        mat = np.zeros((n_links, len(cols)), dtype=np.int64)
        mat[np.repeat(np.arange(n_links), counts), np.searchsorted(cols, chunks)] = w
        mat = mat[np.repeat(np.arange(n_links), units)]
        rows, colsel = linear_sum_assignment(mat, maximize=True)
        row_link = np.repeat(np.arange(n_links), units)
        full = [(int(row_link[r]), int(cols[k])) for r, k in zip(rows, colsel, strict=True) if mat[r, k] > 0]
        assert layered_rows._assign(w, chunks, counts, units, list(range(n_links))) == full
        if found is not None:
            answered += 1
            assert found == full
    assert answered > 500  # the rule must answer often enough to matter


def test_distance_matrix_equals_dijkstra() -> None:
    """The compiled all-pairs latencies equal the plain Dijkstra's (parallel links included)."""
    for topo in (bt.ndv2(2), bt.amd(1), bt.leaf_spine(2, 4, 2)):
        inst = make_instance(topo, make_collective("allgather", topo), "1GB")
        pos = topo.node_index
        dmat = latency_matrix(topo, inst.latency)
        lat = [int(x) for x in inst.latency]
        for s in topo.node_ids:
            row = latency_distances(topo, lat, [s])
            for v in topo.node_ids:
                assert dmat[pos[s], pos[v]] == row.get(v, np.inf)


def test_from_columns_equals_schedule_of_sends() -> None:
    """The bulk constructor sorts and builds exactly what Schedule(sends) builds."""
    rng = np.random.default_rng(1)
    n = 500
    cols = {k: rng.integers(0, 6, n) for k in ("slot", "chunk_source", "chunk_index", "src", "dst")}
    bulk = Schedule.from_columns(**cols, method="m")
    plain = Schedule(
        tuple(
            Send(slot=int(t), chunk=(int(a), int(b)), src=int(u), dst=int(v))
            for t, a, b, u, v in zip(*cols.values(), strict=True)
        ),
        method="m",
    )
    assert bulk == plain and bulk.method == "m" and bulk.sends == plain.sends
    assert all(isinstance(s, Send) for s in bulk.sends)
    empty = Schedule.from_columns(**{k: np.zeros(0, dtype=np.int64) for k in cols})
    assert len(empty) == 0


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [("slot", -1, "must be >= 0"), ("dst", 1.5, "must hold integers")],
)
def test_from_columns_rejects_bad_columns(column: str, value: float, message: str) -> None:
    cols: dict[str, np.ndarray] = {
        k: np.arange(3) for k in ("slot", "chunk_source", "chunk_index", "src", "dst")
    }
    cols[column] = np.array([0, value, 2])
    with pytest.raises(ValidationError, match=message):
        Schedule.from_columns(**cols)
    cols[column] = np.arange(2)
    with pytest.raises(ValidationError, match="must be one-dimensional with"):
        Schedule.from_columns(**cols)


_DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["two_rings_9_switch", "two_rings_9_switch_oneway"])
def test_block_ending_in_a_switch_keeps_each_links_own_pairs(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rings of 9 GPUs at 200 GB/s (both ways, or one way), every GPU linked to one
    switch at 16 GB/s (id 18, the last node): the switch is a receiver of the general code,
    the last of every layer's only block, so the block's links end with links without fast
    pairs. Each link's largest start weight was taken with the starts of those links
    clipped to the last pair, which cut that pair off the last GPU's link before them; a pair
    of it above the floor then sorted into another link's kept pairs and was sent on that
    link: a duplicate receive (both ways), or, after such a send, candidate counts that no
    longer matched the pairs and an IndexError (one way). The fast path must commit what the
    per-receiver reference commits, the verifier must accept it and its makespan is at least
    the lower bound."""
    topo = bt.resolve_topology(_DATA / f"{name}.json")
    inst = make_instance(topo, make_collective("allgather", topo, 8), "1MB")
    fast = layered_schedule(inst)
    report = verify(inst, fast)
    assert report.ok, report.violations[:3]
    assert report.makespan_slots is not None and report.makespan_slots >= lower_bound_slots(inst)
    monkeypatch.setattr(construct, "_REFERENCE_LAYER", True)
    assert fast.sends == layered_schedule(inst).sends
