"""The rows of a built model as numpy arrays, kept beside its Pyomo components.

:func:`ccplan.model.milp.build_model` generates every equation's rows as one CSR block
(numpy, vectorised over the index sets) and then installs the block as the equation's named
Pyomo component. It keeps the blocks on the model (:func:`attach`), so the CP-SAT adapter can
fill its proto from the arrays instead of walking every Pyomo row again. The adapter uses a
block only while its component is unchanged (same rows, all active; see
:meth:`ArrayForm.block_for`); everything else goes through the row-by-row path.

No Pyomo and no CP-SAT import here: the arrays are plain integers.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.errors import ValidationError

NO_BOUND = np.iinfo(np.int64).max
"""Marker in ``lb``/``ub`` for a missing side (``-NO_BOUND`` below, ``NO_BOUND`` above)."""

_ATTR = "_ccplan_array_form"


@dataclass(frozen=True)
class RowBlock:
    """The rows of one indexed constraint component, ``lb <= A x <= ub``, in CSR form.

    Attributes
    ----------
    name : str
        The component's name (``c6_buffer``, ...).
    keys : list of tuple
        Pyomo index of each row, in row order.
    indptr : numpy.ndarray
        ``int64``, ``rows + 1`` entries: row ``r`` holds entries ``indptr[r] .. indptr[r+1]-1``.
    cols : numpy.ndarray
        ``int64`` column (position in :attr:`ArrayForm.columns`) of each entry.
    coefs : numpy.ndarray
        ``int64`` coefficient of each entry.
    lb, ub : numpy.ndarray
        ``int64`` bounds per row; ``-NO_BOUND`` / ``NO_BOUND`` for a missing side. A row with
        ``lb == ub`` is an equality.
    """

    name: str
    keys: list[Any]
    indptr: np.ndarray
    cols: np.ndarray
    coefs: np.ndarray
    lb: np.ndarray
    ub: np.ndarray

    def __post_init__(self) -> None:
        rows = len(self.keys)
        if self.indptr.shape != (rows + 1,) or self.lb.shape != (rows,) or self.ub.shape != (rows,):
            raise ValidationError(f"row block {self.name}: {rows} keys but indptr/lb/ub of other lengths")
        if self.cols.shape != self.coefs.shape or (rows and int(self.indptr[-1]) != self.cols.size):
            raise ValidationError(f"row block {self.name}: cols/coefs do not match indptr")

    @property
    def rows(self) -> int:
        return len(self.keys)

    @property
    def nonzeros(self) -> int:
        return int(self.cols.size)

    def row(self, r: int) -> tuple[list[tuple[int, int]], int | None, int | None]:
        """Row ``r`` as ``([(column, coefficient), ...], lb or None, ub or None)``."""
        a, b = int(self.indptr[r]), int(self.indptr[r + 1])
        terms = list(zip(self.cols[a:b].tolist(), self.coefs[a:b].tolist(), strict=True))
        lo, hi = int(self.lb[r]), int(self.ub[r])
        return terms, None if lo == -NO_BOUND else lo, None if hi == NO_BOUND else hi


def csr_block(
    name: str,
    keys: list[Any],
    row_of_entry: np.ndarray,
    cols: np.ndarray,
    coefs: np.ndarray,
    lb: np.ndarray,
    ub: np.ndarray,
) -> RowBlock:
    """A :class:`RowBlock` from entries in any order (``row_of_entry[i]`` is entry i's row).

    Entries keep their relative order within a row (stable sort), so a row's terms read in
    the order they were generated.
    """
    order = np.argsort(row_of_entry, kind="stable")
    counts = np.bincount(row_of_entry, minlength=len(keys))
    indptr = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return RowBlock(name, keys, indptr, cols[order].astype(np.int64), coefs[order].astype(np.int64),
                    lb.astype(np.int64), ub.astype(np.int64))


@dataclass
class ArrayForm:
    """Columns and row blocks of a model (see the module docstring).

    Attributes
    ----------
    columns : list
        The Pyomo variable (``VarData``) of each column, in column order.
    blocks : dict
        Component name -> :class:`RowBlock`.
    components : dict
        Component name -> the installed Pyomo component.
    expressions : dict
        Component name -> the relational expression of each row at install time; a row
        whose expression was replaced since is detected by identity.
    """

    columns: list[Any]
    blocks: dict[str, RowBlock] = field(default_factory=dict)
    components: dict[str, Any] = field(default_factory=dict)
    expressions: dict[str, list[Any]] = field(default_factory=dict)

    def block_for(self, component: Any) -> RowBlock | None:
        """The block of ``component`` if the component still holds exactly the recorded rows
        (same object, same number of rows, every row active, no row expression replaced);
        else None, and the caller translates the component row by row."""
        name = component.local_name
        block = self.blocks.get(name)
        if block is None or id(self.components.get(name)) != id(component):
            return None
        if len(component) != block.rows:
            return None
        recorded = self.expressions[name]
        for data, expr in zip(component.values(), recorded, strict=True):
            if not data.active or data.expr is not expr:
                return None
        return block


def attach(model: Any, form: ArrayForm) -> None:
    """Keep ``form`` on ``model`` (read back with :func:`array_form`)."""
    object.__setattr__(model, _ATTR, form)


def array_form(model: Any) -> ArrayForm | None:
    """The :class:`ArrayForm` attached to ``model``, or None."""
    form = getattr(model, _ATTR, None)
    return form if isinstance(form, ArrayForm) else None


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a model is built or translated.

    Both create hundreds of thousands of small objects that stay alive; every generation-2
    collection then walks the whole model again, which tripled the build time of NDv2 2
    chassis 64 KB (measured in ``docs/exact.md``). Reference counting still frees what
    dies; the collector resumes (and runs as usual) afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
