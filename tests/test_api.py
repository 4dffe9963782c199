"""The package's face: ``import ccplan`` exposes the public API, and docs/api.md runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ccplan

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_docs_api_examples_run(tmp_path, monkeypatch):
    """Every python block of docs/api.md, in order, in one namespace (their asserts are the
    hand derivations written beside them)."""
    blocks = _blocks()
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"docs/api.md block {i}", "exec"), namespace)
    finally:
        ccplan.set_memory_budget(None)
    assert (tmp_path / "line.json").is_file()


def test_every_exported_name_resolves():
    for name in ccplan.__all__:
        assert getattr(ccplan, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = ccplan.no_such_thing  # type: ignore[attr-defined]


def test_import_is_light():
    """`import ccplan` and touching the instance API import no solver."""
    code = (
        "import sys, ccplan; ccplan.Topology; ccplan.make_instance; ccplan.solve; "
        "print(any(m.split('.')[0] in ('pyomo', 'ortools') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_result_carries_its_instance():
    """ring-4 AllGather, C=1 with the ring baseline: 3 steps of one slot each; algbw is the
    output buffer over the makespan, without passing the instance back."""
    topo = ccplan.resolve_topology("ring", n=4)
    inst = ccplan.make_instance(topo, ccplan.make_collective("allgather", topo), "1MB")
    res = ccplan.solve(inst, "ring")
    assert res.instance is inst and res.verified
    assert res.makespan_slots is not None and res.makespan_slots >= res.lower_bound_slots
    assert res.algbw_GBps() == pytest.approx(inst.size_bytes / (res.makespan_slots * inst.tau_us * 1e3))
    assert res.to_dict()["algbw_GBps"] == pytest.approx(res.algbw_GBps())
    bare = ccplan.Result("x", "unknown", None, None, 0, 1.0, 0.0, False)
    assert bare.algbw_GBps() is None
    with pytest.raises(ccplan.ValidationError, match="carries no instance"):
        bare.to_dict()
