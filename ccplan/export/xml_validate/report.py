"""The validator's report: :class:`XmlError` (one problem, located), :class:`XmlReport`.

:data:`ERROR_KINDS` lists every kind of error; ``_Errors`` collects them as the checks run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ERROR_KINDS: tuple[str, ...] = (
    "parse",
    "format",
    "attribute",
    "tb-ids",
    "tb-count",
    "steps",
    "step-index",
    "cnt",
    "offset",
    "peer",
    "channel",
    "connection",
    "dependency",
    "hasdep",
    "nop-without-depid",
    "unmatched",
    "order",
    "cycle",
    "race",
    "double-count",
    "postcondition",
)
"""Every kind of :class:`XmlError`."""


@dataclass(frozen=True)
class XmlError:
    """One problem, located as precisely as possible (rank, thread block, step)."""

    kind: str
    message: str
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None

    def __str__(self) -> str:
        where = []
        if self.gpu is not None:
            where.append(f"GPU {self.gpu}")
        if self.tb is not None:
            where.append(f"tb {self.tb}")
        if self.step is not None:
            where.append(f"step {self.step}")
        prefix = f"[{', '.join(where)}] " if where else ""
        return f"{self.kind}: {prefix}{self.message}"


@dataclass(frozen=True)
class XmlReport:
    """Outcome of :func:`validate_xml`.

    Attributes
    ----------
    ok : bool
        No error.
    errors : tuple of XmlError
    stats : mapping
        ``ngpus, nchannels, nchunksperloop, coll, tbs_max, steps_max, steps_total, nops,
        transfers, critical_path`` (longest happens-before chain, in steps) when computed.
    """

    ok: bool
    errors: tuple[XmlError, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)

    def kinds(self) -> set[str]:
        """The set of error kinds reported."""
        return {e.kind for e in self.errors}


class _Errors:
    def __init__(self) -> None:
        self.items: list[XmlError] = []

    def add(
        self, kind: str, message: str, gpu: int | None = None, tb: int | None = None, step: int | None = None
    ) -> None:
        self.items.append(XmlError(kind, message, gpu, tb, step))
