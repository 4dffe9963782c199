"""Sweep configs: the grid's topologies, collectives and methods with their options
(:class:`SweepConfig`), read from TOML and validated with one-line errors naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccplan.errors import ValidationError
from ccplan.parsing import MAX_INDEX, float_value, int_value, load_toml_file, show


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
        ``store-and-forward`` (default) or ``cut-through`` (TE-CCL's switch, docs/model.md), for
        every collective. A sweep names its model here: a topology file's own ``switch_model``
        is not read (each row's ``switch_model`` column says which was used).
    switch_reduce : bool
        Switches add partial sums themselves (NVLS / SHARP-class hardware; default off: they
        only relay).
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
    switch_reduce: bool = False
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
        if not isinstance(self.switch_reduce, bool):
            raise ValidationError(
                f"{where}: instance.switch_reduce must be true or false, got {show(self.switch_reduce)}"
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
        instance_keys = {"tau_rule", "alpha_threshold", "alpha_cap_ratio", "switch_model", "switch_reduce"}
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
            switch_reduce=inst.get("switch_reduce", False),
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
