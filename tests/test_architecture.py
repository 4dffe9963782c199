"""The architecture of docs/architecture.md, checked on the running code.

The import contracts themselves are checked by ``lint-imports`` in ``.ci/run`` (layers, the two
engine families independent, zero import cycles). Here: what imports cannot show.

- A solve goes down the layers: tracing every call between ccplan functions during a solve of
  an AllReduce, no function calls one of a higher layer, with the one exception the design
  names (``contract.sub_engine`` asking the pipeline's registry for an engine, which it then
  hands down). The expected layer order is the one in docs/architecture.md.
- No module over 800 lines without saying at its top why it is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import ccplan
from ccplan.instances.builtin import resolve_topology
from ccplan.instances.catalog import make_collective
from ccplan.instances.instance import make_instance

ROOT = Path(ccplan.__file__).resolve().parent

# docs/architecture.md, top to bottom
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ccplan.cli",),
    ("ccplan.plan",),
    ("ccplan.sweep",),
    ("ccplan.pipeline",),
    ("ccplan.model", "ccplan.heuristics"),
    ("ccplan.contract",),
    ("ccplan.bounds", "ccplan.physical"),
    ("ccplan.export",),
    ("ccplan.schedule",),
    ("ccplan.instances",),
    ("ccplan.limits", "ccplan.atomic"),
    ("ccplan.parsing",),
    ("ccplan.errors",),
)

ALLOWED_UPWARD = {("ccplan.contract", "ccplan.pipeline.registry")}
"""(caller module, callee module): the contract asks the pipeline's registry for an engine.
Module bodies run by an import are not calls here: imports are the contracts' business (the
registry imports an engine's module by name on first use, by design)."""


def _layer(module: str) -> int | None:
    for height, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return len(LAYERS) - height
    return None


def _ccplan_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None and not str(frame.f_globals.get("__name__", "")).startswith("ccplan."):
        frame = frame.f_back
    return frame


def _upward_calls(run: Any) -> tuple[Any, set[tuple[str, str, str, str]], set[int]]:
    """Run ``run()`` under a profiler; return its value, every call from a ccplan function to
    one of a higher layer as ``(caller module, caller function, callee module, callee
    function)``, and the layers entered. Module bodies run by an import are not calls."""
    upward: set[tuple[str, str, str, str]] = set()
    seen: set[int] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        callee = str(frame.f_globals.get("__name__", ""))
        if event != "call" or not callee.startswith("ccplan.") or frame.f_code.co_name == "<module>":
            return
        caller_frame = _ccplan_frame(frame.f_back)
        if caller_frame is None:
            return
        caller = str(caller_frame.f_globals["__name__"])
        low, high = _layer(caller), _layer(callee)
        if low is None or high is None:
            return
        seen.add(high)
        if high > low:
            upward.add((caller, caller_frame.f_code.co_name, callee, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        value = run()
    finally:
        sys.setprofile(None)
    return value, upward, seen


def test_an_allreduce_solve_goes_down_the_layers() -> None:
    """``ccplan.solve`` of an AllReduce with ``heuristic`` on a 4-GPU ring: the pipeline's time
    reversal, the portfolio on the reversed AllGather and on the AllGather, the bounds and
    the verifier. Every traced call goes to the same layer or a lower one."""
    instance = make_instance(
        topo := resolve_topology("ring", n=4), make_collective("allreduce", topo, chunks=2), "1MB"
    )
    result, calls, seen = _upward_calls(
        lambda: ccplan.solve(instance, "heuristic", ccplan.SolveOptions(time_limit=20, workers=1))
    )
    upward = {
        (f"{caller}.{fn}", f"{callee}.{gn}")
        for caller, fn, callee, gn in calls
        if not any(caller.startswith(a) and callee.startswith(b) for a, b in ALLOWED_UPWARD)
    }
    assert result.verified and result.makespan_slots is not None
    assert result.makespan_slots >= result.lower_bound_slots
    assert not upward, sorted(upward)
    # the solve really went through the pipeline, the engines, bounds, schedule and instances
    for module in ("ccplan.pipeline", "ccplan.heuristics", "ccplan.bounds", "ccplan.schedule",
                   "ccplan.instances"):
        assert _layer(module) in seen, module


def test_exact_warm_start_takes_the_engine_the_pipeline_hands_down() -> None:
    """``milp`` on a cut-through star (3 GPUs through one switch): its warm start asks
    ``sub_engine("heuristic")`` and gets the pipeline's engine (the store-and-forward twin,
    re-timed), so the hint is a valid cut-through schedule. The calls into the pipeline's
    registry from the exact engine are that handed-down engine and nothing else."""
    from ccplan.instances.topology import make_topology

    topo = make_topology("star3", range(3), duplex_links=[(g, 3, 50.0, 0.0) for g in range(3)], switches=[3])
    instance = make_instance(topo, make_collective("allgather", topo), "750MB", switch_model="cut-through")
    result, calls, _seen = _upward_calls(
        lambda: ccplan.solve(instance, "milp", ccplan.SolveOptions(time_limit=30, workers=1))
    )
    upward = {(caller.split(".")[1], callee) for caller, _fn, callee, _gn in calls}
    # docs/model.md, "Cut-through switches": 2 slots cut-through, proven
    assert result.status == "optimal" and result.makespan_slots == 2 and result.verified
    # the warm start itself meets the bound: the handed-down heuristic ran on the twin and was
    # re-timed for cut-through (the twin alone needs 3 slots)
    assert result.details["steps"][0]["reason"] == "warm start meets the lower bound"
    assert upward <= {("contract", "ccplan.pipeline.registry"), ("model", "ccplan.pipeline.registry")}, upward


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_no_module_over_800_lines_without_its_reason() -> None:
    """A module over 800 lines says in its docstring why it is one module ("One module:")."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > 800 and "One module:" not in _docstring(path):
            long.append(f"{path.relative_to(ROOT.parent)}: {lines} lines")
    assert not long, long
