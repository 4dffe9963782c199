"""Compare the MSCCL export and the XML validator of two ccplan checkouts, case by case.

Usage (from the repository root)::

    python scripts/compare_msccl_export.py --reference ../other-checkout [--quick]

Step 1 (in this checkout) builds the cases: schedules for DGX1, NDv2 x2, DGX2 x1, torus 8x8,
a directed 8-ring and a 6-GPU star (a switch), for AllGather, ReduceScatter, AllReduce,
Broadcast and AllToAll where an engine or the greedy of ``tests/helpers.py`` makes one, with
C = 1 and 2; each schedule is checked by :func:`ccplan.schedule.verify` and saved as JSON.
Step 2 runs the same worker in a child process per checkout (``PYTHONPATH`` set to it): every
case is exported with several option sets (automatic settings, out-of-place, fixed channels,
two instances, the legacy dialect, ``switches="refuse"``) and the SHA-256 of the XML, or the
error message, is recorded; then every XML, and a set of corrupted copies of it (an attribute
changed, a step dropped, two steps swapped), goes through ``validate_xml`` and the verdict,
the error strings and the statistics are recorded. Step 3 compares the two records,
counts the differences whose reason is known (see ``_explain``) and prints every other one;
the exit status is 1 if an export differs or a difference is unexplained.

The reference checkout's code is only imported, never changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

OPTION_SETS: dict[str, dict[str, Any]] = {
    "auto": {"api": "export"},
    "auto-oop": {"api": "export", "inplace": False},
    "ch1": {"api": "xml", "channels": 1},
    "ch2-oop": {"api": "xml", "channels": 2, "inplace": False},
    "ch2-inst2": {"api": "xml", "channels": 2, "instances": 2},
    "legacy": {"api": "xml", "channels": 1, "dialect": "legacy"},
    "refuse": {"api": "export", "switches": "refuse"},
}


def build_cases(out_dir: Path, quick: bool) -> list[str]:
    """Write the case schedules as JSON files into ``out_dir``; return their names."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import greedy_schedule, ring_topology, star_topology

    from ccplan.contract import SolveOptions
    from ccplan.errors import CCPlanError
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.builtin import dgx1, dgx2, ndv2, torus2d
    from ccplan.pipeline.solve import solve
    from ccplan.schedule import save_schedule, verify

    topologies = {
        "dgx1": dgx1,
        "ndv2x2": lambda: ndv2(2),
        "dgx2x1": lambda: dgx2(1),
        "torus8x8": lambda: torus2d(8, 8),
        "ring8": lambda: ring_topology(8, bidirectional=False),
        "star6": lambda: star_topology(6),
    }
    kinds = ["allgather", "reducescatter", "allreduce", "broadcast", "alltoall"]
    names: list[str] = []
    for tname, fn in topologies.items():
        for kind in kinds:
            for chunks in (1, 2):
                if quick and chunks == 2 and tname == "torus8x8":
                    continue
                topo = fn()
                try:
                    inst = make_instance(topo, make_collective(kind, topo, chunks), "1MB")
                except CCPlanError:
                    continue
                makers: list[tuple[str, Any]] = [
                    ("heuristic", lambda i=inst: solve(i, "heuristic", SolveOptions(time_limit=5)).schedule)
                ]
                if (not inst.collective.combining and kind != "alltoall") or tname in ("ring8", "star6"):
                    makers.append(("greedy", lambda i=inst: greedy_schedule(i, seed=3)))
                for mname, make in makers:
                    if kind == "alltoall" and tname in ("torus8x8", "dgx2x1"):
                        continue  # N^2 C chunks: slow to solve and not what this compares
                    try:
                        schedule = make()
                    except (CCPlanError, RuntimeError, NotImplementedError) as exc:
                        print(f"skip {tname} {kind} C={chunks} {mname}: {exc}", file=sys.stderr)
                        continue
                    if schedule is None or not verify(inst, schedule).ok:
                        print(
                            f"skip {tname} {kind} C={chunks} {mname}: no verified schedule", file=sys.stderr
                        )
                        continue
                    name = f"{tname}-{kind}-c{chunks}-{mname}"
                    save_schedule(out_dir / f"{name}.json", inst, schedule)
                    names.append(name)
    return names


def _corruptions(text: str, rng: random.Random, count: int) -> list[tuple[str, str]]:
    """Broken copies of ``text``: one attribute changed, a step dropped, two steps swapped."""
    lines = text.splitlines(keepends=True)
    steps = [i for i, ln in enumerate(lines) if "<step " in ln]
    out: list[tuple[str, str]] = []
    if not steps:
        return out
    for k in range(count):
        i = rng.choice(steps)
        what = k % 5
        new = list(lines)
        if what == 0:
            attr = rng.choice(["srcoff", "dstoff", "deps", "depid", "cnt", "hasdep", "s"])
            new[i] = re.sub(
                rf'{attr}="(-?\d+)"',
                lambda m, a=attr: f'{a}="{int(m.group(1)) + rng.choice([-1, 1, 2])}"',
                new[i],
                count=1,
            )
            label = f"attr {attr} line {i}"
        elif what == 1:
            del new[i]
            label = f"drop line {i}"
        elif what == 2:
            j = rng.choice(steps)
            new[i], new[j] = new[j], new[i]
            label = f"swap lines {i} {j}"
        elif what == 3:
            typ = rng.choice(["s", "r", "rcs", "cpy", "nop", "rrc"])
            new[i] = re.sub(r'type="\w+"', f'type="{typ}"', new[i], count=1)
            label = f"type {typ} line {i}"
        else:
            buf = rng.choice(["i", "o", "s"])
            new[i] = re.sub(r'dstbuf="\w"', f'dstbuf="{buf}"', new[i], count=1)
            label = f"dstbuf {buf} line {i}"
        out.append((label, "".join(new)))
    return out


def worker(case_dir: Path, names: list[str], corrupt: int) -> dict[str, Any]:
    """Export and validate every case with the ccplan on ``sys.path``; a JSON-able record."""
    from ccplan.errors import CCPlanError
    from ccplan.export.msccl import export_msccl, to_msccl_xml
    from ccplan.export.xml_validate import validate_xml
    from ccplan.schedule import load_schedule

    record: dict[str, Any] = {}
    for name in names:
        inst, schedule = load_schedule(case_dir / f"{name}.json")
        for oname, options in OPTION_SETS.items():
            opts = dict(options)
            api = opts.pop("api")
            key = f"{name}/{oname}"
            try:
                if api == "export":
                    choice = export_msccl(inst, schedule, **opts)
                    text, extra = choice.text, [choice.channels, choice.inplace, list(choice.tried)]
                else:
                    text, extra = to_msccl_xml(inst, schedule, **opts), []
            except CCPlanError as exc:
                record[key] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            entry: dict[str, Any] = {"sha": hashlib.sha256(text.encode()).hexdigest(), "extra": extra}
            dialect = str(opts.get("dialect", "executor"))
            checks = [("plain", text, None), ("expect", text, inst)]
            rng = random.Random(f"{name}/{oname}")
            checks += [(label, bad, inst) for label, bad in _corruptions(text, rng, corrupt)]
            verdicts = []
            for label, xml, expect in checks:
                try:
                    rep = validate_xml(xml, expect=expect, dialect=dialect)
                    verdicts.append([label, rep.ok, [str(e) for e in rep.errors], _plain(dict(rep.stats))])
                except CCPlanError as exc:
                    verdicts.append([label, "raised", f"{type(exc).__name__}: {exc}"])
                except Exception as exc:  # a crash of the validator is a finding, not the end
                    verdicts.append([label, "crashed", f"{type(exc).__name__}: {exc}"])
            entry["validate"] = verdicts
            record[key] = entry
    return record


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", type=Path, help="checkout to compare against")
    ap.add_argument("--quick", action="store_true", help="fewer cases")
    ap.add_argument("--corrupt", type=int, default=10, help="corrupted copies per XML")
    ap.add_argument(
        "--cases", type=Path, help="keep the cases and the reference's record in this directory (reused)"
    )
    ap.add_argument("--worker", nargs=2, metavar=("CASE_DIR", "OUT_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        case_dir, out = Path(args.worker[0]), Path(args.worker[1])
        names = json.loads((case_dir / "names.json").read_text())
        out.write_text(json.dumps(worker(case_dir, names, args.corrupt)))
        return 0
    if args.reference is None:
        ap.error("--reference is required")
    with tempfile.TemporaryDirectory() as tmp:
        case_dir = args.cases or Path(tmp) / "cases"
        case_dir.mkdir(parents=True, exist_ok=True)
        if not (case_dir / "names.json").exists():
            names = build_cases(case_dir, args.quick)
            (case_dir / "names.json").write_text(json.dumps(names))
        names = json.loads((case_dir / "names.json").read_text())
        records = {}
        for label, checkout in (("reference", args.reference.resolve()), ("this", ROOT)):
            out = Path(tmp) / f"{label}.json"
            kept = case_dir / "reference-record.json"
            if label == "reference" and args.cases and kept.exists():
                records[label] = json.loads(kept.read_text())  # the reference does not change
                continue
            env = dict(os.environ, PYTHONPATH=str(checkout))
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(case_dir), str(out)]
            subprocess.run([*cmd, "--corrupt", str(args.corrupt)], env=env, check=True)
            records[label] = json.loads(out.read_text())
            if label == "reference" and args.cases:
                kept.write_text(out.read_text())
    ref, new = records["reference"], records["this"]
    exported = sum(1 for v in ref.values() if "sha" in v)
    checked = sum(len(v.get("validate", ())) for v in ref.values())
    counts = {"export": 0, "reference crashed": 0, "after a race": 0, "unexplained": 0}
    for key in sorted(set(ref) | set(new)):
        a, b = ref.get(key), new.get(key)
        if a == b:
            continue
        if (
            a is None
            or b is None
            or "sha" not in a
            or "sha" not in b
            or a["sha"] != b["sha"]
            or a.get("extra") != b.get("extra")
        ):
            counts["export"] += 1
            print(f"DIFF {key}: export differs: {json.dumps(a)[:300]} vs {json.dumps(b)[:300]}")
            continue
        for va, vb in zip(a["validate"], b["validate"], strict=False):
            if va == vb:
                continue
            why = _explain(va, vb)
            counts[why] += 1
            if why == "unexplained":
                print(f"DIFF {key} validate {va[0]}: {json.dumps(va)[:400]} vs {json.dumps(vb)[:400]}")
    print(
        f"{len(names)} schedules, {len(ref)} (schedule, options) cases, {exported} exported, "
        f"{checked} validations; differences: {counts}"
    )
    return 1 if counts["export"] or counts["unexplained"] else 0


def _explain(va: list[Any], vb: list[Any]) -> str:
    """Why two validator records differ, when the reason is a known one.

    ``reference crashed``: the reference raised (its cycle report failed on steps behind a
    cycle). ``after a race``: both report the same errors, races included, except the
    simulation's (postcondition, double-count), which follow the topological order the
    simulation happens to take when accesses are unordered.
    """
    if va[1] == "crashed" and vb[1] != "crashed":
        return "reference crashed"
    if isinstance(va[2], list) and isinstance(vb[2], list) and va[3] == vb[3]:

        def rest(errors: list[str]) -> list[str]:
            return [e for e in errors if not e.startswith(("postcondition:", "double-count:"))]

        if rest(va[2]) == rest(vb[2]) and any(e.startswith("race:") for e in va[2]):
            return "after a race"
    return "unexplained"


if __name__ == "__main__":
    sys.exit(main())
