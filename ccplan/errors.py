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


class SolverUnavailableError(CCPlanError):
    """A requested solver backend is not installed; the message names the package."""
