"""Proofs and bounds against an independent exact model (``tests/independent_exact.py``).

Two properties, on small random instances of every data-movement collective, both switch
models, single port on and off, both tau rules and C = 1 or 2:

1. An outage that no schedule of the optimal makespan can meet (a slot at or after the
   optimum ``D*`` plus the longest occupancy, on any link, also far beyond any horizon) never
   changes what ``milp`` proves, whatever horizon it is given and with or without the warm
   start: ``optimal`` means the independent optimum; a horizon below it is never ``optimal``.
   Outages at ``H + 1`` and ``H + 2`` for the horizons ``D*`` and ``D* + 1`` are tried on every
   link; where such a slot is still within reach of a cut-through hop (``L = delta < l``
   occupies its link past the makespan) the expected optimum is the independent model's.
   (A flat key ``e * (H + 1) + t`` for the blocked start slots once let an outage beyond the
   horizon close the first slots of the next link and "prove" a makespan that was not the
   optimum.)
2. With outages anywhere, every lower bound a result reports (and ``lower_bound_slots``) is at
   most the independent optimum, every ``optimal`` equals it, and every schedule verifies and
   is no shorter than it.
"""

from __future__ import annotations

import random

import pytest

import ccplan
from ccplan.bounds import lower_bound_slots
from ccplan.errors import CCPlanError
from ccplan.instances.instance import Instance
from tests.independent_exact import optimum

_KINDS = ("allgather", "broadcast", "scatter", "gather", "alltoall", "multicast")


def _random_dict(seed: int) -> dict:
    """A small instance: 2-3 GPUs, maybe one switch, a GPU ring (direct or through the switch)
    so that every collective is feasible, plus random extra links, bandwidths and alphas."""
    rng = random.Random(seed)
    n = rng.randint(2, 3)
    sw = n if rng.random() < 0.5 else None
    pairs: set[tuple[int, int]] = set()
    for i in range(n):
        a, b = i, (i + 1) % n
        if a == b:
            continue
        if sw is not None and rng.random() < 0.5:
            pairs |= {(a, sw), (sw, b)}
        else:
            pairs.add((a, b))
    nodes = list(range(n)) + ([sw] if sw is not None else [])
    for a in nodes:
        for b in nodes:
            if a != b and rng.random() < 0.3:
                pairs.add((a, b))
    links = [{"src": a, "dst": b, "bandwidth_GBps": rng.choice([25.0, 50.0, 100.0]),
              "alpha_us": rng.choice([0.0, 0.0, 0.2, 0.9])} for a, b in sorted(pairs)]
    kind = rng.choice(_KINDS)
    coll: dict = {"kind": kind, "chunks": rng.choice([1, 2])}
    if kind in ("broadcast", "scatter", "gather", "multicast"):
        coll["root"] = rng.randrange(n)
    if kind == "multicast":
        coll["dests"] = [v for v in range(n) if v != coll["root"]][:1]
    return {
        "topology": {"name": f"r{seed}", "nodes": [{"id": v, "kind": "switch" if v == sw else "gpu"}
                                                   for v in nodes], "links": links},
        "collective": coll,
        "size_bytes": rng.choice([50e3, 150e3]),
        "tau_rule": rng.choice(["fastest", "fastest", "slowest"]),
        "single_port": rng.random() < 0.3,
        "switch_model": rng.choice(["store-and-forward", "cut-through"]) if sw is not None
        else "store-and-forward",
    }


def _instances(count: int, base: int) -> list[tuple[int, dict]]:
    out: list[tuple[int, dict]] = []
    seed = base
    while len(out) < count:
        d = _random_dict(seed)
        try:
            Instance.from_dict(d)
        except CCPlanError:
            seed += 1
            continue
        out.append((seed, d))
        seed += 1
    return out


def _check(result: ccplan.Result, truth: int, horizon: int | None = None) -> None:
    assert result.lower_bound_slots <= truth, (result.lower_bound_slots, truth)
    if result.status == "optimal":
        assert result.makespan_slots == truth
    if result.schedule is not None:
        assert result.verified
        assert result.makespan_slots is not None and result.makespan_slots >= truth
    if horizon is not None and horizon < truth:
        assert result.status != "optimal" and result.schedule is None


@pytest.mark.parametrize(("seed", "data"), _instances(16, 100), ids=lambda v: str(v)[:24])
def test_outage_past_the_makespan_keeps_the_proof(seed: int, data: dict) -> None:
    rng = random.Random(seed)
    plain = Instance.from_dict(data)
    truth = optimum(plain)
    n_links = len(data["topology"]["links"])
    late = truth + int(max(plain.occupancy))
    links = data["topology"]["links"]
    cases = []
    for horizon in (truth, truth + 1):
        # q = H + 1 and H + 2: the slots whose flat key e * (H + 1) + t named the first
        # slots of the next link
        cases += [(horizon, lk, horizon + 1 + j, False) for lk in links for j in (0, 1)]
    for trial in range(3):
        horizon = rng.choice([None, max(1, truth - 1), late + 2])
        q = rng.choice([late, late + 1, (horizon or late) + 1, 60])
        cases.append((horizon, links[rng.randrange(n_links)], q, bool(trial % 2)))
    for horizon, link, q, warm in cases:
        outaged = Instance.from_dict({**data, "outages": [[link["src"], link["dst"], q]]})
        if q >= late:
            expected = truth  # the outage is out of reach of an optimal schedule ...
            assert optimum(outaged) == truth
        else:
            # ... but a cut-through hop (L = delta < l) occupies its link past the makespan,
            # so an outage just after it can matter: ask the independent model
            expected = optimum(outaged)
        opts = ccplan.SolveOptions(time_limit=30, workers=1, horizon=horizon, warm_start=warm)
        _check(ccplan.solve(outaged, "milp", opts), expected, horizon)


_ENGINES = ("milp", "heuristic", "mteg", "layered", "cut-aware", "multitree", "ring", "tree")


@pytest.mark.parametrize(("seed", "data"), _instances(10, 500), ids=lambda v: str(v)[:24])
def test_reported_bounds_never_exceed_the_independent_optimum(seed: int, data: dict) -> None:
    rng = random.Random(seed)
    links = data["topology"]["links"]
    outages = [[lk["src"], lk["dst"], rng.randrange(6)] for lk in rng.sample(links, min(2, len(links)))]
    inst = Instance.from_dict({**data, "outages": outages})
    truth = optimum(inst)
    assert lower_bound_slots(inst) <= truth
    solved = 0
    for method in _ENGINES:
        try:
            result = ccplan.solve(inst, method, ccplan.SolveOptions(time_limit=10, workers=1))
        except CCPlanError:
            continue  # a clean refusal (e.g. a ring on a topology without one)
        solved += 1
        _check(result, truth)
    assert solved >= 2  # milp and heuristic take every data-movement instance
