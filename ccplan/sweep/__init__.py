"""Parameter sweeps: a grid of solves, run in parallel, appended to a resumable table.

A sweep is the cross product

    topologies (name + parameters) x collectives x sizes x chunk counts x methods

where every method carries its own options (time limit, warm start, CP-SAT workers, seed,
slot rule) and may restrict itself to a subset of the other axes (e.g. the exact engine only
on a few sizes). Every cell is one :func:`ccplan.pipeline.solve` call, so every row of the
table has been checked by the independent verifier.

Execution
---------
Cells run in local worker processes (:class:`concurrent.futures.ProcessPoolExecutor`,
``processes`` workers, default 2 on the 2-core development machine) or, with
``dask_address``, on a Dask distributed cluster. A cell's CP-SAT ``workers`` times the number
of processes should not exceed the machine's cores: CP-SAT's portfolio threads then compete
for the same cores and every time-limited exact cell gets less search than its limit says.
:func:`run_sweep` logs a warning when a config oversubscribes.

The time limit of a cell is the engine's own (cooperative) limit; a sweep does not kill a
cell that overruns it.

Resumption
----------
The table is a CSV file. One row is written per finished cell, as soon as it finishes, with
one ``write`` + ``flush`` + ``fsync``; every field is kept on one physical line, so a row is
either wholly on disk or is a trailing fragment without its newline. A sweep started again on
the same table drops such a fragment and skips every cell whose key is already in the table.
The key (:attr:`Cell.key`) is readable (topology, collective, size, chunks, method label) and
ends in a short hash of everything that defines the cell (topology parameters, instance
options, method options), so changing a time limit reruns the cell instead of reusing a stale
row.

Configs are TOML (:meth:`SweepConfig.from_toml`); see ``sweeps/smoke.toml`` for the format.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import hashlib
import importlib
import io
import json
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ccplan.errors import CCPlanError, ValidationError
from ccplan.parsing import MAX_INDEX, float_value, int_value, load_toml_file, show

log = logging.getLogger(__name__)

__all__ = [
    "COLUMNS",
    "Cell",
    "MethodSpec",
    "SweepConfig",
    "TopologyEntry",
    "cells_of",
    "load_results",
    "run_cell",
    "run_sweep",
]

TIMING_COLUMNS: tuple[str, ...] = (
    "solve_seconds",
    "cell_seconds",
    "host",
    "host_cores",
    "load1",
    "pid",
    "started",
    "finished",
)
"""Columns that legitimately differ between two runs of the same cell."""

COLUMNS: tuple[str, ...] = (
    "key",
    "sweep",
    "topology",
    "topology_name",
    "topology_params",
    "collective",
    "root",
    "size",
    "size_bytes",
    "chunks",
    "method_label",
    "method",
    "time_limit",
    "workers",
    "warm_start",
    "seed",
    "tau_rule",
    "alpha_threshold",
    "alpha_cap_ratio",
    "gpus",
    "nodes",
    "links",
    "chunk_bytes",
    "status",
    "makespan_slots",
    "lower_bound_slots",
    "gap",
    "tau_us",
    "makespan_us",
    "algbw_GBps",
    "busbw_GBps",
    "verified",
    "num_sends",
    "lower_bound_us",
    "cut_bound_slots",
    "cut_bound_us",
    "bound_us_continuous",
    "bounds",
    "sim_us",
    "sim_algbw_GBps",
    "details",
    "error",
    *TIMING_COLUMNS,
)
"""Columns of the result table, in file order."""

_INT_COLUMNS = frozenset(
    {
        "chunks",
        "workers",
        "seed",
        "gpus",
        "nodes",
        "links",
        "makespan_slots",
        "lower_bound_slots",
        "num_sends",
        "host_cores",
        "pid",
        "root",
    }
)
_FLOAT_COLUMNS = frozenset(
    {
        "size_bytes",
        "time_limit",
        "alpha_threshold",
        "alpha_cap_ratio",
        "chunk_bytes",
        "gap",
        "tau_us",
        "makespan_us",
        "algbw_GBps",
        "busbw_GBps",
        "lower_bound_us",
        "cut_bound_slots",
        "cut_bound_us",
        "bound_us_continuous",
        "sim_us",
        "sim_algbw_GBps",
        "solve_seconds",
        "cell_seconds",
        "load1",
    }
)
_BOOL_COLUMNS = frozenset({"warm_start", "verified"})
_JSON_COLUMNS = frozenset({"topology_params", "bounds", "details"})

_DETAILS_MAX_CHARS = 4000

# ============================================================================ config


def _where_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise ValidationError(f"{where} must be a table, got {show(data)}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValidationError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValidationError(f"{where} must be a non-empty list, got {show(value)}")
    bad = [v for v in value if isinstance(v, bool) or not isinstance(v, (str, int, float))]
    if bad:
        raise ValidationError(f"{where} entries must be strings or numbers, got {show(bad[0])}")
    return tuple(str(v) for v in value)


def _int_list(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or any(not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_INDEX for v in value)
    ):
        raise ValidationError(
            f"{where} must be a non-empty list of positive integers (at most {MAX_INDEX}), got {show(value)}"
        )
    return tuple(value)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class TopologyEntry:
    """One topology of the grid: a built-in name (or JSON file) plus its parameters.

    Parameters
    ----------
    name : str
        Passed to :func:`ccplan.instances.builtin.resolve_topology`.
    params : mapping
        Keyword parameters of the built-in (``chassis=2`` ...).
    label : str
        Name used in the table and the plots; default ``name`` plus the parameter values
        (``ndv2-chassis2``).
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError(f"topology.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.params, Mapping):
            raise ValidationError(f"topology {self.name!r}: params must be a table, got {self.params!r}")
        object.__setattr__(self, "params", dict(sorted(self.params.items())))
        if not self.label:
            suffix = "".join(f"-{k}{v}" for k, v in self.params.items())
            object.__setattr__(self, "label", f"{self.name}{suffix}")

    @classmethod
    def from_dict(cls, data: Any, where: str = "topology") -> TopologyEntry:
        """From a TOML table ``{name = "ndv2", params = {chassis = 2}, label = "ndv2-2"}`` or a name."""
        if isinstance(data, str):
            return cls(name=data)
        if not isinstance(data, Mapping):
            raise ValidationError(f"{where} must be a name or a table, got {data!r}")
        _where_keys(data, {"name", "params", "label"}, where)
        if "name" not in data:
            raise ValidationError(f"{where}: missing key 'name'")
        return cls(name=data["name"], params=data.get("params", {}), label=data.get("label", ""))


@dataclass(frozen=True)
class CollectiveEntry:
    """A collective of the grid: kind plus (for rooted ones) the root GPU."""

    kind: str
    root: int | None = None

    @property
    def label(self) -> str:
        """``allgather`` or ``broadcast@3``."""
        return self.kind if self.root is None else f"{self.kind}@{self.root}"

    @classmethod
    def from_dict(cls, data: Any, where: str = "collectives") -> CollectiveEntry:
        """From ``"allgather"`` or ``{kind = "broadcast", root = 0}``."""
        if isinstance(data, str):
            return cls(kind=data)
        if not isinstance(data, Mapping):
            raise ValidationError(f"{where} entries must be names or tables, got {data!r}")
        _where_keys(data, {"kind", "root"}, where)
        if "kind" not in data or not isinstance(data["kind"], str):
            raise ValidationError(f"{where}: entry {dict(data)!r} needs a string 'kind'")
        root = data.get("root")
        if root is not None:
            int_value(root, f"{where}: root")
        return cls(kind=data["kind"], root=root)


@dataclass(frozen=True)
class MethodSpec:
    """A method of the grid with its options, and the axis values it runs on.

    Parameters
    ----------
    label : str
        Name in the table and plots (``milp-warm``); unique within a sweep.
    method : str
        Registered engine name (``milp``, ``mteg``, ``ring`` ...).
    time_limit : float, optional
        Seconds per cell (the engine's own limit).
    workers : int
        CP-SAT threads of one cell.
    warm_start : bool
        Exact engine: start from the heuristic's schedule.
    seed : int
    horizon : int, optional
    tau_rule : str, optional
        Overrides the sweep's slot rule for this method (``"slowest"`` gives TE-CCL's "slow").
    extra : mapping
        Engine-specific :attr:`ccplan.contract.SolveOptions.extra`.
    sizes, chunks, topologies, collectives : tuple, optional
        Restrict this method to these sizes / chunk counts / topology labels / collective
        labels (None = all of the sweep's).
    """

    label: str
    method: str
    time_limit: float | None = None
    workers: int = 1
    warm_start: bool = True
    seed: int = 0
    horizon: int | None = None
    tau_rule: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    sizes: tuple[str, ...] | None = None
    chunks: tuple[int, ...] | None = None
    topologies: tuple[str, ...] | None = None
    collectives: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label or "|" in self.label:
            raise ValidationError(f"method.label must be a non-empty string without '|', got {self.label!r}")
        if not isinstance(self.method, str) or not self.method:
            raise ValidationError(f"method {self.label!r}: 'method' must name an engine, got {self.method!r}")
        where = f"method {self.label!r}"
        if self.time_limit is not None:
            float_value(self.time_limit, f"{where}: time_limit", positive=True)
        int_value(self.workers, f"{where}: workers", low=1)
        int_value(self.seed, f"{where}: seed", low=-MAX_INDEX)
        if self.horizon is not None:
            int_value(self.horizon, f"{where}: horizon", low=1)
        if not isinstance(self.warm_start, bool):
            raise ValidationError(f"{where}: warm_start must be true or false, got {show(self.warm_start)}")
        if not isinstance(self.extra, Mapping):
            raise ValidationError(f"{where}: extra must be a table, got {show(self.extra)}")
        if self.tau_rule is not None and self.tau_rule not in ("fastest", "slowest"):
            raise ValidationError(
                f"method {self.label!r}: tau_rule must be 'fastest' or 'slowest', got {self.tau_rule!r}"
            )
        object.__setattr__(self, "extra", dict(self.extra))

    def options_dict(self) -> dict[str, Any]:
        """Everything that changes what the cell computes (enters the cell key's hash)."""
        return {
            "method": self.method,
            "time_limit": self.time_limit,
            "workers": self.workers,
            "warm_start": self.warm_start,
            "seed": self.seed,
            "horizon": self.horizon,
            "tau_rule": self.tau_rule,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "method") -> MethodSpec:
        """From a TOML ``[[method]]`` table."""
        if isinstance(data, str):
            return cls(label=data, method=data)
        if not isinstance(data, Mapping):
            raise ValidationError(f"{where} must be a name or a table, got {data!r}")
        allowed = {
            "label",
            "method",
            "time_limit",
            "workers",
            "warm_start",
            "seed",
            "horizon",
            "tau_rule",
            "extra",
            "sizes",
            "chunks",
            "topologies",
            "collectives",
        }
        _where_keys(data, allowed, where)
        if "method" not in data:
            raise ValidationError(f"{where}: missing key 'method'")
        label = data.get("label", data["method"])
        return cls(
            label=label,
            method=data["method"],
            time_limit=data.get("time_limit"),
            workers=data.get("workers", 1),
            warm_start=data.get("warm_start", True),
            seed=data.get("seed", 0),
            horizon=data.get("horizon"),
            tau_rule=data.get("tau_rule"),
            extra=data.get("extra", {}),
            sizes=_str_list(data["sizes"], f"{where}.sizes") if "sizes" in data else None,
            chunks=_int_list(data["chunks"], f"{where}.chunks") if "chunks" in data else None,
            topologies=_str_list(data["topologies"], f"{where}.topologies") if "topologies" in data else None,
            collectives=_str_list(data["collectives"], f"{where}.collectives")
            if "collectives" in data
            else None,
        )


@dataclass(frozen=True)
class SweepConfig:
    """A whole sweep: the grid, the instance options and how to run it.

    Parameters
    ----------
    name : str
    topologies : tuple of TopologyEntry
    collectives : tuple of CollectiveEntry
    sizes : tuple of str
        Output buffer sizes (``"1KB"`` .. ``"1GB"``, TE-CCL's convention).
    chunks : tuple of int
        Chunks per contribution C.
    methods : tuple of MethodSpec
    tau_rule : str
        Default slot rule (``"fastest"``, the paper's tau).
    alpha_threshold : float
        ``delta = 0`` when ``alpha / tau`` is at most this (TE-CCL: 0.1).
    alpha_cap_ratio : float, optional
        TE-CCL's cap: when ``min alpha / tau`` exceeds this ratio, the slot is lengthened to
        ``min alpha / ratio`` (TE-CCL uses 200). None (default) keeps the paper's tau.
    switch_model : str
        ``store-and-forward`` (default) or ``cut-through`` (TE-CCL's switch, docs/model.md).
    processes : int
        Local worker processes.
    simulate : bool
        Also run ``ccplan.schedule.simulate`` (if it exists) on every schedule.
    imports : tuple of str
        Modules imported in every worker before its first cell (engines registered outside
        ``ccplan``, e.g. a test's toy engine).
    out : str, optional
        Default table path (a relative path is taken from the current directory, as the
        shipped configs under ``sweeps/`` expect when run from the repository root).
    """

    name: str
    topologies: tuple[TopologyEntry, ...]
    collectives: tuple[CollectiveEntry, ...]
    sizes: tuple[str, ...]
    chunks: tuple[int, ...]
    methods: tuple[MethodSpec, ...]
    tau_rule: str = "fastest"
    alpha_threshold: float = 0.1
    alpha_cap_ratio: float | None = None
    switch_model: str = "store-and-forward"
    processes: int = 2
    simulate: bool = True
    imports: tuple[str, ...] = ()
    out: str | None = None

    def __post_init__(self) -> None:
        from ccplan.instances.instance import SWITCH_MODELS, parse_size

        if not self.name or not isinstance(self.name, str):
            raise ValidationError(f"sweep name must be a non-empty string, got {show(self.name)}")
        for what in ("topologies", "collectives", "sizes", "chunks", "methods"):
            if not getattr(self, what):
                raise ValidationError(f"sweep {self.name!r}: '{what}' must not be empty")
        for s in self.sizes:
            parse_size(s)
        labels = [m.label for m in self.methods]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValidationError(f"sweep {self.name!r}: method label {dup[0]!r} is used twice")
        topo_labels = [t.label for t in self.topologies]
        dup = sorted({x for x in topo_labels if topo_labels.count(x) > 1})
        if dup:
            raise ValidationError(f"sweep {self.name!r}: topology label {dup[0]!r} is used twice")
        if self.tau_rule not in ("fastest", "slowest"):
            raise ValidationError(
                f"sweep {self.name!r}: tau_rule must be 'fastest' or 'slowest', got {self.tau_rule!r}"
            )
        where = f"sweep {self.name!r}"
        float_value(self.alpha_threshold, f"{where}: instance.alpha_threshold", low=0)
        if self.alpha_cap_ratio is not None:
            float_value(self.alpha_cap_ratio, f"{where}: instance.alpha_cap_ratio", positive=True)
        if self.switch_model not in SWITCH_MODELS:
            raise ValidationError(
                f"{where}: instance.switch_model must be one of {', '.join(SWITCH_MODELS)}, "
                f"got {show(self.switch_model)}"
            )
        if self.switch_model == "cut-through":
            from ccplan.instances.combining import COMBINING

            combining = [c.kind for c in self.collectives if c.kind in COMBINING]
            if combining:
                raise ValidationError(
                    f"{where}: instance.switch_model 'cut-through' is defined for data-movement "
                    f"collectives, not {combining[0]!r}"
                )
        if not isinstance(self.simulate, bool):
            raise ValidationError(f"{where}: run.simulate must be true or false, got {show(self.simulate)}")
        if self.out is not None and (not isinstance(self.out, str) or not self.out):
            raise ValidationError(f"{where}: run.out must be a file name, got {show(self.out)}")
        if not isinstance(self.processes, int) or isinstance(self.processes, bool) or self.processes < 1:
            raise ValidationError(
                f"sweep {self.name!r}: processes must be a positive integer, got {self.processes!r}"
            )
        for m in self.methods:
            if m.topologies:
                missing = sorted(set(m.topologies) - set(topo_labels))
                if missing:
                    raise ValidationError(
                        f"method {m.label!r}: topology label {missing[0]!r} is not in the sweep "
                        f"(labels: {', '.join(topo_labels)})"
                    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "sweep") -> SweepConfig:
        """From the parsed TOML document."""
        allowed = {"name", "topology", "collectives", "sizes", "chunks", "method", "instance", "run"}
        _where_keys(data, allowed, where)
        for key in ("topology", "method"):
            if key not in data:
                raise ValidationError(f"{where}: missing [[{key}]] tables")
        inst = data.get("instance", {})
        instance_keys = {"tau_rule", "alpha_threshold", "alpha_cap_ratio", "switch_model"}
        _where_keys(inst, instance_keys, f"{where}.instance")
        run = data.get("run", {})
        _where_keys(run, {"processes", "simulate", "imports", "out"}, f"{where}.run")
        topologies = data["topology"] if isinstance(data["topology"], list) else [data["topology"]]
        methods = data["method"] if isinstance(data["method"], list) else [data["method"]]
        collectives = data.get("collectives") or ["allgather"]
        if not isinstance(collectives, list):
            # a bare string would be read letter by letter
            raise ValidationError(
                f"{where}.collectives must be a list, e.g. [\"allgather\"], got {show(collectives)}"
            )
        return cls(
            name=data.get("name", "sweep"),
            topologies=tuple(
                TopologyEntry.from_dict(t, f"{where}.topology[{i}]") for i, t in enumerate(topologies)
            ),
            collectives=tuple(
                CollectiveEntry.from_dict(c, f"{where}.collectives") for c in collectives
            ),
            sizes=_str_list(data.get("sizes", ["1MB"]), f"{where}.sizes"),
            chunks=_int_list(data.get("chunks", [1]), f"{where}.chunks"),
            methods=tuple(MethodSpec.from_dict(m, f"{where}.method[{i}]") for i, m in enumerate(methods)),
            tau_rule=inst.get("tau_rule", "fastest"),
            alpha_threshold=float_value(
                inst.get("alpha_threshold", 0.1), f"{where}.instance.alpha_threshold", low=0
            ),
            alpha_cap_ratio=inst.get("alpha_cap_ratio"),
            switch_model=inst.get("switch_model", "store-and-forward"),
            processes=run.get("processes", 2),
            simulate=run.get("simulate", True),
            imports=tuple(_str_list(run["imports"], f"{where}.run.imports")) if run.get("imports") else (),
            out=run.get("out"),
        )

    @classmethod
    def from_toml(cls, path: str | Path) -> SweepConfig:
        """Read a sweep config file (format: module docstring and ``sweeps/smoke.toml``).

        Raises
        ------
        ValidationError
            Missing file, TOML syntax error, unknown keys, bad values.
        """
        p = Path(path)
        if not p.exists():
            raise ValidationError(f"sweep config {str(p)!r} does not exist")
        # UTF-8 (or UTF-16 with a byte order mark), nesting and number length checked
        data = load_toml_file(p, "sweep config")
        return cls.from_dict(data, where=p.name)

    def max_cell_threads(self) -> int:
        """Largest CP-SAT thread count of any method."""
        return max(m.workers for m in self.methods)


# ============================================================================ cells


@dataclass(frozen=True)
class Cell:
    """One solve of a sweep."""

    sweep: str
    topology: TopologyEntry
    collective: CollectiveEntry
    size: str
    chunks: int
    method: MethodSpec
    tau_rule: str
    alpha_threshold: float
    alpha_cap_ratio: float | None
    switch_model: str = "store-and-forward"

    @property
    def key(self) -> str:
        """Stable identity: readable axis values plus a hash of every defining option."""
        ident = {
            "topology": [self.topology.name, dict(self.topology.params)],
            "collective": [self.collective.kind, self.collective.root],
            "size": self.size,
            "chunks": self.chunks,
            "method": self.method.options_dict(),
            "tau_rule": self.tau_rule,
            "alpha_threshold": self.alpha_threshold,
            "alpha_cap_ratio": self.alpha_cap_ratio,
        }
        if self.switch_model != "store-and-forward":
            ident["switch_model"] = self.switch_model  # keys of default cells stay as they were
        digest = hashlib.sha1(_canonical(ident).encode()).hexdigest()[:10]
        return (
            f"{self.topology.label}|{self.collective.label}|{self.size}|C{self.chunks}|"
            f"{self.method.label}|{digest}"
        )

    def to_payload(self, simulate: bool, imports: Sequence[str]) -> dict[str, Any]:
        """Plain-data form shipped to a worker (process pool or Dask)."""
        m = self.method
        return {
            "key": self.key,
            "sweep": self.sweep,
            "topology": self.topology.label,
            "topology_name": self.topology.name,
            "topology_params": dict(self.topology.params),
            "collective": self.collective.kind,
            "root": self.collective.root,
            "size": self.size,
            "chunks": self.chunks,
            "method_label": m.label,
            "method": m.method,
            "time_limit": m.time_limit,
            "workers": m.workers,
            "warm_start": m.warm_start,
            "seed": m.seed,
            "horizon": m.horizon,
            "extra": dict(m.extra),
            "tau_rule": m.tau_rule or self.tau_rule,
            "alpha_threshold": self.alpha_threshold,
            "alpha_cap_ratio": self.alpha_cap_ratio,
            "switch_model": self.switch_model,
            "simulate": simulate,
            "imports": list(imports),
        }


def cells_of(config: SweepConfig) -> list[Cell]:
    """All cells of the grid, in config order (topology, collective, size, chunks, method)."""
    from ccplan.instances.instance import parse_size

    out: list[Cell] = []
    for topo in config.topologies:
        for coll in config.collectives:
            for size in config.sizes:
                for chunks in config.chunks:
                    for m in config.methods:
                        if m.sizes is not None and not any(
                            parse_size(s) == parse_size(size) for s in m.sizes
                        ):
                            continue
                        if m.chunks is not None and chunks not in m.chunks:
                            continue
                        if m.topologies is not None and topo.label not in m.topologies:
                            continue
                        if m.collectives is not None and coll.label not in m.collectives:
                            continue
                        out.append(
                            Cell(
                                config.name,
                                topo,
                                coll,
                                size,
                                chunks,
                                m,
                                config.tau_rule,
                                config.alpha_threshold,
                                config.alpha_cap_ratio,
                                config.switch_model,
                            )
                        )
    keys = [c.key for c in out]
    if len(set(keys)) != len(keys):
        raise ValidationError(f"sweep {config.name!r}: two cells have the same key (duplicate axis values?)")
    return out


# ============================================================================ one cell (runs in a worker)

_IMPORTED: set[str] = set()


def _build_instance(payload: Mapping[str, Any]) -> Any:
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.builtin import resolve_topology

    topo = resolve_topology(payload["topology_name"], **payload["topology_params"])
    coll = make_collective(payload["collective"], topo, chunks=payload["chunks"], root=payload["root"])
    switch_model = payload.get("switch_model", "store-and-forward")
    inst = make_instance(
        topo, coll, payload["size"], tau_rule=payload["tau_rule"], alpha_threshold=payload["alpha_threshold"],
        switch_model=switch_model,
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
    from ccplan.pipeline.solve import solve

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
        for k in (
            "status",
            "makespan_slots",
            "lower_bound_slots",
            "gap",
            "tau_us",
            "makespan_us",
            "algbw_GBps",
            "busbw_GBps",
            "solve_seconds",
            "verified",
            "num_sends",
        ):
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


# ============================================================================ the table


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    text = value if isinstance(value, str) else _canonical(value)
    # One physical line per row is what makes a torn last row detectable.
    return text.replace("\r", " ").replace("\n", " | ")


class ResultTable:
    """An append-only CSV table, durable row by row.

    Parameters
    ----------
    path : Path
    columns : sequence of str
    """

    def __init__(self, path: Path, columns: Sequence[str] = COLUMNS) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        self._fh: TextIO | None = None
        self._lock_fd: int | None = None

    @property
    def lock_path(self) -> Path:
        """The lock file beside the table (``<table>.lock``), present while a sweep writes it."""
        return self.path.with_name(self.path.name + ".lock")

    def _lock(self) -> None:
        """Take the table for this process, or refuse: two sweeps on one table would both
        compute and write every cell the other has not finished.

        An exclusive POSIX lock (``lockf``) on ``<table>.lock``: released by the kernel when
        the process ends, however it ends, and not inherited by the worker processes (a
        ``flock`` would be, and a killed sweep's dying workers would hold it). The file holds
        the owner's pid for the message and is removed on :meth:`close`. A lock file removed
        by its owner between our open and our lock is detected (another inode at the path)
        and opened again.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no locking
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                owner = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise ValidationError(
                    f"results table {str(self.path)!r} is being written by another sweep (pid {owner}); "
                    "wait for it to finish (then rerun to resume) or write to another file (--out)"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def open(self) -> set[str]:
        """Lock the table (:meth:`_lock`), open it for appending (repairing a torn last
        line) and return the keys already present."""
        self._lock()
        try:
            return self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> set[str]:
        keys: set[str] = set()
        if self.path.exists() and self.path.stat().st_size > 0:
            raw = self.path.read_bytes()
            if not raw.endswith(b"\n"):
                cut = raw.rfind(b"\n") + 1
                log.warning("%s: dropping a partially written last row (%d bytes)", self.path, len(raw) - cut)
                with self.path.open("r+b") as fh:
                    fh.truncate(cut)
                    fh.flush()
                    os.fsync(fh.fileno())
                raw = raw[:cut]
            text = raw.decode()
            reader = csv.reader(io.StringIO(text))
            header = next(reader, None)
            records = list(reader)
            if header is not None and tuple(header) != self.columns:
                if not set(header) <= set(self.columns) or "key" not in header:
                    raise ValidationError(
                        f"table {str(self.path)!r} has columns this version of ccplan does not write "
                        f"({', '.join(sorted(set(header) - set(self.columns))) or 'no key'}); "
                        "write to a new file (--out)"
                    )
                records = self._upgrade(header, records)
            for rec in records:
                if len(rec) == len(self.columns):
                    keys.add(rec[0])
                elif rec:
                    log.warning("%s: ignoring a malformed row (%d fields)", self.path, len(rec))
            if header is None:
                self.path.write_text("")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", newline="")
        if self._fh.tell() == 0:
            self._write([str(c) for c in self.columns])
        return keys

    def _upgrade(self, header: list[str], records: list[list[str]]) -> list[list[str]]:
        """Rewrite a table of an older column set (a subset of ours) with empty new columns."""
        log.warning(
            "%s: adding columns %s to an older table",
            self.path,
            ", ".join(c for c in self.columns if c not in header),
        )
        index = {c: i for i, c in enumerate(header)}
        out = [
            [rec[index[c]] if c in index else "" for c in self.columns]
            for rec in records
            if len(rec) == len(header)
        ]
        tmp = self.path.with_name(self.path.name + ".upgrade")
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(self.columns)
            writer.writerows(out)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)
        return out

    def _write(self, values: Sequence[str]) -> None:
        assert self._fh is not None
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        self._fh.write(buf.getvalue())
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, row: Mapping[str, Any]) -> None:
        """Write one row (missing columns empty) and make it durable."""
        self._write([_cell_text(row.get(c)) for c in self.columns])

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._lock_fd is not None:
            # removed while still locked, so a sweep that opened it meanwhile sees the change
            with contextlib.suppress(OSError):
                self.lock_path.unlink()
            os.close(self._lock_fd)
            self._lock_fd = None


def _parse_value(column: str, text: str) -> Any:
    if text == "":
        return None
    try:
        if column in _INT_COLUMNS:
            return int(float(text))
        if column in _FLOAT_COLUMNS:
            return float(text)
    except ValueError:
        return text
    if column in _BOOL_COLUMNS:
        return text.lower() == "true"
    if column in _JSON_COLUMNS:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def load_results(paths: str | Path | Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read one or more result tables into typed dicts (numbers, booleans, JSON decoded).

    A missing file is skipped with a warning, so plotting scripts work on partial results.
    A torn last line (a sweep killed mid-write) is ignored.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            log.warning("result table %s does not exist (yet)", path)
            continue
        text = path.read_text()
        if text and not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]
        reader = csv.DictReader(io.StringIO(text))
        for rec in reader:
            if None in rec or any(v is None for v in rec.values()):
                continue
            rows.append({k: _parse_value(k, v) for k, v in rec.items()})
    return rows


# ============================================================================ progress


class Progress:
    """A one-line progress bar with ETA on stderr (a line per cell when stderr is not a tty)."""

    def __init__(self, total: int, skipped: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = total
        self.skipped = skipped
        self.done = 0
        self.failed = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if enabled and skipped:
            self.stream.write(f"sweep: {skipped} of {total + skipped} cells already in the table, skipped\n")
            self.stream.flush()

    @staticmethod
    def _hms(seconds: float) -> str:
        s = round(seconds)
        return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"

    def update(self, row: Mapping[str, Any]) -> None:
        self.done += 1
        if row.get("status") == "error":
            self.failed += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        width = 24
        filled = int(width * self.done / max(1, self.total))
        bar = "#" * filled + "." * (width - filled)
        last = f"{row.get('topology')} {row.get('size')} {row.get('method_label')}: {row.get('status')}"
        fail = f" ({self.failed} failed)" if self.failed else ""
        line = (
            f"[{bar}] {self.done}/{self.total}{fail} {100 * self.done / max(1, self.total):3.0f}% "
            f"elapsed {self._hms(elapsed)} ETA {self._hms(eta)}  {last}"
        )
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# ============================================================================ running


CellFunction = Callable[[Mapping[str, Any]], dict[str, Any]]
"""A module-level (picklable) function that runs one payload; :func:`run_cell` for sweeps."""


def _tie_to_parent(parent: int) -> None:
    """Worker initializer: die with the sweep process, even when it is killed with SIGKILL.

    Linux delivers SIGKILL to the worker when its parent dies (``PR_SET_PDEATHSIG``); a
    daemon thread that notices the parent change covers other systems and the window
    before the call.
    """
    import signal
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    # Ctrl-C reaches the whole process group; the sweep process decides what happens (it
    # stops the workers), so a worker prints no traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=watch, name="ccplan-parent-watch", daemon=True).start()


def _local_results(
    payloads: list[dict[str, Any]], processes: int, cell: CellFunction = run_cell
) -> Iterator[dict[str, Any]]:
    if processes == 1:
        # In-process: no pickling, simplest to debug; a crash loses only the running cell.
        for p in payloads:
            yield cell(p)
        return
    pool = ProcessPoolExecutor(max_workers=processes, initializer=_tie_to_parent, initargs=(os.getpid(),))
    with pool:
        futures: dict[Future[dict[str, Any]], dict[str, Any]] = {
            pool.submit(cell, p): p for p in payloads
        }
        try:
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except BrokenProcessPool:
                    running = [p["key"] for f, p in futures.items() if not f.done() or f is fut]
                    raise CCPlanError(
                        "a sweep worker process died (out of memory or killed) while cells were running; "
                        f"finished cells are saved, rerun to resume (first unfinished: {running[0]})"
                    ) from None
        except BaseException:
            # Ctrl-C or a failure: running cells are abandoned (finished rows are on disk);
            # waiting for them could take a whole cell time limit.
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            raise
        finally:
            for f in futures:
                f.cancel()


DASK_CONNECT_TIMEOUT = 30.0
"""Seconds ``--dask ADDRESS`` waits for the scheduler to answer (environment variable
:data:`DASK_TIMEOUT_ENV` overrides it); then the command ends with one line and exit 2."""

DASK_TIMEOUT_ENV = "CCPLAN_DASK_TIMEOUT"


def dask_connect_timeout() -> float:
    """The connect timeout in force (:data:`DASK_CONNECT_TIMEOUT` or :data:`DASK_TIMEOUT_ENV`)."""
    raw = os.environ.get(DASK_TIMEOUT_ENV, "").strip()
    if not raw:
        return DASK_CONNECT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValidationError(f"{DASK_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def _dask_client(address: str) -> Any:
    """A connected ``distributed.Client``, or :class:`CCPlanError` after the connect timeout.

    ``Client(address, timeout=...)`` does not end when the address accepts TCP and never
    answers (a wrong port, a service that is not a scheduler): it waits forever. So the
    connection is made in a helper thread, and the caller waits for it only so long (a late
    connection in the abandoned daemon thread ends with the process).
    """
    import threading

    from distributed import Client

    timeout = dask_connect_timeout()
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = Client(address, timeout=timeout)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    helper = threading.Thread(target=connect, name="ccplan-dask-connect", daemon=True)
    helper.start()
    helper.join(timeout + 1.0)
    if "client" in box:
        return box["client"]
    if "error" in box:
        exc = box["error"]
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise CCPlanError(f"--dask {address}: cannot connect to the scheduler ({type(exc).__name__}: {text})")
    raise CCPlanError(
        f"--dask {address}: the scheduler did not answer within {timeout:g} s "
        f"(is it a Dask scheduler? {DASK_TIMEOUT_ENV} sets a longer wait)"
    )


def _dask_results(
    payloads: list[dict[str, Any]], address: str, cell: CellFunction = run_cell
) -> Iterator[dict[str, Any]]:
    try:
        from distributed import as_completed as dask_as_completed
    except ImportError:
        raise CCPlanError("--dask needs the 'distributed' package: pip install 'ccplan[dask]'") from None
    client = _dask_client(address)
    try:
        futures = [
            client.submit(
                cell, p, key=f"ccplan-cell-{hashlib.sha1(p['key'].encode()).hexdigest()}", pure=False
            )
            for p in payloads
        ]
        for fut in dask_as_completed(futures):
            yield fut.result()
    finally:
        client.close()


def _check_methods(config: SweepConfig) -> None:
    """Refuse an unknown method before any cell runs (a cell of it could only fail, and a
    resume would never retry its error row)."""
    from ccplan.contract import method_names

    for mod in config.imports:
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise ValidationError(
                f"sweep {config.name!r}: run.imports: cannot import {mod!r} ({exc})"
            ) from None
    known = set(method_names())
    for m in config.methods:
        if m.method not in known:
            raise ValidationError(
                f"sweep {config.name!r}: method {m.label!r} names unknown engine {m.method!r} "
                f"(choose from {', '.join(sorted(known))})"
            )


def _check_cell_sizes(cells: Sequence[Cell]) -> None:
    """Refuse a grid with a cell whose collective alone exceeds the memory budget
    (:func:`ccplan.instances.estimate.estimate_collective`); the finer solve estimate runs in each cell."""
    from ccplan.instances import make_collective
    from ccplan.instances.builtin import resolve_topology
    from ccplan.instances.estimate import estimate_collective

    topos: dict[str, Any] = {}
    checked: set[tuple[str, str]] = set()
    for cell in cells:
        label = cell.topology.label
        if label not in topos:
            topos[label] = resolve_topology(cell.topology.name, **dict(cell.topology.params))
        where = f"sweep cell {label} {cell.collective.label} chunks={cell.chunks}"
        try:
            estimate_collective(cell.collective.kind, len(topos[label].gpus), cell.chunks).check()
        except CCPlanError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        if (label, cell.collective.label) not in checked:
            # the collective's name and root on this topology (one chunk: cheap), so that a
            # root beyond the GPUs is refused here and not in an error row per cell
            checked.add((label, cell.collective.label))
            try:
                make_collective(cell.collective.kind, topos[label], chunks=1, root=cell.collective.root)
            except ValidationError as exc:
                raise ValidationError(f"sweep: topology {label} {cell.collective.label}: {exc}") from None


def resolve_out(config: SweepConfig, out: str | Path | None, config_path: Path | None) -> Path:
    """The result table's path: ``out``, else the config's ``run.out``, else
    ``<config dir>/results/<name>.csv``."""
    if out is not None:
        return Path(out)
    if config.out is not None:
        return Path(config.out)
    base = config_path.parent if config_path is not None else Path(".")
    return base / "results" / f"{config.name}.csv"


def run_sweep(
    config: str | Path | SweepConfig,
    *,
    out: str | Path | None = None,
    dask_address: str | None = None,
    progress: bool = True,
    processes: int | None = None,
    on_row: Callable[[Mapping[str, Any]], None] | None = None,
) -> Path:
    """Run (or resume) a sweep and return the path of its result table.

    Parameters
    ----------
    config : path or SweepConfig
        A TOML file (:meth:`SweepConfig.from_toml`) or a config object.
    out : path, optional
        The CSV table; default the config's ``run.out`` (relative to the current directory),
        else ``<config dir>/results/<name>.csv``.
        Cells already in it are skipped.
    dask_address : str, optional
        Scheduler address (``tcp://host:8786``); run the cells on that Dask cluster instead
        of local processes.
    progress : bool
        Progress bar with ETA on stderr.
    processes : int, optional
        Overrides the config's local worker count.
    on_row : callable, optional
        Called with every row after it is on disk.

    Returns
    -------
    Path
        The result table.

    Raises
    ------
    ValidationError
        Bad config, or a table with other columns.
    CCPlanError
        A worker process died; finished rows are kept.
    """
    config_path = None
    if not isinstance(config, SweepConfig):
        config_path = Path(config)
        config = SweepConfig.from_toml(config_path)
    path = resolve_out(config, out, config_path)
    nproc = processes if processes is not None else config.processes
    if nproc < 1:
        raise ValidationError(f"processes must be a positive integer, got {nproc!r}")
    cores = os.cpu_count() or 1
    if dask_address is None and nproc * config.max_cell_threads() > cores:
        log.warning(
            "sweep %s: %d processes x %d CP-SAT workers exceeds the %d cores; time-limited exact cells "
            "will get less search than their limit says",
            config.name,
            nproc,
            config.max_cell_threads(),
            cores,
        )
    cells = cells_of(config)
    if dask_address is None:
        # A Dask cluster may have modules the client lacks; locally, check before any work.
        _check_methods(config)
    _check_cell_sizes(cells)
    table = ResultTable(path)
    done_keys = table.open()
    todo = [c for c in cells if c.key not in done_keys]
    payloads = [c.to_payload(config.simulate, config.imports) for c in todo]
    log.info(
        "sweep %s: %d cells, %d already done, writing %s",
        config.name,
        len(cells),
        len(cells) - len(todo),
        path,
    )
    bar = Progress(len(todo), len(cells) - len(todo), enabled=progress)
    try:
        if not payloads:
            return path
        results = _dask_results(payloads, dask_address) if dask_address else _local_results(payloads, nproc)
        for row in results:
            table.append(row)
            bar.update(row)
            if on_row is not None:
                on_row(row)
    finally:
        table.close()
    return path


def write_parquet(csv_path: str | Path, parquet_path: str | Path | None = None) -> Path:
    """Copy a result table to Parquet (needs ``pyarrow``; CSV stays the primary format)."""
    try:
        import pyarrow as pa  # noqa: F401
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        raise CCPlanError("Parquet output needs the 'pyarrow' package: pip install pyarrow") from None
    src = Path(csv_path)
    dst = Path(parquet_path) if parquet_path is not None else src.with_suffix(".parquet")
    pq.write_table(pacsv.read_csv(src), dst)
    return dst
