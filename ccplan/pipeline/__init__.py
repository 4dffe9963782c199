"""The solve pipeline: the one :func:`solve` every engine goes through, its problem
transformations (cut-through twin, time reversal of combining collectives, ``--chunks auto``)
and its memory estimate. It sits between the applications (CLI, ``plan``, ``sweep``) and the
engines, which know only :mod:`ccplan.contract`."""

from ccplan.pipeline.solve import BUSBW_FACTORS, Result, busbw_factor, solve

__all__ = ["BUSBW_FACTORS", "Result", "busbw_factor", "solve"]
