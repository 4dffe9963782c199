"""One cell, run in a worker: build the instance, solve, and fill the row with the result, the
bounds and the simulated time (:func:`run_cell`, which never raises).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import logging
import math
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from ccplan.sweep.cells import _canonical
from ccplan.sweep.table import COLUMNS

log = logging.getLogger("ccplan.sweep")


_DETAILS_MAX_CHARS = 4000


_IMPORTED: set[str] = set()


def _build_instance(payload: Mapping[str, Any]) -> Any:
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.builtin import resolve_topology

    topo = resolve_topology(payload["topology_name"], **payload["topology_params"])
    coll = make_collective(payload["collective"], topo, chunks=payload["chunks"], root=payload["root"])
    switch_model = payload.get("switch_model", "store-and-forward")
    switch_reduce = bool(payload.get("switch_reduce", False))
    inst = make_instance(
        topo, coll, payload["size"], tau_rule=payload["tau_rule"], alpha_threshold=payload["alpha_threshold"],
        switch_model=switch_model, switch_reduce=switch_reduce,
    )
    cap = payload.get("alpha_cap_ratio")
    alphas = [a for a in topo.alpha if a > 0]
    if cap is not None and alphas and min(alphas) / inst.tau_us > cap:
        # TE-CCL's alpha cap (teccl.md 2.1): a slot shorter than min alpha / 200 only inflates the horizon.
        inst = make_instance(
            topo,
            coll,
            payload["size"],
            tau_rule="explicit",
            tau_us=min(alphas) / cap,
            alpha_threshold=payload["alpha_threshold"],
            switch_model=switch_model,
            switch_reduce=switch_reduce,
        )
    return inst


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if hasattr(value, "item"):
        return _number(value.item())
    return None


def _as_mapping(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "to_dict"):
        d = obj.to_dict()
        if isinstance(d, Mapping):
            return dict(d)
    if hasattr(obj, "__dataclass_fields__"):
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    return {}


def _bounds_columns(instance: Any) -> dict[str, Any]:
    """Lower bound and cut bound of ``compute_bounds`` (None where the module is missing)."""
    try:
        from ccplan import bounds as bounds_mod
    except ImportError:
        return {}
    compute = getattr(bounds_mod, "compute_bounds", None)
    if compute is None:
        return {}
    fields = _as_mapping(compute(instance))
    scalars = {k: _number(v) for k, v in fields.items() if _number(v) is not None}
    cut = None
    for name in ("cut_slots", "cut", "cut_bound_slots", "cut_bound", "maxflow_slots", "flow_slots"):
        if scalars.get(name) is not None:
            cut = scalars[name]
            break
    return {
        "bounds": scalars,
        "cut_bound_slots": cut,
        "cut_bound_us": None if cut is None else cut * instance.tau_us,
        # Continuous-time bound (no slot rounding): comparable across slot rules and with TE-CCL.
        "bound_us_continuous": scalars.get("best_us"),
    }


def _simulate_columns(instance: Any, schedule: Any) -> dict[str, Any]:
    """Continuous-time completion of the schedule, if ``ccplan.schedule.simulate`` exists."""
    try:
        sched_pkg = importlib.import_module("ccplan.schedule")
        sim = getattr(sched_pkg, "simulate", None)
        if sim is None:
            sim = importlib.import_module("ccplan.schedule.simulate")
    except ImportError:
        return {}
    func = sim if callable(sim) else getattr(sim, "simulate", None)
    if func is None:
        return {}
    out = func(instance, schedule)
    value = _number(out)
    if value is None:
        fields = _as_mapping(out)
        for name in ("completion_us", "makespan_us", "time_us", "total_us"):
            if _number(fields.get(name)) is not None:
                value = _number(fields[name])
                break
    if value is None:
        return {}
    return {"sim_us": value, "sim_algbw_GBps": instance.algbw_GBps(value) if value > 0 else None}


def _compact_details(details: Any) -> str:
    text = _canonical(details)
    if len(text) <= _DETAILS_MAX_CHARS:
        return text
    # Keep only scalar entries: trajectories and per-chunk tables do not belong in a summary table.
    small = (
        {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool)) or v is None}
        if isinstance(details, Mapping)
        else {}
    )
    return _canonical(small)[:_DETAILS_MAX_CHARS]


def run_cell(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Solve one cell and return its table row. Never raises: failures go to ``error``.

    Parameters
    ----------
    payload : mapping
        :meth:`Cell.to_payload` output.
    """
    from ccplan.contract import SolveOptions
    from ccplan.pipeline.solve import ROW_FIELDS, solve

    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    row: dict[str, Any] = {k: payload.get(k) for k in COLUMNS if k in payload}
    row["topology_params"] = _canonical(payload["topology_params"])
    row["host"] = socket.gethostname()
    row["host_cores"] = os.cpu_count()
    row["pid"] = os.getpid()
    # Other jobs on the host inflate solve times; the 1-minute load average says how much.
    row["load1"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    row["started"] = started
    try:
        for mod in payload.get("imports", ()):
            if mod not in _IMPORTED:
                importlib.import_module(mod)
                _IMPORTED.add(mod)
        instance = _build_instance(payload)
        row.update(
            size_bytes=instance.size_bytes,
            gpus=len(instance.topology.gpus),
            nodes=instance.topology.num_nodes,
            links=instance.topology.num_links,
            chunk_bytes=instance.chunk_bytes,
            tau_us=instance.tau_us,
        )
        options = SolveOptions(
            time_limit=payload["time_limit"],
            workers=payload["workers"],
            seed=payload["seed"],
            horizon=payload["horizon"],
            warm_start=payload["warm_start"],
            extra=payload["extra"],
        )
        result = solve(instance, payload["method"], options)
        res = result.to_dict(instance)
        for k in ROW_FIELDS:
            row[k] = res.get(k)
        row["lower_bound_us"] = result.lower_bound_slots * instance.tau_us
        details = dict(res.get("details") or {})
        if res.get("violations"):
            details["violations"] = res["violations"][:3]
        row["details"] = _compact_details(details)
        errors = []
        try:
            row.update(_bounds_columns(instance))
        except Exception as exc:  # a failing bound must not lose the solve
            errors.append(f"bounds: {type(exc).__name__}: {exc}")
        if payload.get("simulate", True) and result.schedule is not None and result.verified:
            try:
                row.update(_simulate_columns(instance, result.schedule))
            except Exception as exc:
                errors.append(f"simulate: {type(exc).__name__}: {exc}")
        if errors:
            row["error"] = "; ".join(errors)
    except Exception as exc:
        row["status"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}"
        log.debug("cell %s failed", payload.get("key"), exc_info=True)
    if isinstance(row.get("bounds"), Mapping):
        row["bounds"] = _canonical(row["bounds"])
    row["cell_seconds"] = time.perf_counter() - t0
    row["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return row
