"""The paper's MILP, constraints (1)-(14) of ``000_*.txt`` section 1.2, written in Pyomo.

Variables (the paper's Table 1, with a chunk ``k = (s, c)`` named by the collective):

- ``x[s, c, e, t]`` (binary): chunk ``(s, c)`` leaves on link ``e`` (index into
  ``topology.links``) in slot ``t``; only ``t + L_e <= H`` exists (the send must arrive in the
  horizon, like the MTEG transmission edges of Algorithm 1 line 10);
- ``y[s, c, v, t]`` (binary): node ``v`` holds chunk ``(s, c)`` at the start of slot ``t``,
  ``t = 0 .. H``;
- ``z[s, c, v, t]`` (binary): ``v`` holds the chunk from slot ``t`` on and did not before (first
  receive); only for demands ``(chunk, v)`` of the collective;
- ``D`` (integer, ``0 .. H``): the makespan. The paper's ``D_{s,v,c}`` is the named expression
  ``arrival[s, c, v] = sum_t t * z[s, c, v, t]`` (equation (14) read as a sum).

Each equation is one named component (``obj_1``, ``c2_initial_hold`` ... ``c14_makespan``) whose
``doc`` quotes the equation; ``docs/model.md`` explains every place where the implemented row
differs from the typeset one (objective, (5), (6), (7) with ``l > 1``, (14)) and why the
implemented one is the canonical slot semantics of DESIGN.md.

The collective enters through its precondition (``holders``), postcondition (``wanted``) and
``demands`` (wanted and not held at slot 0); for AllGather this is exactly the paper's model.
All coefficients and right-hand sides are integers, as the CP-SAT adapter requires.

The default build is *sparse*: variables that reachability fixes to zero are not created
(see :func:`build_model`); ``dense=True`` creates every index so the two can be compared.

Index sets and rows are generated with numpy, one CSR block per equation
(:mod:`ccplan.model.rows`), then installed as that equation's named component; the blocks
stay on the model so the CP-SAT adapter can fill its proto from them without walking every
Pyomo row (``docs/exact.md`` section 2). :func:`horizon_restriction` turns a model for
``H`` into the model for a smaller horizon by fixing variables, so one build answers
several "D <= h ?" questions.

Layout: :mod:`~ccplan.model.milp.plan` (the index sets), :mod:`~ccplan.model.milp.build`
(the rows, :func:`build_model`), :mod:`~ccplan.model.milp.index` (component names,
:class:`ModelIndex`, size, file export, :func:`horizon_restriction`) and
:mod:`~ccplan.model.milp.schedules` (schedules from and to variable values); this package
re-exports their public names.
"""

from __future__ import annotations

from ccplan.model.milp.build import build_model
from ccplan.model.milp.index import (
    CUT_COMPONENTS,
    CUT_THROUGH_COMPONENTS,
    PAPER_COMPONENTS,
    SINGLE_PORT_COMPONENTS,
    Key,
    ModelIndex,
    Term,
    horizon_restriction,
    model_index,
    model_size,
    write_model,
)
from ccplan.model.milp.schedules import hint_from_schedule, schedule_from_model
from ccplan.model.size import INF as INF  # re-exported: ModelIndex.earliest uses it

__all__ = [
    "CUT_COMPONENTS",
    "CUT_THROUGH_COMPONENTS",
    "INF",
    "PAPER_COMPONENTS",
    "SINGLE_PORT_COMPONENTS",
    "Key",
    "ModelIndex",
    "Term",
    "build_model",
    "hint_from_schedule",
    "horizon_restriction",
    "model_index",
    "model_size",
    "schedule_from_model",
    "write_model",
]
