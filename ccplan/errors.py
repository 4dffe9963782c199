"""Exception hierarchy of ccplan.

Every error a user can cause by bad input derives from :class:`CCPlanError`; the CLI turns
it into one line on stderr and exit code 2.
"""

from __future__ import annotations


class CCPlanError(Exception):
    """Base class for every error ccplan raises on bad input or an impossible request."""


class ValidationError(CCPlanError, ValueError):
    """A field of a topology, collective, instance or schedule is invalid.

    The message always names the offending field (and the value when it is short).
    """


class ArgumentError(ValidationError, TypeError):
    """A public function of ccplan was called with an argument of the wrong type (a topology
    given as a string, ``verify(None)``); the message names the argument, the type wanted and
    the type given. Also a :class:`TypeError`, for callers that catch that."""


class ResourceLimitError(CCPlanError):
    """The work a request implies would not fit the memory budget (:mod:`ccplan.limits`).

    Raised before the work starts; the message names the value that drives the estimate
    and the budget, and the CLI exits with code 2 as for any bad input.
    """


class SolverUnavailableError(CCPlanError):
    """A requested solver backend is not installed; the message names the package."""


class SolveInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) arrived during a solve.

    Contract between the engines, :func:`ccplan.pipeline.solve` and the CLI: an engine that is
    interrupted returns its best schedule so far in an ``Outcome`` whose ``details`` carry
    ``"interrupted": True``; ``solve()`` verifies that schedule as usual and raises this
    exception with the verified ``Result`` (or ``None`` when there was no schedule yet). The CLI
    writes what it carries, prints one line saying what was saved, and exits with code 130.
    Subclassing ``KeyboardInterrupt`` keeps every code path that knows nothing of this contract
    behaving as a plain Ctrl-C.
    """

    def __init__(self, message: str, result: object | None = None) -> None:
        super().__init__(message)
        self.result = result
