"""``--chunks auto``: the chunk count chosen by solving C = 1, 2, 4, ... and keeping the
fastest verified schedule in microseconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance
from ccplan.pipeline.solve import Result, solve

log = logging.getLogger(__name__)

AUTO_CHUNKS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""Chunk counts ``C`` ``--chunks auto`` may try, in this order (see :data:`AUTO_PATIENCE`)."""


AUTO_MAX_PIECES = 256
"""``--chunks auto`` skips a ``C`` that cuts the buffer into more pieces than this (the
schedulers' work grows with the chunk count; DGX2 with 2 chassis, 32 GPUs, still gets C = 8)."""


AUTO_PATIENCE = 2
"""``--chunks auto`` stops doubling ``C`` after this many candidates in a row that were not
faster than the best so far: more chunks pipeline better until the per-chunk alpha and the
slot rounding eat the gain, so the time against ``C`` falls and then rises (one bad candidate
may be a heuristic's accident, two are taken as the turn)."""


def auto_chunk_candidates(pieces_per_chunk: int) -> list[int]:
    """The ``C`` values ``--chunks auto`` may try for a collective cut into
    ``pieces_per_chunk`` pieces per unit of ``C`` (within :data:`AUTO_MAX_PIECES`)."""
    return [c for c in AUTO_CHUNKS if c == 1 or c * pieces_per_chunk <= AUTO_MAX_PIECES]


def solve_auto_chunks(
    build: Callable[[int], Instance], method: str, options: SolveOptions | None = None
) -> tuple[Instance, Result]:
    """Pick the chunk count for the size: solve with ``C`` = 1, 2, 4, ... (:data:`AUTO_CHUNKS`,
    within :data:`AUTO_MAX_PIECES`) until :data:`AUTO_PATIENCE` candidates in a row are not
    faster, and keep the verified schedule with the shortest time (microseconds, since a
    slot's length changes with ``C``).

    Parameters
    ----------
    build : callable
        ``C -> Instance`` (same topology, collective and size).
    method : str
    options : SolveOptions, optional
        A time limit is shared among the candidates still to try in proportion to ``C`` (an
        engine's work grows about linearly with the chunk count); time a candidate leaves
        unused goes to the next ones.

    Returns
    -------
    (Instance, Result)
        The chosen instance and its result; ``details["auto_chunks"]`` maps every ``C`` tried
        to its makespan in microseconds (None when it failed or did not verify).

    Raises
    ------
    ValidationError
        No candidate gave a verified schedule (the first failure is named).
    """
    opts = options or SolveOptions()
    first = build(AUTO_CHUNKS[0])
    candidates = auto_chunk_candidates(first.collective.pieces // first.collective.chunks)
    start = time.perf_counter()
    tried: dict[str, float | None] = {}
    best: tuple[float, Instance, Result] | None = None
    failure: str | None = None
    misses = 0
    for i, c in enumerate(candidates):
        share = opts
        if opts.time_limit is not None:
            left = max(1e-3, opts.time_limit - (time.perf_counter() - start))
            share = replace(opts, time_limit=max(1e-3, left * c / sum(candidates[i:])))
        instance = first if c == AUTO_CHUNKS[0] else build(c)
        try:
            result = solve(instance, method, share)
        except ValidationError as exc:
            failure = failure or f"C={c}: {exc}"
            tried[str(c)] = None
            result = None
        us = result.makespan_us if result is not None and result.verified else None
        if result is not None:
            tried[str(c)] = us
        if us is not None and result is not None and (best is None or us < best[0]):
            best = (us, instance, result)
            misses = 0
        else:
            misses += 1
            if misses >= AUTO_PATIENCE and best is not None:
                break
    if best is None:
        raise ValidationError(f"--chunks auto: no chunk count gave a verified schedule ({failure})")
    _, instance, result = best
    log.info("--chunks auto chose C=%d of %s", instance.collective.chunks, tried)
    return instance, replace(result, details={**dict(result.details), "auto_chunks": tried})
