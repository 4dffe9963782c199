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

Layout
------
:mod:`~ccplan.sweep.config` (the TOML config and its validation), :mod:`~ccplan.sweep.cells`
(cells and their keys), :mod:`~ccplan.sweep.table` (the result table and its lock),
:mod:`~ccplan.sweep.worker` (one cell, :func:`run_cell`), :mod:`~ccplan.sweep.execute`
(running cells locally or on Dask), :mod:`~ccplan.sweep.progress` (the progress summary) and
:mod:`~ccplan.sweep.run` (:func:`run_sweep`). The names below are re-exported from them.
"""

from __future__ import annotations

from ccplan.sweep.cells import Cell, cells_of
from ccplan.sweep.config import CollectiveEntry, MethodSpec, SweepConfig, TopologyEntry
from ccplan.sweep.execute import DASK_CONNECT_TIMEOUT, DASK_TIMEOUT_ENV, CellFunction, dask_connect_timeout

# ccplan.plan runs its own cells on these
from ccplan.sweep.execute import _dask_results as _dask_results
from ccplan.sweep.execute import _local_results as _local_results
from ccplan.sweep.progress import Progress
from ccplan.sweep.run import resolve_out, run_sweep
from ccplan.sweep.table import COLUMNS, TIMING_COLUMNS, ResultTable, load_results, write_parquet
from ccplan.sweep.worker import run_cell

__all__ = [
    "COLUMNS",
    "DASK_CONNECT_TIMEOUT",
    "DASK_TIMEOUT_ENV",
    "TIMING_COLUMNS",
    "Cell",
    "CellFunction",
    "CollectiveEntry",
    "MethodSpec",
    "Progress",
    "ResultTable",
    "SweepConfig",
    "TopologyEntry",
    "cells_of",
    "dask_connect_timeout",
    "load_results",
    "resolve_out",
    "run_cell",
    "run_sweep",
    "write_parquet",
]
