"""The verifier for combining collectives (ReduceScatter, AllReduce, Reduce).

Data-movement verification asks "does the node hold the chunk?". For combining collectives
the question is "which contributions does the node's copy of the chunk contain?", so this
verifier replays the schedule on *contribution sets*:

- ``S[v, c]`` is the set of GPUs whose contribution to chunk ``c`` is summed in ``v``'s buffer.
  At slot 0 it is ``{v}`` for every contributor of ``c`` (the ``pre`` table) and empty
  elsewhere (switches, non-contributors).
- A send ``(c, u -> v, t)`` carries ``P = S[u, c]`` as it is at the start of slot ``t``
  (arrivals due at ``t`` are applied first, as in the canonical semantics: a chunk is usable
  at the head from ``t + L``). An empty ``P`` is a causality violation.
- ``reduce=True`` (receive-and-reduce): at ``t + L``, ``S[v, c] := S[v, c] | P``. If the two
  sets intersect, some contribution would be counted twice: a ``double-count`` violation.
- ``reduce=False`` (copy): at ``t + L``, ``S[v, c] := P``. A copy is valid when ``P`` is the
  complete set (the finished reduction, as in the AllGather half of AllReduce), or when the
  receiver holds nothing live: its set is empty or it has already sent that set on (it is a
  relay, e.g. a switch or a GPU done with the chunk). Overwriting a live, unsent partial sum
  with an incomplete set loses contributions: a ``copy-overwrite`` violation. A complete copy
  arriving at a node that already holds the complete set is a ``duplicate-receive``.
- Arrivals in the same slot are applied copies first, then reduces (a deterministic order; any
  order gives the same verdict when the schedule is valid).
- Capacity over the occupancy window, single-port, unknown chunk and missing link exactly as
  in :func:`ccplan.schedule.verify.verify`.
- Under ``switch_model == "cut-through"`` (docs/model.md) a switch holds nothing: what arrives
  at it in slot ``a`` is there in slot ``a`` only (a later arrival finds it empty), and it sends
  a chunk only in a slot in which a partial sum (or copy) of that chunk arrives, carrying what
  arrived. A hop from a switch into a GPU delivers at ``t + delta`` (``instance.latency``, maybe
  ``t``): within a slot the switches' sends are read first, then the slot's arrivals at the
  other nodes are applied (copies first, then reduces, these included), then their sends.
- Postcondition: every ``post`` node ends with exactly the complete set. The makespan is the
  first slot at whose start this holds: the largest slot at which a ``post`` node's set became
  complete (once complete, a valid schedule cannot make it incomplete again).

Reduction at switches (in-network reduction, like NVLS/SHARP) is a declared capability: a
receive-and-reduce into a switch that already holds a partial sum is a ``switch-reduce``
violation unless the switch is in the instance's
:attr:`~ccplan.instances.instance.Instance.reducing_switches` (``--switch-reduce``, or
``"reduce": true`` on the switch node). A switch that cannot reduce still relays: a partial
sum may land in its empty (or already sent-on) buffer and leave again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.report import Occupancy, Report, Violation

COMBINING_VIOLATION_KINDS: tuple[str, ...] = (
    "unknown-chunk",
    "no-link",
    "causality",
    "double-count",
    "copy-overwrite",
    "duplicate-receive",
    "switch-reduce",
    "capacity",
    "single-port-send",
    "single-port-receive",
    "postcondition",
)


def _names(mask: int, members: tuple[int, ...]) -> list[int]:
    return [members[i] for i in range(len(members)) if mask >> i & 1]


def verify_combining(instance: Instance, schedule: Schedule) -> Report:
    """Check a combining schedule on contribution sets (see the module docstring).

    Parameters
    ----------
    instance : Instance
        Its collective must have ``combining=True``; its
        :attr:`~ccplan.instances.instance.Instance.reducing_switches` are the switches that
        may add two partial sums.
    schedule : Schedule

    Returns
    -------
    Report
        ``arrivals[(chunk, node)]`` is the slot from which ``node`` holds the complete
        reduction of ``chunk`` (only for nodes that end with it).
    """
    topo = instance.topology
    coll = instance.collective
    latency = instance.latency
    reducing = instance.reducing_switches
    violations: list[Violation] = []

    members: dict[Chunk, tuple[int, ...]] = {c: tuple(sorted(h)) for c, h in coll.holders.items()}
    bit: dict[Chunk, dict[int, int]] = {c: {v: 1 << i for i, v in enumerate(m)} for c, m in members.items()}
    full: dict[Chunk, int] = {c: (1 << len(m)) - 1 for c, m in members.items()}
    state: dict[tuple[int, Chunk], int] = {}
    forwarded: dict[tuple[int, Chunk], bool] = {}
    bufferless = instance.bufferless
    arrived: dict[tuple[int, Chunk], int] = {}  # last arrival slot at a bufferless switch
    full_at: dict[tuple[Chunk, int], int] = {}
    for c, m in members.items():
        for v in m:
            state[(v, c)] = bit[c][v]
            if bit[c][v] == full[c]:
                full_at[(c, v)] = 0

    pending: dict[int, list[tuple[Send, int]]] = defaultdict(list)
    occupied = Occupancy(instance)

    def apply(slot: int, items: Iterable[tuple[Send, int]]) -> None:
        # Copies first, then reduces: see the module docstring.
        for send, payload in sorted(items, key=lambda x: (x[0].reduce, x[0])):
            c, v = send.chunk, send.dst
            key = (v, c)
            cur = state.get(key, 0)
            if v in bufferless and arrived.get(key) != slot:
                cur = 0  # a cut-through switch kept nothing from an earlier slot
            where = (send.chunk, (send.src, send.dst), send.slot)
            if send.reduce:
                overlap = cur & payload
                if overlap:
                    violations.append(Violation(
                        "double-count",
                        f"{send.describe()}: node {v} already holds contributions "
                        f"{_names(overlap, members[c])} of the partial sum it receives at slot {slot} "
                        f"(they would be counted twice)", *where))
                if cur and topo.kind[v] == "switch" and v not in reducing:
                    violations.append(Violation(
                        "switch-reduce",
                        f"{send.describe()}: switch {v} would add two partial sums at slot {slot}, "
                        "but it cannot reduce (no --switch-reduce, no \"reduce\": true on the switch)",
                        *where))
                new = cur | payload
            else:
                if payload == full[c]:
                    if cur == full[c]:
                        violations.append(Violation(
                            "duplicate-receive",
                            f"{send.describe()}: node {v} already holds the complete reduction "
                            f"(since slot {full_at.get((c, v))})", *where))
                elif cur and not forwarded.get(key, False):
                    violations.append(Violation(
                        "copy-overwrite",
                        f"{send.describe()}: the copy overwrites node {v}'s unsent partial sum "
                        f"{_names(cur, members[c])} with the incomplete set {_names(payload, members[c])} "
                        f"at slot {slot} (contributions would be lost)", *where))
                new = payload
            state[key] = new
            forwarded[key] = False
            if v in bufferless:
                arrived[key] = slot
            if new == full[c]:
                full_at.setdefault((c, v), slot)
            else:
                full_at.pop((c, v), None)

    def drain(upto: int | None, only: frozenset[int] | None = None) -> None:
        for slot in sorted(s for s in pending if upto is None or s <= upto):
            items = pending.pop(slot)
            if only is not None and slot == upto:
                # the arrivals of this very slot at ``only`` now, the others after its sends
                later = [x for x in items if x[0].dst not in only]
                items = [x for x in items if x[0].dst in only]
                if later:
                    pending[slot] = later
            apply(slot, items)

    def read(t: int, sends: list[Send]) -> None:
        reads: list[tuple[Send, int, int]] = []
        for send in sends:
            key = (send.src, send.dst)
            if send.chunk not in members:
                violations.append(Violation(
                    "unknown-chunk", f"{send.describe()}: the collective has no such chunk",
                    send.chunk, key, send.slot))
                continue
            if key not in topo.link_index:
                violations.append(Violation(
                    "no-link", f"{send.describe()}: the topology has no link {send.src}->{send.dst}",
                    send.chunk, key, send.slot))
                continue
            link = topo.link_index[key]
            payload = state.get((send.src, send.chunk), 0)
            if send.src in bufferless and arrived.get((send.src, send.chunk)) != t:
                when = arrived.get((send.src, send.chunk))
                violations.append(Violation(
                    "causality",
                    f"{send.describe()}: cut-through switch {send.src} holds nothing and the chunk "
                    f"last passes it in {'no slot' if when is None else f'slot {when}'}, not in slot {t}",
                    send.chunk, key, send.slot))
                continue
            if not payload:
                violations.append(Violation(
                    "causality",
                    f"{send.describe()}: node {send.src} holds no contribution to the chunk at the "
                    f"start of slot {t}", send.chunk, key, send.slot))
                continue
            reads.append((send, payload, link))
            occupied.add(send, link)
        # Every send of slot t reads its payload before any of them is marked as sent on.
        for send, payload, link in reads:
            forwarded[(send.src, send.chunk)] = True
            pending[t + int(latency[link])].append((send, payload))

    by_slot: dict[int, list[Send]] = defaultdict(list)
    for send in schedule.sends:
        by_slot[send.slot].append(send)
    for t in sorted(by_slot):
        if bufferless:
            # Cut-through: the switches read what arrives at them in slot t and send first;
            # their hops into GPUs may land in slot t itself (L = delta = 0), before the
            # GPUs' sends of slot t read their buffers.
            drain(t, bufferless)
            first = [s for s in by_slot[t] if s.src in bufferless]
            read(t, first)
            drain(t)
            read(t, [s for s in by_slot[t] if s.src not in bufferless])
        else:
            drain(t)
            read(t, by_slot[t])
    drain(None)

    violations.extend(occupied.violations())

    makespan = 0
    missing = False
    for c, nodes in coll.post:
        for v in nodes:
            have = state.get((v, c), 0)
            if have != full[c]:
                missing = True
                lacking = _names(full[c] & ~have, members[c])
                violations.append(Violation(
                    "postcondition",
                    f"chunk {list(c)} ends at node {v} without the contributions of {lacking}",
                    c, None, None))
            else:
                makespan = max(makespan, full_at[(c, v)])
    ms = None if missing else makespan
    return Report(
        ok=not violations,
        violations=tuple(violations),
        makespan_slots=ms,
        makespan_us=None if ms is None else instance.slots_to_us(ms),
        num_sends=len(schedule.sends),
        arrivals=dict(full_at),
    )


def ports_reflect(instance: Instance) -> bool:
    """Whether the per-link reflection keeps the port rule: always without single-port;
    with it, when the links out of every node share one ``delta`` and so do the links into
    every node (then a node's links are all reflected by one constant). ``l`` may differ.
    (docs/collectives.md, "Duality".)"""
    if not instance.single_port:
        return True
    topo = instance.topology
    delay = instance.delay
    for links in (topo.out_links, topo.in_links):
        for js in links.values():
            if len({int(delay[j]) for j in js}) > 1:
                return False
    return True
