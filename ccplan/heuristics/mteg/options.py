"""The options of MTEGCCA: the paper's algorithm by default, the choices it leaves open as
parameters (task order, trees per task or chunk, the TM distance, the horizon)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ccplan.errors import ValidationError

ORDERS: tuple[str, ...] = ("size", "reverse", "random", "given")
TREES: tuple[str, ...] = ("task", "chunk", "all")
SELECTS: tuple[str, ...] = ("tree-cost", "earliest")


@dataclass(frozen=True)
class MtegOptions:
    """Parameters of MTEGCCA; the defaults are the paper's choices.

    Parameters
    ----------
    order : {"size", "reverse", "random", "given"}
        Step 2 task order: data size descending with ties by source (paper), its reverse, a
        seeded shuffle, or ``task_order`` as given.
    tree : {"task", "chunk", "all"}
        One TM run per Broadcast task over all its chunks' terminals (paper), one per chunk,
        or one over every chunk of the collective (not in the paper: TM then interleaves
        all trees, joining the globally closest terminal; ``order`` ranks the chunks for ties).
    select : {"tree-cost", "earliest"}
        TM's "closest terminal": MTEG cost from the current tree (paper) or arrival slot.
    interleave : bool
        With ``tree="chunk"``, order chunk tasks by chunk index first (round-robin over
        sources) instead of source first.
    seed : int
        Seed of ``order="random"``.
    task_order : tuple of int, optional
        Permutation of the task indices of :func:`decompose` for ``order="given"``.
    horizon : int, optional
        Initial MTEG horizon H; default the latency lower bound.
    growth : float
        Factor by which H grows when a search finds no terminal within H (> 1).
    """

    order: str = "size"
    tree: str = "task"
    select: str = "tree-cost"
    interleave: bool = False
    seed: int = 0
    task_order: tuple[int, ...] | None = None
    horizon: int | None = None
    growth: float = 2.0

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("order", self.order, ORDERS),
            ("tree", self.tree, TREES),
            ("select", self.select, SELECTS),
        ):
            if value not in allowed:
                raise ValidationError(f"mteg option {name} must be one of {allowed}, got {value!r}")
        if self.order == "given" and self.task_order is None:
            raise ValidationError("mteg option task_order is required with order='given'")
        if self.horizon is not None and (not isinstance(self.horizon, int) or self.horizon < 1):
            raise ValidationError(f"mteg option horizon must be a positive integer, got {self.horizon!r}")
        if not self.growth > 1:
            raise ValidationError(f"mteg option growth must be > 1, got {self.growth!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], seed: int = 0) -> MtegOptions:
        """Build from ``SolveOptions.extra`` (unknown keys are ignored: other engines' keys).

        Values may be strings (from the command line): ``horizon``/``seed`` become int,
        ``growth`` float, ``interleave`` bool, ``task_order`` a comma-separated list.
        """
        kwargs: dict[str, Any] = {"seed": seed}
        try:
            for key in ("order", "tree", "select"):
                if key in data:
                    kwargs[key] = str(data[key])
            for key in ("seed", "horizon"):
                if key in data and data[key] is not None:
                    kwargs[key] = int(data[key])
            if "growth" in data:
                kwargs["growth"] = float(data["growth"])
            if "interleave" in data:
                value = data["interleave"]
                if isinstance(value, str):
                    kwargs["interleave"] = value.lower() in {"1", "true", "yes", "on"}
                else:
                    kwargs["interleave"] = bool(value)
            if "task_order" in data:
                raw = data["task_order"]
                items = raw.split(",") if isinstance(raw, str) else raw
                kwargs["task_order"] = tuple(int(x) for x in items)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"mteg options: bad value in {dict(data)!r}: {exc}") from None
        return cls(**kwargs)

    def label(self) -> str:
        """Short name of the variant, for reports."""
        parts = [f"order={self.order}", f"tree={self.tree}", f"select={self.select}"]
        if self.interleave:
            parts.append("interleave")
        if self.order == "random":
            parts.append(f"seed={self.seed}")
        return ",".join(parts)


