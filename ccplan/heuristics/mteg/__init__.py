"""MTEGCCA: collective scheduling on the multicast time-expanded graph (paper Section 2).

The paper (``000_*.txt``, Section 2) builds the *multicast time-expanded graph* (MTEG) of
Algorithm 1 and schedules a collective as a sequence of multicast (Steiner) trees:

Step 1
    decompose the collective into Broadcast/Multicast tasks (:func:`decompose`);
Step 2
    sort the tasks by data size, largest first (:func:`order_tasks`);
Step 3
    for each task build a Steiner tree in the MTEG with the Takahashi-Matsuyama (TM)
    heuristic, rooted at the source's slot-0 vertex, spanning the task's virtual terminals;
Step 4
    mark the link-slots the tree uses as occupied (:class:`Reservations`);
Step 5
    repeat Steps 3-4 until every task is scheduled.

MTEG of Algorithm 1 and how this module uses it
-----------------------------------------------
Algorithm 1 creates a vertex ``u_t`` for every node ``u`` and slot ``t = 0..H``, a storage
edge ``(u_t, u_{t+1})`` of cost 1, a transmission edge ``(u_t, v_{t+L(u,v)})`` of cost
``L(u,v)`` for every link, and virtual terminal vertices ``U_{s,c}`` (chunk ``c`` of source
``s`` has arrived at ``u``) reached from every ``u_t`` by a cost-0 edge. :func:`build_mteg`
materialises exactly that graph (networkx) for small instances and documentation; the
scheduler does not, because the graph has a structure that makes it unnecessary:

- every edge goes from slot ``t`` to a later slot and costs the slot difference, so a path
  from ``x_{t0}`` to ``u_t`` costs exactly ``t - t0``; a path from the root ``s_0`` to ``u_t``
  costs ``t``, and the shortest path from the root to a terminal is an *earliest-arrival* path;
- removing used edges (Step 4) is "link ``(u,v)`` is busy in slot ``t``"; a transmission
  edge is usable iff the link has capacity ``omega`` left in every slot of its occupancy
  window ``t .. t+l-1`` (the canonical semantics of DESIGN.md, the paper's (7) for ``l = 1``),
  and, with ``single_port``, iff both ports are free in that window;
- the terminal ``U_{s,c}`` at node ``u`` is reached the first time the path enters ``u``:
  the zero-cost virtual edges mean "any slot"; the arrival slot is the slot of the entry vertex.

So the MTEG is kept implicitly as (node, slot) pairs plus a table of occupied link-slots, and
shortest paths are time-dependent Dijkstra searches over (node, slot). A TM tree of one chunk
is kept as, per node ``v`` it spans, the slot interval ``[a(v), b(v)]`` of its tree vertices:
``a(v)`` is the arrival and ``b(v)`` the last slot from which the tree already stores the
chunk at ``v`` (a storage edge run ``v_a .. v_b``); a path leaving ``v`` at slot ``t`` costs
``max(0, t - b(v))`` of extra storage edges before its first transmission edge.

Takahashi-Matsuyama (Step 3.2) on this graph
--------------------------------------------
TM starts from the root and repeatedly joins the terminal closest to the current tree by a
shortest path. Two selection rules are offered (``select``):

``"tree-cost"`` (the paper's rule, default)
    distance = MTEG cost of the cheapest path from *any* tree vertex, i.e. arrival slot
    minus the slot of the tree vertex where it leaves the tree; ties by earliest arrival,
    then node id. Computed per TM iteration by a label-setting search over (node, slot)
    with Pareto labels ``(arrival, origin)`` at relay nodes. The one-hop paths out of the
    trees (seeds) are kept in one heap per task and updated when a path joins, so an
    iteration costs about the changes it makes, not the tree's size
    (:class:`~ccplan.heuristics.mteg.treecost._TreeCostSearch`).
``"earliest"``
    distance = arrival slot (cost of the path from the root ``s_0``). The earliest-arrival
    shortest-path tree from the current tree is a fixed point of TM's loop (joining one of
    its paths leaves every other path valid and equally early), so one Dijkstra per chunk
    serves all of its terminals; paths are re-validated before they are joined (single-port
    and other chunks' reservations) and recomputed when stale.

A node holds a chunk at most once: a path never enters a node that already holds the chunk
(its tree), and never revisits a node.

Choices the paper leaves open (parameters of :class:`MtegOptions`; defaults = the paper)
-----------------------------------------------------------------------------------------
- ``order``: task order of Step 2 (``"size"``: data size descending, ties by source id);
- ``tree``: ``"task"`` keeps one TM run per Broadcast task covering the virtual terminals of
  all its chunks (the paper); since a transmission edge carries one chunk per slot, the task's
  tree is kept as one sub-tree per chunk and TM picks the closest terminal over all of them.
  ``"chunk"`` runs TM once per chunk (each chunk its own task); ``"all"`` (not in the paper)
  runs one TM over every chunk of the collective, interleaving all trees;
- ``interleave``: with ``tree="chunk"``, order chunk tasks round-robin over sources;
- ``select``: the TM distance (above);
- ``horizon``/``growth``: the initial H and how it grows (below).

Horizon
-------
The paper's MTEG has a fixed horizon ``H``. Here ``H`` starts at the latency lower bound (no
demand can arrive earlier) unless given, and a TM search that finds no terminal within
``H`` extends the MTEG by layers, ``H <- max(ceil(growth * H), needed)``, and searches again.
Trees built before an extension are trees of the extended MTEG too, so nothing is redone.
The user never guesses ``H``; the final ``H`` (the makespan) is reported.

Complexity
----------
Paper (Section 2.4): ``|V_M| = |V| H + C(|V|-1)``, ``|E_M| = |V|(H-1) + |E| H + (|V|-1) C H``,
one TM tree ``O(k n^2)`` with ``k = C(|V|-1)`` terminals and ``n = |V_M|``, i.e.
``O(C |V|^3 (H+C)^2)`` per Broadcast and ``O(C |V|^4 (H+C)^2)`` for AllGather.
This implementation: a ``"tree-cost"`` TM iteration pops the cheapest seed from the task's
heap (re-checking it against the reservations: ``O(log)`` amortised with the union-find "next
free slot" per link) and, only when a relay is cheaper than every terminal seed, runs the
label-setting search through relays. A joined path pushes the seeds of its new nodes and, if
its root now stores the chunk longer, re-pushes the root's seeds whose cost fell. So a tree
of ``k`` terminals costs about ``k`` heap operations per out-link of its nodes, and AllGather
``O(C |V| |E| log |E|)`` plus the relay searches (a few per tree on NDv2, DGX2 and AMD), i.e.
about the schedule's size. The fresh search per iteration it replaces re-seeded from every
tree node (``O(|E|)`` per iteration, ``O(C^2 |V|^2 |E|)`` for AllGather): with the same
schedules, NDv2 x48 takes 5x, NDv2 x128 14x and a 32x32 torus 30x less CPU time
(``docs/scale.md``, "``mteg`` at scale"). Relay searches are still fresh per iteration, which
dominates on leaf-spine.
``"earliest"`` costs one Dijkstra ``O(|E| log |V|)`` per chunk tree plus re-validations,
``O(C |V| |E| log |V|)`` for AllGather. Memory is ``O(|E| H)`` for the occupancy table,
``O(C |V|^2)`` for the trees and four integer lists per send until the schedule is built from
them as columns.

Modules
-------
:mod:`~ccplan.heuristics.mteg.options` (:class:`MtegOptions`),
:mod:`~ccplan.heuristics.mteg.graph` (Algorithm 1 and :class:`Reservations`),
:mod:`~ccplan.heuristics.mteg.tasks` (Steps 1-2), :mod:`~ccplan.heuristics.mteg.treecost`
(Step 3, tree-cost search), :mod:`~ccplan.heuristics.mteg.builder` (Steps 3-5, the horizon)
and :mod:`~ccplan.heuristics.mteg.engine` (:func:`mteg_schedule`, :func:`extend_schedule`, the
engine ``mteg``).
"""

from ccplan.heuristics.mteg.builder import latency_bound
from ccplan.heuristics.mteg.engine import MtegResult, extend_schedule, mteg_engine, mteg_schedule
from ccplan.heuristics.mteg.graph import Reservations, build_mteg
from ccplan.heuristics.mteg.options import ORDERS, SELECTS, TREES, MtegOptions
from ccplan.heuristics.mteg.tasks import Task, decompose, merge_tasks, order_tasks

__all__ = [
    "ORDERS",
    "SELECTS",
    "TREES",
    "MtegOptions",
    "MtegResult",
    "Reservations",
    "Task",
    "build_mteg",
    "decompose",
    "extend_schedule",
    "latency_bound",
    "merge_tasks",
    "mteg_engine",
    "mteg_schedule",
    "order_tasks",
]
