"""The flow bound's symmetry shortcut (``ccplan.bounds.symmetry._Symmetry``) never changes a value.

A destination's max-flow is skipped when a checked automorphism maps a computed destination
onto it. The bound with the shortcut must equal the bound with every flow computed
(``ccplan.bounds.slots.SYMMETRY = False``) on every instance, symmetric or not; the checks must reject
permutations that are not automorphisms of the flow networks, and without them the
shortcut would give wrong values (so the comparison can fail).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import ccplan.bounds as bounds
import ccplan.bounds.movement as movement
import ccplan.bounds.search as search
import ccplan.bounds.slots as slots
import ccplan.bounds.symmetry as sym
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance


def _instances() -> Iterator[tuple[str, Instance]]:
    """Symmetric machines (torus, NDv2, DGX2, AMD, fat-tree, leaf-spine, hypercube), ones
    with less symmetry (mesh, ring with a chord via outages, rooted collectives) and every
    option the flows read (cut-through, capacity 2, outages, 64 KB, C = 2)."""
    topologies = {
        "torus5x5": bt.torus2d(5, 5),
        "torus4x6": bt.torus2d(4, 6),
        "mesh4x5": bt.mesh2d(4, 5),
        "ndv2-4": bt.ndv2(4),
        "dgx2-3": bt.dgx2(3),
        "amd-2": bt.amd(2),
        "fat_tree4": bt.fat_tree(4),
        "leaf_spine": bt.leaf_spine(3, 4, 2),
        "hypercube3": bt.hypercube(3),
        "ring6": bt.ring(6),
        "dgx1": bt.dgx1(),
        "star5": bt.star_switch(5),
    }
    variants: list[dict[str, object]] = [
        {},
        {"switch_model": "cut-through"},
        {"capacity": 2},
        {"size": "64KB"},
        {"chunks": 2},
        {"outage": True},
    ]
    for (name, topo), kind, extra in itertools.product(
        topologies.items(), ("allgather", "alltoall", "broadcast", "gather", "scatter"), variants
    ):
        kw = dict(extra)
        size = str(kw.pop("size", "1GB"))
        chunks = int(kw.pop("chunks", 1))  # type: ignore[call-overload]
        if kind == "alltoall" and topo.num_nodes > 20 and (chunks > 1 or kw):
            continue  # slow and adds nothing
        if kw.pop("outage", False):
            first = topo.links[0]
            kw["outages"] = [(first.src, first.dst, 1), (first.src, first.dst, 4)]
        coll = make_collective(kind, topo, chunks=chunks, root=topo.gpus[1])
        yield f"{name}/{kind}/{extra}", make_instance(topo, coll, size, **kw)  # type: ignore[arg-type]


def _bound(inst: Instance, symmetry: bool, windows: bool = True) -> int:
    inst.__dict__.pop("_ccplan_lower_bound_slots", None)
    old = slots.SYMMETRY
    slots.SYMMETRY = symmetry
    try:
        return bounds.lower_bound_slots(inst, time_windows=windows)
    finally:
        slots.SYMMETRY = old
        inst.__dict__.pop("_ccplan_lower_bound_slots", None)


@pytest.fixture
def skips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the destinations skipped by symmetry."""
    seen: list[int] = []
    real = sym._Symmetry.covered

    def spy(self: sym._Symmetry, w: int, flow_seconds: float) -> bool:
        hit = real(self, w, flow_seconds)
        seen.extend([w] if hit else [])
        return hit

    monkeypatch.setattr(sym._Symmetry, "covered", spy)
    return seen


def test_same_bound_with_and_without_symmetry(skips: list[int]) -> None:
    """Equal slot bounds, with and without time windows, on 340 instances; the shortcut
    skipped flows on many of them (else this test would check nothing)."""
    count = 0
    skipped_on = 0
    for name, inst in _instances():
        before = len(skips)
        for windows in (True, False):
            assert _bound(inst, True, windows) == _bound(inst, False, windows), (name, windows)
        skipped_on += len(skips) > before
        count += 1
    assert count >= 300
    assert skipped_on >= 100 and len(skips) >= 2000


@pytest.mark.parametrize("rows, cols", [(8, 8), (12, 10), (16, 16)])
def test_torus_skips_nearly_every_flow(skips: list[int], rows: int, cols: int) -> None:
    """On a torus one translation is found and checked; the bound is the same and most
    destinations need no max-flow."""
    topo = bt.torus2d(rows, cols)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    assert _bound(inst, True) == _bound(inst, False)
    n = rows * cols
    assert len(skips) >= n // 2


def _prepared(inst: Instance) -> sym._Symmetry:
    prob = movement._movement_of(inst)
    dist = movement._distances(prob, prob.lat)
    hdist = movement._holder_distances(prob, dist)
    views = {v.v: v for v in movement._dest_views(prob, dist, hdist, True)}
    return sym._Symmetry(prob, views)


def test_checks_reject_what_is_not_an_automorphism() -> None:
    """A 3x3 torus: the rotation ``(r, c) -> (r, c + 1)`` is a link automorphism and carries
    AllGather's destination 0 to 1 (not to 2); under Broadcast from GPU 0 it carries no
    destination to another (GPU 0 holds everything, GPU 1 nothing, so the sources differ).
    Swapping GPUs 0 and 4 is no link automorphism (0 -> 1 would become 4 -> 1, no link),
    nor is a map that is no permutation, and with an outage on one link the rotation no
    longer keeps the link classes."""
    topo = bt.torus2d(3, 3)
    ag = _prepared(make_instance(topo, make_collective("allgather", topo), "1GB"))
    rotate = np.array([(r * 3 + (c + 1) % 3) for r in range(3) for c in range(3)])
    assert ag._is_link_automorphism(rotate)
    assert ag._carries_view(rotate, 0, 1)
    assert not ag._carries_view(rotate, 0, 2)
    swap = np.arange(9)
    swap[[0, 4]] = [4, 0]
    assert not ag._is_link_automorphism(swap)
    assert not ag._is_link_automorphism(np.array([1, 1, 2, 3, 4, 5, 6, 7, 8]))
    bc = _prepared(make_instance(topo, make_collective("broadcast", topo, root=0), "1GB"))
    assert bc._is_link_automorphism(rotate) and not bc._carries_view(rotate, 3, 4)
    link = topo.links[0]
    cut = _prepared(
        make_instance(topo, make_collective("allgather", topo), "1GB", outages=[(link.src, link.dst, 2)])
    )
    assert not cut._is_link_automorphism(rotate)


def _flow_values(inst: Instance) -> Callable[[int], int]:
    """Destination ``v``'s own flow bound (the smallest ``D`` its max-flow reaches ``|K_v|``),
    as a function of ``v``; the flow networks are prepared once per instance and each value
    computed once (a root is compared with up to 6 destinations)."""
    prob = movement._movement_of(inst)
    dist = movement._distances(prob, prob.lat)
    hdist = movement._holder_distances(prob, dist)
    views = {w.v: w for w in movement._dest_views(prob, dist, hdist, True)}

    @functools.cache
    def value(v: int) -> int:
        view = views[v]
        return search._min_feasible(lambda D: slots._flow_ok(prob, search._SlotCapacity(prob), view, D), 0)

    return value


def _skipped_pairs(inst: Instance, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """``(root, w)`` for every destination ``w`` the shortcut skipped."""
    pairs: list[tuple[int, int]] = []
    real = sym._Symmetry.covered

    def spy(self: sym._Symmetry, w: int, flow_seconds: float) -> bool:
        hit = real(self, w, flow_seconds)
        if hit:
            pairs.append((int(self.root_of[w]), w))
        return hit

    with monkeypatch.context() as m:
        m.setattr(sym._Symmetry, "covered", spy)
        _bound(inst, True)
    return pairs


def _mismatches(monkeypatch: pytest.MonkeyPatch, enough: int | None = None) -> list[tuple[str, int, int]]:
    """Skipped destinations whose flow bound differs from their root's, on a third of the
    instances (up to 6 per instance); stops once ``enough`` are found."""
    out = []
    for name, inst in itertools.islice(_instances(), 0, None, 3):
        pairs = _skipped_pairs(inst, monkeypatch)[:6]
        if not pairs:
            continue
        flow_value = _flow_values(inst)
        for root, w in pairs:
            if flow_value(root) != flow_value(w):
                out.append((name, root, w))
                if enough is not None and len(out) >= enough:
                    return out
    return out


def test_skipped_destinations_have_the_roots_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stronger than equal maxima: every skipped destination's own flow bound equals that of
    the computed destination it was mapped from (up to 6 per instance, a third of the
    instances)."""
    assert _mismatches(monkeypatch) == []


def _transposition(self: sym._Symmetry, r: int, w: int, how: str) -> np.ndarray:
    """A proposer that ignores the graph: swap ``r`` and ``w``."""
    sigma = np.arange(self.n)
    sigma[[r, w]] = [w, r]
    return sigma


def test_checks_stop_a_careless_proposer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Proposals that ignore the graph (swap the two destinations, whatever their colour)
    pass the checks only where they are automorphisms: still no skipped destination with
    another value."""
    monkeypatch.setattr(sym._Symmetry, "_propose", _transposition)
    monkeypatch.setattr(sym._Symmetry, "_base", lambda self: np.zeros(self.n, dtype=np.int64))
    assert _mismatches(monkeypatch) == []


def test_without_the_checks_values_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power: the careless proposer with both checks switched off (every proposal used,
    every reached destination taken as covered) and every node in one colour skips
    destinations whose own flow bound differs from their root's, so the tests above can
    fail."""
    monkeypatch.setattr(sym._Symmetry, "_propose", _transposition)
    monkeypatch.setattr(sym._Symmetry, "_is_link_automorphism", lambda self, sigma: True)
    monkeypatch.setattr(sym._Symmetry, "_carries_view", lambda self, sigma, r, w: True)
    monkeypatch.setattr(sym._Symmetry, "_base", lambda self: np.zeros(self.n, dtype=np.int64))
    assert len(_mismatches(monkeypatch, enough=10)) >= 10
