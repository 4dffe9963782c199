"""Running a sweep: the checks before any work, the table's path, and :func:`run_sweep`, which
runs (or resumes) the cells not yet in the table and appends each row as it finishes.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ccplan.errors import CCPlanError, ValidationError
from ccplan.sweep.cells import Cell, cells_of
from ccplan.sweep.config import SweepConfig
from ccplan.sweep.execute import _dask_results, _local_results
from ccplan.sweep.progress import Progress
from ccplan.sweep.table import ResultTable

log = logging.getLogger("ccplan.sweep")


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
