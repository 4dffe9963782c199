"""The solve pipeline: the registry as users run it (every engine adapted to every instance:
the cut-through twin, the time reversal of combining collectives), the one :func:`solve` every
engine goes through, ``--chunks auto`` and the solve's memory estimate. It sits between the
applications (CLI, ``plan``, ``sweep``) and the engines, which know only
:mod:`ccplan.contract`."""

from ccplan.pipeline.registry import get_engine, method_names
from ccplan.pipeline.solve import BUSBW_FACTORS, Result, busbw_factor, solve

__all__ = ["BUSBW_FACTORS", "Result", "busbw_factor", "get_engine", "method_names", "solve"]
