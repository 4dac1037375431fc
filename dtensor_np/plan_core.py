# cython: language_level=3, annotation_typing=False, auto_pickle=False, boundscheck=False, wraparound=False, initializedcheck=False
"""The planner's search over int-keyed states: the A* (``FULL``, ``LANDING``), the probes, the bounds.

One text, run two ways: as Python, or compiled by Cython (its pure-Python
mode: ``plan_core.pxd`` beside this file gives the C types, ``setup.py``
compiles it at install where there is a C compiler).  Both run the same moves
in the same order, the same float operations in the same order (the build
turns off fused multiply-add), the same tie-breaks and the same work count, so
they return the same path, cost, completeness and work (tests/test_search_core.py).
The algorithm, its guarantees and its budgets: :mod:`dtensor_np.plan_search`.

Two bodies, chosen by ``cython.compiled``, only in the containers the search
keeps its data in: :class:`Table` (an open-addressing hash table in C, a dict
in Python), :class:`Heap` (a binary heap of C structs, :mod:`heapq` of tuples),
:class:`MoveList` and :class:`Links` (growable C arrays of structs, lists of
tuples; the three on :class:`Array`), with three helpers that only their C
bodies call (:func:`mix`, :func:`less`, :func:`grown`); and in the block of
``Core.__init__`` that makes a problem's arrays (C arrays of fixed size
compiled, lists of the problem's size in Python).  So compiled,
:func:`fits` limits a problem to :data:`ML` mesh dims of size > 1, :data:`MD`
tensor dims, :data:`MM` mesh dims and keys of 64 bits (plan_problem then runs
this text as Python: native.twin); as Python it holds any.

A state is an int (:meth:`Core.key_of`): per mesh dim of size > 1, the tensor
dim + 1 it splits (0: none), its place in that tensor dim's stack of mesh dims
and a Partial flag.  A move is (kind, number of mesh dims, the mesh dims
packed 8 bits each, tensor dim landed on or -1, group size, next state).

Example:
    >>> from dtensor_np.cost_model import CostModel
    >>> core = Core((0, 1), (2, 2), 2, 256, (((0, 1), ()), 0), (((), ()), 0), [-1, -1], CostModel(), 2)
    >>> core.astar(FULL, 100.0, float("inf"), True)[0]
    [('all_gather', (0, 1), -1)]
"""

from __future__ import annotations

from heapq import heappop, heappush

from .cost_model import CostModel
from .plan_graph import kind_cost

try:
    import cython
except ImportError:  # run as Python where Cython is not installed (a build requirement only)
    from . import cython_shim as cython

__all__ = ["EXPAND_WORK", "FULL", "KINDS", "LANDING", "TIGHT_WORK", "UNCAPPED", "Core", "fits"]

# The move families: every move (FULL: finishing it proves a path optimal), or only the moves
# that land a mesh dim in its target slot, undo a split or reduce (LANDING).
FULL, LANDING = 0, 1
# Move kinds, the collectives first (a kind <= A2A is a collective).
AG, AR, RS, A2A, CHUNK, PART = 0, 1, 2, 3, 4, 5
KINDS = ("all_gather", "all_reduce", "reduce_scatter", "all_to_all", "chunk", "partition")
# The cap when there is none (no greedy plan): more collectives than any path has.
UNCAPPED = 1 << 30
# The full search counts an expansion as EXPAND_WORK moves and a sharper bound (Core.tight) as
# TIGHT_WORK, so that its budget stands for time as the probes' does (benchmarks/README.md).
EXPAND_WORK = 2
TIGHT_WORK = 3
# The probes' heap orders starts by (f, depth, order of pushes): the depth sits above this bit.
DEPTH_SHIFT = 40
INF = float("inf")
ONE = 1  # (compiled: a 64-bit unsigned 1, for shifts past 31 bits)
HASH_MUL = 0x62A9D9ED799705F5  # the C tables' hash multiplier
ABSENT = (False, 0.0, 0)  # Table.get of a key it does not hold (the Python body)


def fits(live: int, ndim: int, nmesh: int, nbytes: int, ranks: int) -> bool:
    """Whether a problem fits this module as it runs: compiled, at most :data:`ML` mesh dims of size > 1
    (``live``), :data:`MD` tensor dims, :data:`MM` mesh dims, keys of 64 bits, fewer than 2**53 bytes and
    ranks (counted in 64-bit ints and doubles); as Python, any.

    Example:
        >>> fits(3, 2, 3, 1024, 8)
        True
    """
    if not cython.compiled:
        return True
    td_bits = max(1, int(ndim).bit_length())
    key_bits = live * (td_bits + max(1, int(live - 1).bit_length()) + 1)
    return (live <= ML and ndim <= MD and nmesh <= MM and key_bits <= 64 and nbytes < 2 ** 53
            and ranks < 2 ** 53)


# --------------------------------------------------------------------------
# the containers: a C body and a Python body each
# --------------------------------------------------------------------------
class Table:
    """A map from (key, sub) to a record (found, a, i): a float and an int.  :meth:`put` right after
    :meth:`get` of the same key takes the slot that get found, in C (one probe for both)."""

    def __init__(self, cap: int, stride: int) -> None:
        """``cap``: the C table's first size (a power of 2); ``stride``: more than any ``sub``."""
        if cython.compiled:
            self.slots = cython.cast(SlotP, calloc(cap, cython.sizeof(Slot)))
            if not self.slots:
                raise MemoryError()
            self.cap = cap
            self.size = 0
            self.gen = 1
            self.last = -1
        else:
            self.items = {}
            self.stride = stride

    def __dealloc__(self) -> None:
        if cython.compiled:
            free(self.slots)

    def get(self, key: int, sub: int) -> tuple[bool, float, int]:
        """(True, a, i) of (key, sub), or (False, 0.0, 0)."""
        if cython.compiled:
            mask = self.cap - 1
            i = mix(key, sub) & mask
            while True:
                s = self.slots + i
                if s.gen != self.gen or (s.key == key and s.sub == sub):
                    self.last = i
                    self.last_key = key
                    self.last_sub = sub
                    if s.gen != self.gen:
                        return False, 0.0, 0
                    return True, s.a, s.i
                i = (i + 1) & mask
        else:
            return self.items.get(key * self.stride + sub, ABSENT)

    def put(self, key: int, sub: int, a: float, i: int) -> None:
        """Sets the record of (key, sub) to (a, i)."""
        if cython.compiled:
            if (self.size + 1) * 2 > self.cap:
                self.grow()
            if self.last < 0 or self.last_key != key or self.last_sub != sub:
                self.get(key, sub)
            s = self.slots + self.last
            if s.gen != self.gen:
                s.gen = self.gen
                s.key = key
                s.sub = sub
                self.size += 1
            s.a = a
            s.i = i
        else:
            self.items[key * self.stride + sub] = (True, a, i)

    def clear(self) -> None:
        """Empties the table (in C in O(1): a new generation; the slots wiped every 2**32 - 1)."""
        if cython.compiled:
            self.size = 0
            self.last = -1
            self.gen += 1
            if self.gen == 0:
                for j in range(self.cap):
                    self.slots[j].gen = 0
                self.gen = 1
        else:
            self.items.clear()

    def grow(self) -> None:
        """(C) The table at twice its size."""
        if cython.compiled:
            self.last = -1
            old = self.slots
            old_cap = self.cap
            self.slots = cython.cast(SlotP, calloc(old_cap * 2, cython.sizeof(Slot)))
            if not self.slots:
                self.slots = old
                raise MemoryError()
            self.cap = old_cap * 2
            mask = self.cap - 1
            for j in range(old_cap):
                if old[j].gen == self.gen:
                    i = mix(old[j].key, old[j].sub) & mask
                    while self.slots[i].gen == self.gen:
                        i = (i + 1) & mask
                    self.slots[i] = old[j]
            free(old)


def mix(key: int, sub: int) -> int:
    """(C) A table slot's hash of (key, sub)."""
    x = key ^ (sub << 32)
    x ^= x >> 33
    x *= HASH_MUL
    return x ^ (x >> 29)


class Array:
    """The storage of :class:`Heap`, :class:`MoveList` and :class:`Links`: compiled, a growable C array of
    their structs (``itemsize`` bytes each); as Python, a list of tuples."""

    def __init__(self, cap: int, itemsize: int) -> None:
        if cython.compiled:
            self.data = malloc(cap * itemsize)
            if not self.data:
                raise MemoryError()
            self.cap = cap
            self.size = 0
            self.itemsize = itemsize
        else:
            self.items = []

    def __dealloc__(self) -> None:
        if cython.compiled:
            free(self.data)

    def count(self) -> int:
        if cython.compiled:
            return self.size
        else:
            return len(self.items)

    def clear(self) -> None:
        if cython.compiled:
            self.size = 0
        else:
            self.items.clear()

    def reserve(self) -> None:
        """(C) Room for one more item: the array at twice its size where it is full."""
        if cython.compiled:
            if self.size == self.cap:
                self.data = grown(self.data, self.cap * 2 * self.itemsize)
                self.cap *= 2


class Heap(Array):
    """A binary heap of search nodes (f, tie, g, key, used, shards, link), least (f, tie) first; ties are
    unique, so any heap pops alike."""

    def __init__(self, cap: int) -> None:
        Array.__init__(self, cap, cython.sizeof(Node) if cython.compiled else 0)

    def push(self, f: float, tie: int, g: float, key: int, used: int, shards: int, link: int) -> None:
        if cython.compiled:
            self.reserve()
            nodes = cython.cast(NodeP, self.data)
            node = Node(f=f, tie=tie, g=g, key=key, used=used, shards=shards, link=link)
            i = self.size
            self.size += 1
            while i > 0:
                parent = (i - 1) >> 1
                if not less(cython.address(node), nodes + parent):
                    break
                nodes[i] = nodes[parent]
                i = parent
            nodes[i] = node
        else:
            heappush(self.items, (f, tie, g, key, used, shards, link))

    def pop(self) -> tuple[float, int, float, int, int, int, int]:
        """The least node (the heap is not empty)."""
        if cython.compiled:
            nodes = cython.cast(NodeP, self.data)
            top = nodes[0]
            self.size -= 1
            if self.size:
                last = nodes[self.size]
                i = 0
                while True:
                    child = 2 * i + 1
                    if child >= self.size:
                        break
                    if child + 1 < self.size and less(nodes + child + 1, nodes + child):
                        child += 1
                    if not less(nodes + child, cython.address(last)):
                        break
                    nodes[i] = nodes[child]
                    i = child
                nodes[i] = last
            return top.f, top.tie, top.g, top.key, top.used, top.shards, top.link
        else:
            return heappop(self.items)


def less(a: object, b: object) -> bool:
    """(C) Whether node ``a`` comes before node ``b``."""
    return a.f < b.f or (a.f == b.f and a.tie < b.tie)  # type: ignore[attr-defined]


class MoveList(Array):
    """The moves out of one state (kind, number of mesh dims, mesh dims packed, tensor dim, group size,
    next state), refilled for each state expanded."""

    def __init__(self, cap: int) -> None:
        Array.__init__(self, cap, cython.sizeof(Move) if cython.compiled else 0)

    def add(self, kind: int, n: int, dims: int, e: int, k: int, nxt: int) -> None:
        if cython.compiled:
            self.reserve()
            cython.cast(MoveP, self.data)[self.size] = Move(nxt=nxt, dims=dims, k=k, kind=kind, n=n, e=e)
            self.size += 1
        else:
            self.items.append((kind, n, dims, e, k, nxt))

    def get(self, i: int) -> tuple[int, int, int, int, int, int]:
        if cython.compiled:
            mv = cython.cast(MoveP, self.data) + i
            return mv.kind, mv.n, mv.dims, mv.e, mv.k, mv.nxt
        else:
            return self.items[i]


class Links(Array):
    """The searches' paths: per node, the move that reached it and its parent's index (-1: the start)."""

    def __init__(self, cap: int) -> None:
        Array.__init__(self, cap, cython.sizeof(Link) if cython.compiled else 0)

    def add(self, parent: int, moves: MoveList, i: int) -> int:
        """A new link: move ``i`` of ``moves`` after ``parent``; its index."""
        if cython.compiled:
            self.reserve()
            lk = cython.cast(LinkP, self.data) + self.size
            lk.parent = parent
            lk.move = cython.cast(MoveP, moves.data)[i]
            self.size += 1
            return self.size - 1
        else:
            self.items.append((parent, moves.items[i]))
            return len(self.items) - 1

    def get(self, i: int) -> tuple[int, int, int, int, int]:
        """(parent, kind, number of mesh dims, mesh dims packed, tensor dim) of link ``i``."""
        if cython.compiled:
            lk = cython.cast(LinkP, self.data) + i
            return lk.parent, lk.move.kind, lk.move.n, lk.move.dims, lk.move.e
        else:
            parent, (kind, n, dims, e, _, _) = self.items[i]
            return parent, kind, n, dims, e


def grown(p: object, nbytes: int) -> object:
    """(C) ``p`` reallocated to ``nbytes``."""
    q = realloc(p, nbytes)  # type: ignore[name-defined]  # noqa: F821
    if not q:
        raise MemoryError()
    return q


# --------------------------------------------------------------------------
# the search: one body
# --------------------------------------------------------------------------
def bit_length(x: int) -> int:
    n = 0
    while x:
        x >>= 1
        n += 1
    return n


def dim_at(m: int, i: int) -> int:
    """Mesh dim ``m`` as the ``i``-th of a move's packed mesh dims."""
    return m << (8 * i)


def member(dims: int, i: int) -> int:
    """The ``i``-th of a move's packed mesh dims."""
    return (dims >> (8 * i)) & 255


@cython.cdivision(True)  # (the shards divide evenly: no check for 0 or a sign)
def shards_after(kind: int, k: int, shards: int) -> int:
    """The number of shards after a move of ``kind`` over ``k`` ranks from ``shards``."""
    if kind == CHUNK or kind == RS:
        return shards * k
    if kind == AG:
        return shards // k
    return shards


def next_permutation(a: list, n: int) -> bool:
    """The next permutation of ``a[:n]`` in lexicographic order (itertools.permutations' order of
    positions); False after the last."""
    i = n - 2
    while i >= 0 and a[i] >= a[i + 1]:
        i -= 1
    if i < 0:
        return False
    j = n - 1
    while a[j] <= a[i]:
        j -= 1
    t = a[i]
    a[i] = a[j]
    a[j] = t
    i += 1
    j = n - 1
    while i < j:
        t = a[i]
        a[i] = a[j]
        a[j] = t
        i += 1
        j -= 1
    return True


def next_combination(c: list, r: int, n: int) -> bool:
    """The next r-combination of range(n) in ``c[:r]``, lexicographic (itertools.combinations' order)."""
    i = r - 1
    while i >= 0 and c[i] == n - r + i:
        i -= 1
    if i < 0:
        return False
    c[i] += 1
    for j in range(i + 1, r):
        c[j] = c[j - 1] + 1
    return True


class Core:
    """One search problem's tables and its searches (see the module docstring).

    ``start`` and ``goal`` are (stacks, Partial mask): per tensor dim the mesh dims that split it,
    outermost first, and a bit per mesh dim holding Partial; ``op_id`` per mesh dim its reduce op as
    a small int (-1: none); ``bound`` the most collectives a path may use (None: no cap).
    """

    def __init__(self, live: tuple, mesh_shape: tuple, ndim: int, nbytes: int, start: tuple, goal: tuple,
                 op_id: list, model: CostModel, bound: int | None) -> None:
        L = len(live)
        nmesh = len(mesh_shape)
        lane = max(1, L)  # the width of a row of per-tensor-dim arrays of mesh dims
        if not cython.compiled:  # run as Python: lists of the problem's sizes (compiled: C arrays)
            self.live = [0] * L
            self.size, self.shift, self.clear, self.unflag = [0] * nmesh, [0] * nmesh, [0] * nmesh, [0] * nmesh
            self.op_id, self.goal_place, self.weight = [0] * nmesh, [0] * nmesh, [0.0] * nmesh
            self.goal_stacks, self.goal_lens, self.is_spare = [0] * (ndim * lane), [0] * ndim, [False] * ndim
            self.v_stacks, self.v_lens, self.v_settled = [0] * (ndim * lane), [0] * ndim, [0] * ndim
            self.targets, self.parks, self.ready = [0] * ndim, [0] * ndim, [0] * ndim
            self.group_of, self.group_dims, self.group_len, self.group_bits = [0] * L, [0] * L, [0] * L, [0] * L
            self.comb, self.idx, self.red = [0] * L, [0] * L, [0] * L
            self.dirty_d, self.dirty_lo, self.dirty_bits, self.dirty_k = [0] * ndim, [0] * ndim, [0] * ndim, [0] * ndim
            self.pushes, self.cheapest, self.extra = [0] * ndim, [0.0] * ndim, [0.0] * ndim
            self.last_alone, self.last_taking = [0.0] * ndim, [0.0] * ndim
        if not fits(L, ndim, nmesh, nbytes, 1):
            raise ValueError(f"expected at most {ML} live mesh dims, {MD} tensor dims, {MM} mesh dims and keys "
                             f"of 64 bits, got {L}, {ndim} and {nmesh}")
        self.L, self.ndim, self.nmesh, self.lane = L, ndim, nmesh, lane
        for i in range(L):
            self.live[i] = live[i]
        for m in range(nmesh):
            self.size[m] = mesh_shape[m]
            self.op_id[m] = op_id[m]
        self.n_ops = max([0] + [i + 1 for i in op_id])
        self.td_bits = max(1, bit_length(ndim))
        place_bits = self.td_bits + max(1, bit_length(max(0, L - 1)))
        self.partial_flag = ONE << place_bits
        self.place_mask = self.partial_flag - 1
        self.td_mask = (ONE << self.td_bits) - 1
        self.live_mask = 0
        for i in range(L):
            m = live[i]
            self.shift[m] = i * (place_bits + 1)
            self.clear[m] = ~(self.place_mask << self.shift[m])
            self.unflag[m] = ~(self.partial_flag << self.shift[m])
            self.live_mask |= ONE << m
        goal_stacks, self.goal_pmask = goal
        self.goal_shard_mask = 0
        for d in range(ndim):
            self.goal_lens[d] = len(goal_stacks[d])
            self.is_spare[d] = not goal_stacks[d]
            for pos in range(self.goal_lens[d]):
                m = goal_stacks[d][pos]
                self.goal_stacks[d * lane + pos] = m
                self.goal_place[m] = (d + 1) | pos << self.td_bits
                self.goal_shard_mask |= ONE << m
                self.weight[m] = 1 - 1 / mesh_shape[m]
        # mesh dims the target does not shard (Replicate, or Partial from Replicate): pushes for a while
        self.spare_mask = self.live_mask & ~self.goal_shard_mask
        self.start_key = self.key_of(start[0], start[1])
        self.goal_key = self.key_of(goal_stacks, self.goal_pmask)
        self.start_shards = self.product(self.stacked(start[0]))
        self.nbytes = nbytes
        self.goal_local = nbytes / self.product(self.goal_shard_mask)
        fall = 1  # every mesh dim split that a state can split: the least local size
        for i in range(L):
            m = live[i]
            if not (start[1] & self.goal_pmask) >> m & 1:
                fall *= mesh_shape[m]
        self.least_local = nbytes / fall
        # the lower bounds hold for CostModel's linear costs; another model searches without them
        self.model = model
        self.linear = type(model).collective is CostModel.collective and type(model).local is CostModel.local
        self.latency = model.latency_us if self.linear else 0.0
        self.inv_bw = 1.0 / model.bytes_per_us if self.linear else 0.0
        self.bpu = model.bytes_per_us if self.linear else 1.0
        self.lbpu = model.local_bytes_per_us if self.linear else 1.0
        self.bound = UNCAPPED if bound is None else bound
        self.expand_work, self.tight_work = EXPAND_WORK, TIGHT_WORK
        stride = self.bound + 1
        # (the C tables' first sizes: most searches never grow them; smaller ones that grow took 20 % longer)
        self.h, self.sharp, self.shared, self.fewest = Table(1024, 1), Table(64, 1), Table(256, 1), Table(512, 1)
        self.best, self.refined, self.seen = Table(1024, stride), Table(64, stride), Table(64, stride)
        self.moves, self.open, self.starts, self.links = MoveList(256), Heap(256), Heap(64), Links(256)

    def key_of(self, stacks: tuple, pmask: int) -> int:
        """The int that names the state (``stacks``, ``pmask``).

        Example (mesh dims 0 and 1 split tensor dim 0 in that order, mesh dim 1 Partial):
            >>> core = Core((0, 1), (2, 2), 1, 64, (((0, 1),), 0), (((),), 0), [-1, -1], CostModel(), None)
            >>> bin(core.key_of(((0,),), 0b10)), bin(core.start_key)
            ('0b100001', '0b11001')
        """
        key = 0
        for d in range(len(stacks)):
            for pos in range(len(stacks[d])):
                key |= self.field(d, pos, stacks[d][pos])
        for i in range(self.L):
            if pmask >> self.live[i] & 1:
                key |= self.partial_flag << self.shift[self.live[i]]
        return key

    def field(self, e: int, pos: int, m: int) -> int:
        """The key bits that put mesh dim ``m`` on tensor dim ``e`` at place ``pos``."""
        return ((e + 1) | pos << self.td_bits) << self.shift[m]

    def stacked(self, stacks: tuple) -> int:
        mask = 0
        for s in stacks:
            for m in s:
                mask |= ONE << m
        return mask

    def product(self, mask: int) -> int:
        """The number of ranks of the mesh dims in ``mask``."""
        n = 1
        for i in range(self.L):
            if mask >> self.live[i] & 1:
                n *= self.size[self.live[i]]
        return n

    def view(self, key: int) -> tuple[int, int]:
        """Writes the state ``key`` names to the view arrays: per tensor dim its stack (``v_stacks``, a row
        of ``lane``), its length and its settled prefix (the places that are the target's); returns the
        masks of the stacked and of the Partial mesh dims."""
        stacks, lens, settled = self.v_stacks, self.v_lens, self.v_settled
        lane = self.lane
        for d in range(self.ndim):
            lens[d] = 0
            settled[d] = lane
        smask = 0
        pmask = 0
        for i in range(self.L):
            m = self.live[i]
            field = key >> self.shift[m]
            place = field & self.place_mask
            if place:
                d = (place & self.td_mask) - 1
                pos = place >> self.td_bits
                stacks[d * lane + pos] = m
                lens[d] += 1
                smask |= ONE << m
                if place != self.goal_place[m] and pos < settled[d]:
                    settled[d] = pos
            if field & self.partial_flag:
                pmask |= ONE << m
        for d in range(self.ndim):
            if lens[d] < settled[d]:
                settled[d] = lens[d]
        return smask, pmask

    # -- the bounds -------------------------------------------------------------------------------

    def bound_of(self, key: int, shards: int) -> tuple[float, int]:
        """Of the state ``key`` of ``shards`` shards: (lower bound on the cost to the goal, lower bound on
        the collectives to it), worked out from the key's fields once and kept.

        With the potential ``-X / bandwidth`` (X the local size) an all_gather costs only its latency, a
        push of a k-way mesh dim ``(1 - 1/k) X``, a reduction ``2 (1 - 1/k) X``, an all_to_all ``(1 -
        1/k) X``: the bound is the potential, one latency per tensor dim with a split to undo and per
        reduce op pending, and those bytes in their cheapest order (the pushes of every unsharded mesh
        dim the target shards, and of every spare one where that helps, the reductions, the
        all_to_alls), or all of them at the least local size any state has.  Consistent.
        """
        found, h, n_coll = self.h.get(key, 0)
        if found:
            return h, n_coll
        lane, tdb = self.lane, self.td_bits
        smask = 0
        pmask = 0
        mis = 0  # per stack a bit per place that differs from the target's (from the lowest on: unsettled)
        for i in range(self.L):
            m = self.live[i]
            field = key >> self.shift[m]
            if field & self.partial_flag:
                pmask |= ONE << m
            place = field & self.place_mask
            if place:
                smask |= ONE << m
                if place != self.goal_place[m]:
                    mis |= ONE << (((place & self.td_mask) - 1) * lane + (place >> tdb))
        dirty = 0
        moving = 0.0
        if mis:
            lanes = (ONE << lane) - 1
            for i in range(self.L):  # the mesh dims the target shards, in an unsettled part of a stack
                m = self.live[i]
                place = key >> self.shift[m] & self.place_mask
                if place and self.weight[m] != 0.0:
                    lo = mis >> (((place & self.td_mask) - 1) * lane) & lanes
                    if lo:  # it is at or above the stack's lowest unsettled place
                        pos = place >> tdb
                        if pos >= bit_length(lo & -lo) - 1:
                            moving += self.weight[m]
            while mis:
                dirty += (mis & lanes) != 0
                mis >>= lane
        reduce = pmask & ~self.goal_pmask
        red = self.product(reduce)
        ops = 0
        n_ops = 0
        for i in range(self.L):
            m = self.live[i]
            if reduce >> m & 1 and not ops >> self.op_id[m] & 1:
                ops |= ONE << self.op_id[m]
                n_ops += 1
        n_coll = dirty + n_ops
        unsharded = ~smask & ~pmask
        pushes = self.product(self.goal_shard_mask & unsharded)
        # the cheapest order: X + Y (1 - (2 - a) / red), Y the local size after the pushes
        slope = 1 - (2 - moving) / red
        after = self.nbytes / shards / pushes
        if slope > 0:
            after /= self.product(self.spare_mask & unsharded)
        least = (pushes * red + red - 2 + moving) * self.least_local - self.nbytes / shards
        h = (self.goal_local + max(after * slope, least)) * self.inv_bw + self.latency * n_coll
        self.h.put(key, 0, h, n_coll)
        return h, n_coll

    def tight(self, key: int, shards: int) -> float:
        """A lower bound on the cost to the goal for a path with no collective to spare: one that uses only
        the fewest collectives the state needs (:meth:`bound_of`'s count), one per reduce op pending and
        one per stack with an unsettled top, which then takes all of it off at once.  Admissible, not
        consistent.

        A stack with an unsettled top pops it in one collective: an all_to_all if it is one mesh dim
        that lands in its target slot (or is parked on another unsettled stack), else an all_gather
        of all of it, (K - 1) X, X the local size then.  Before that pop, pushes may fill the target
        slots its own mesh dims do not block, and each other unsettled stack popped first gathers what
        of it cannot be pushed back into such slots.  Either nothing is parked (each other stack popped
        first only if that lowers X), or something is parked on an unsettled stack, which then gathers
        more than its own part: (2K - 1) X at the least with every free mesh dim pushed first, or
        (K - 1/2) X for the one popped last, which sees every other stack popped first; every stack but
        the last may see every free mesh dim pushed first.
        """
        smask, pmask = self.view(key)
        stacks, lens, settled = self.v_stacks, self.v_lens, self.v_settled
        lane = self.lane
        dirty_d, dirty_lo, dirty_bits, dirty_k = self.dirty_d, self.dirty_lo, self.dirty_bits, self.dirty_k
        local = self.nbytes / shards
        inv_bw, latency = self.inv_bw, self.latency
        free_ = self.live_mask & ~smask & ~(pmask & self.goal_pmask)
        total = 0.0
        n_dirty = 0
        for d in range(self.ndim):
            lo = settled[d]
            if lens[d] > lo:
                bits = 0
                for j in range(lo, lens[d]):
                    bits |= ONE << stacks[d * lane + j]
                dirty_d[n_dirty] = d
                dirty_lo[n_dirty] = lo
                dirty_bits[n_dirty] = bits
                dirty_k[n_dirty] = self.product(bits)
                n_dirty += 1
        before_all = local / self.product(free_)  # every free mesh dim pushed first
        # one collective per pending reduce op (in the order of its first mesh dim), a reduce_scatter at the least
        pend = pmask & ~self.goal_pmask
        seen_ops = 0
        for i in range(self.L):
            m = self.live[i]
            if not pend >> m & 1 or seen_ops >> self.op_id[m] & 1:
                continue
            seen_ops |= ONE << self.op_id[m]
            bits = 0
            for j in range(i, self.L):
                if pend >> self.live[j] & 1 and self.op_id[self.live[j]] == self.op_id[m]:
                    bits |= ONE << self.live[j]
            total += latency + (1 - 1 / self.product(bits)) * local / self.product(free_ & ~bits) * inv_bw
        if n_dirty == 0:
            return total
        pushes, cheapest, extra = self.pushes, self.cheapest, self.extra
        last_alone, last_taking = self.last_alone, self.last_taking
        apart = 0.0
        parked = INF
        others = 0.0
        for t in range(n_dirty):
            f = dirty_d[t]
            on_f = dirty_bits[t]
            k = dirty_k[t]
            top = stacks[f * lane + dirty_lo[t]] if lens[f] - dirty_lo[t] == 1 else -1
            landing = False
            reach = 0
            fall = 1.0
            for e in range(self.ndim):
                pushes[e] = 1
                if e == f:
                    continue
                pushed = 0
                for j in range(settled[e], self.goal_lens[e]):
                    m = self.goal_stacks[e * lane + j]
                    bit = ONE << m
                    if on_f & bit:
                        landing = landing or m == top
                        break
                    reach |= bit
                    if free_ & bit:
                        pushed |= bit
                n = self.product(pushed)
                fall *= n
                pushes[e] = n
            fall_apart = fall
            fall_last = fall
            for i in range(n_dirty):
                e = dirty_d[i]
                if e != f and lens[e] - dirty_lo[i] > 1:  # popped first: an all_gather of all of it
                    net = self.product(dirty_bits[i] & reach) / dirty_k[i]
                    fall_last *= net
                    if net < 1:  # then it may rather pop after
                        n = pushes[e]
                        if n * net > 1:
                            fall_apart *= net
                        else:
                            fall_apart /= n
            rate = (1 - 1 / k) if landing else (k - 1)
            apart += latency + rate * local / fall_apart * inv_bw
            cheap = latency + ((1 - 1 / k) if top >= 0 else (k - 1)) * before_all * inv_bw
            others += cheap
            cheapest[t] = cheap
            last_alone[t] = latency + rate * local / fall_last * inv_bw
            last_taking[t] = latency + (k - 0.5) * local / fall_last * inv_bw
            extra[t] = latency + (2 * k - 1) * before_all * inv_bw - cheap
        if n_dirty > 1:  # parked on another stack too, or only on the one popped last
            for i in range(n_dirty):
                least = INF
                for j in range(n_dirty):
                    if j != i and extra[j] < least:
                        least = extra[j]
                parked = min(parked, others - cheapest[i] + min(last_alone[i] + least, last_taking[i]))
        return total + min(apart, parked)

    # -- the moves ---------------------------------------------------------------------------------

    def successors(self, key: int, family: int, tight: bool, most: float) -> None:
        """The moves out of the state ``key`` in ``family`` into :attr:`moves`; once there are more than
        ``most``, perhaps not all (the caller's budget ends before them).

        Every family leaves out undoing a split the target keeps under the same outer splits (the
        settled prefix of a stack) and pushing onto the second of two tensor dims that are empty now and
        in the target.  ``LANDING`` pushes a mesh dim only into its target slot, reduces all of one
        reduce op's pending mesh dims at once (or those the target replicates) or reduce_scatters them
        into target slots.  With no collective to spare (``tight``) every family leaves out what would
        need one more: a pop of part of a stack's unsettled splits, a push onto a settled stack other
        than into its target slot, a reduction of part of a reduce op's mesh dims.
        """
        smask, pmask = self.view(key)
        moves = self.moves
        moves.clear()
        stacks, lens, settled = self.v_stacks, self.v_lens, self.v_settled
        targets, parks, ready = self.targets, self.parks, self.ready
        lane = self.lane
        # push targets: every tensor dim, but of those empty now and in the target only the first
        n_targets = 0
        first_spare = False
        for e in range(self.ndim):
            if lens[e] or not self.is_spare[e]:
                targets[n_targets] = e
                n_targets += 1
            elif not first_spare:
                first_spare = True
                targets[n_targets] = e
                n_targets += 1
        for e in range(self.ndim):  # the mesh dim the target splits a settled stack by next
            ready[e] = -1
            if settled[e] == lens[e] and lens[e] < self.goal_lens[e]:
                ready[e] = self.goal_stacks[e * lane + lens[e]]
        # where a mesh dim may go other than its target slot: anywhere (FULL), nowhere (LANDING); with
        # no collective to spare only onto unsettled stacks
        n_parks = 0
        parked = 0
        if family == FULL:
            for t in range(n_targets):
                e = targets[t]
                if not tight or lens[e] > settled[e]:
                    parks[n_parks] = e
                    n_parks += 1
                    parked |= ONE << e
        self.n_targets, self.n_parks = n_targets, n_parks
        # pops of the unsettled top of a stack: all_gather (merged too) and all_to_all
        for d in range(self.ndim):
            n = lens[d]
            lo = settled[d]
            if n <= lo:
                continue
            top = stacks[d * lane + n - 1]
            k = self.size[top]
            nkey = key & self.clear[top]
            dims = top
            if tight and n - lo > 1:  # the whole unsettled part in one all_gather
                for j in range(2, n - lo + 1):
                    m = stacks[d * lane + n - j]
                    k *= self.size[m]
                    nkey &= self.clear[m]
                    dims = dims << 8 | m
                moves.add(AG, n - lo, dims, -1, k, nkey)
                continue
            moves.add(AG, 1, top, -1, k, nkey)
            for t in range(n_targets):
                e = targets[t]
                if e != d and (parked >> e & 1 or ready[e] == top):
                    moves.add(A2A, 1, top, e, k, nkey | self.field(e, lens[e], top))
            for j in range(2, n - lo + 1):  # merged: the top j of the stack
                m = stacks[d * lane + n - j]
                k *= self.size[m]
                nkey &= self.clear[m]
                dims = dims << 8 | m
                moves.add(AG, j, dims, -1, k, nkey)
        # chunks and partitions of Replicate mesh dims; the pending mesh dims of each reduce op
        group_of, group_dims, group_len, group_bits = self.group_of, self.group_dims, self.group_len, self.group_bits
        for i in range(self.n_ops):
            group_of[i] = -1
        n_groups = 0
        for i in range(self.L):
            m = self.live[i]
            bit = ONE << m
            if smask & bit:
                continue
            if pmask & bit:
                if not self.goal_pmask & bit:
                    j = group_of[self.op_id[m]]
                    if j < 0:
                        j = group_of[self.op_id[m]] = n_groups
                        group_dims[j] = group_len[j] = group_bits[j] = 0
                        n_groups += 1
                    group_dims[j] |= dim_at(m, group_len[j])
                    group_len[j] += 1
                    group_bits[j] |= bit
                continue
            for t in range(n_targets):
                e = targets[t]
                if parked >> e & 1 or ready[e] == m:
                    moves.add(CHUNK, 1, m, e, self.size[m], key | self.field(e, lens[e], m))
            if self.goal_pmask & bit:
                moves.add(PART, 1, m, -1, self.size[m], key | self.partial_flag << self.shift[m])
        for j in range(n_groups):
            r = group_len[j]
            dims = group_dims[j]
            if tight:  # one collective for all of them: all_reduce, or reduce_scatter into the
                # target's next slots or onto an unsettled stack in any order
                self.reduction(key, dims, r)
                self.reductions(key, dims, r, True, 1, -1, most)
                if moves.count() > most:
                    return
                for e in range(self.ndim):
                    if ready[e] < 0:
                        continue
                    n = lens[e]
                    g = 0
                    g_n = 0
                    bits = 0
                    for i in range(n, min(n + r, self.goal_lens[e])):
                        m = self.goal_stacks[e * lane + i]
                        g |= dim_at(m, g_n)
                        bits |= ONE << m
                        g_n += 1
                    if g_n == r and bits == group_bits[j]:
                        self.reductions(key, g, g_n, False, 2, e, most)
                        if moves.count() > most:
                            return
                continue
            if family == FULL:  # every subset, reduced or reduce_scattered in every order anywhere
                for i in range(1, r + 1):
                    for t in range(i):
                        self.comb[t] = t
                    while True:
                        subset = 0
                        for t in range(i):
                            subset |= dim_at(member(dims, self.comb[t]), t)
                        self.reduction(key, subset, i)
                        self.reductions(key, subset, i, True, 0, -1, most)
                        if moves.count() > most:
                            return
                        if not next_combination(self.comb, i, r):
                            break
                continue
            # LANDING: all_reduce all at once (merged: cheaper than apart), or those the target
            # replicates; reduce_scatter into target slots
            spare = 0
            n_spare = 0
            for i in range(r):
                m = member(dims, i)
                if not self.goal_shard_mask >> m & 1:
                    spare |= dim_at(m, n_spare)
                    n_spare += 1
            self.reduction(key, dims, r)
            if n_spare and n_spare != r:
                self.reduction(key, spare, n_spare)
            for e in range(self.ndim):
                m = ready[e]
                if m < 0 or not group_bits[j] >> m & 1:
                    continue
                n = lens[e]
                g = 0
                for i in range(n + 1, self.goal_lens[e] + 1):
                    m = self.goal_stacks[e * lane + i - 1]
                    if not group_bits[j] >> m & 1:
                        break
                    g |= dim_at(m, i - 1 - n)
                    self.reductions(key, g, i - n, False, 2, e, most)
                    if moves.count() > most:
                        return

    def reduction(self, key: int, dims: int, r: int) -> None:
        """Adds the all_reduce of the ``r`` mesh dims ``dims``."""
        k = 1
        rest = key
        for i in range(r):
            m = member(dims, i)
            k *= self.size[m]
            rest &= self.unflag[m]
        self.moves.add(AR, r, dims, -1, k, rest)

    def reductions(self, key: int, dims: int, r: int, every_order: bool, onto: int, one: int, most: float) -> None:
        """Adds the reduce_scatters of the ``r`` mesh dims ``dims`` (``every_order``: in every order, else
        as they are) onto each of :attr:`targets` (``onto`` 0), :attr:`parks` (1) or tensor dim ``one`` (2)."""
        red, idx = self.red, self.idx
        k = 1
        rest = key
        for i in range(r):
            red[i] = member(dims, i)
            idx[i] = i
            k *= self.size[red[i]]
            rest &= self.unflag[red[i]]
        count = self.n_targets if onto == 0 else self.n_parks if onto == 1 else 1
        while True:
            if self.moves.count() > most:
                return
            perm = 0
            for i in range(r):
                perm |= dim_at(red[idx[i]], i)
            for t in range(count):
                e = self.targets[t] if onto == 0 else self.parks[t] if onto == 1 else one
                nkey = rest
                pos = self.v_lens[e]
                for i in range(r):
                    nkey |= self.field(e, pos, red[idx[i]])
                    pos += 1
                self.moves.add(RS, r, perm, e, k, nkey)
            if not every_order or not next_permutation(idx, r):
                return

    def step_cost(self, kind: int, k: int, local: float) -> float:
        """The cost of a move of ``kind`` over ``k`` ranks on local blocks of ``local`` bytes
        (plan_graph.kind_cost, spelled out for CostModel: the same arithmetic in the same order)."""
        if not self.linear:
            return kind_cost(KINDS[kind], k, local, self.model)
        if kind == AG:
            return self.latency + (k - 1) * local / self.bpu
        if kind == AR:
            return self.latency + 2 * (k - 1) / k * local / self.bpu
        if kind == RS or kind == A2A:
            return self.latency + (k - 1) / k * local / self.bpu
        if kind == CHUNK:
            return local / k / self.lbpu
        return local / self.lbpu

    # -- the searches ------------------------------------------------------------------------------

    def path_of(self, link: int) -> list:
        """The moves that lead to a node, from the start, as (kind, mesh dims, tensor dim or -1)."""
        path = []
        while link >= 0:
            parent, kind, n, dims, e = self.links.get(link)
            path.append((KINDS[kind], tuple([member(dims, i) for i in range(n)]), e))
            link = parent
        path.reverse()
        return path

    def run(self, family: int, budget: float, upper: float, ties: bool, f0: float, tie0: int, g0: float,
            key0: int, used0: int, shards0: int, link0: int, tie: int, use_shared: bool) -> tuple[int, float, float, int]:
        """The A* from the node (f0, tie0, g0, key0, used0, shards0, link0) to the goal under the cap, pruning
        every path of cost >= ``upper`` (with ``ties``, paths of cost ``upper``, to a relative 1e-9, are
        kept); the next tie-break ``tie``.  Past ``budget`` work (the moves looked at, and in ``FULL``
        :data:`EXPAND_WORK` per expansion, and :data:`TIGHT_WORK` per sharper bound) it stops.  With
        ``use_shared`` it skips a state the probes' shared table holds from no more cost and collectives.

        Returns (1: found, 0: complete without a path below ``upper``, -1: past the budget; the work;
        the cost found; the goal's link).  A visit (state, collectives used) is dominated only by an
        earlier expanded one with no more collectives and no more cost (the sharper bound, worked out
        where no collective is spare, depends on the collectives left).
        """
        bound = self.bound
        expand_work = self.expand_work if family == FULL else 0
        best, fewest, open_ = self.best, self.fewest, self.open
        best.clear()
        fewest.clear()
        self.refined.clear()
        open_.clear()
        open_.push(f0, tie0, g0, key0, used0, shards0, link0)
        best.put(key0, used0, g0, 0)
        slack = 1e-9 * max(upper, 1.0)
        limit = INF if upper == INF else upper + slack if ties else upper - slack
        work = 0.0
        while open_.count():
            f, _i, g, state, used, shards, link = open_.pop()
            if f >= limit:
                break
            if state == self.goal_key:
                return 1, work, g, link
            found, known_g, _i = best.get(state, used)
            if found and known_g < g:
                continue
            known, known_g, known_used = fewest.get(state, 0)
            if known and known_used <= used and known_g <= g:
                continue  # a cheaper visit with no more collectives was expanded already
            found, _a, n_coll = self.h.get(state, 0)
            spare = bound - used - n_coll
            if spare == 0:  # no collective to spare: the sharper bound, for the visits popped
                found, _a, _i = self.refined.get(state, used)
                if not found:
                    self.refined.put(state, used, 0.0, 0)
                    found, sharp, _i = self.sharp.get(state, 0)
                    if not found:
                        sharp = self.tight(state, shards)
                        self.sharp.put(state, 0, sharp, 0)
                        work += self.tight_work
                        if work > budget:
                            return -1, work, upper, -1
                    if g + sharp > f:
                        if g + sharp < limit:
                            open_.push(g + sharp, tie, g, state, used, shards, link)
                            tie += 1
                        continue
            if work >= budget:
                return -1, work, upper, -1
            if not known or used < known_used:
                fewest.put(state, 0, g, used)
            work += expand_work
            if use_shared:
                found, known_g, known_used = self.shared.get(state, 0)
                if found and known_g <= g and known_used <= used:
                    continue  # an earlier probe expanded it from no worse
                self.shared.put(state, 0, g, used)
            local = self.nbytes / shards
            self.successors(state, family, spare == 0, budget - work)
            for i in range(self.moves.count()):
                kind, n, dims, e, k, nxt = self.moves.get(i)
                work += 1
                if work > budget:  # mid-expansion too: one state may have thousands of moves
                    return -1, work, upper, -1
                n_used = used + (kind <= A2A)
                c = g + self.step_cost(kind, k, local)
                found, known_g, _i = best.get(nxt, n_used)
                if found and c >= known_g:
                    continue
                nshards = shards_after(kind, k, shards)
                h, n_coll = self.bound_of(nxt, nshards)
                if n_used + n_coll > bound or c + h >= limit:
                    continue
                best.put(nxt, n_used, c, 0)
                open_.push(c + h, tie, c, nxt, n_used, nshards, self.links.add(link, self.moves, i))
                tie += 1
        return 0, work, upper, -1

    def astar(self, family: int, budget: float, upper: float, ties: bool) -> tuple[list | None, float, bool, int]:
        """The A* of ``family`` from the start (:meth:`run`): (its moves as (kind, mesh dims, tensor dim),
        or None; the cost, else ``upper``; whether it finished within ``budget``; its work)."""
        self.links.clear()
        f0, _i = self.bound_of(self.start_key, self.start_shards)
        status, work, cost, found = self.run(family, budget, upper, ties, f0, 0, 0.0, self.start_key, 0,
                                             self.start_shards, -1, 1, False)
        if status == 1:
            return self.path_of(found), cost, True, int(work)
        return None, upper, status == 0, int(work)

    def probes(self, budget: float, upper: float, depth_limit: int, probe_root: float,
               probe_moves: float) -> tuple[list | None, float, bool, int, list]:
        """``LANDING`` searches from the start and from every state within ``depth_limit`` moves of it (any
        move of ``FULL``), best first by the lower bound; the first may look at ``probe_root`` moves,
        each other at ``probe_moves``; they share one table of the states they expanded (a state an
        earlier one expanded from no more cost and collectives is not expanded again).

        Returns (the cheapest path found below ``upper``, or None; its cost, else ``upper``; whether
        the starts ran out; the work, the probes' first moves counted too; the paths it beat, in the
        order found).  Past ``budget`` the probes stop.
        """
        superseded = []
        starts = self.starts
        self.links.clear()
        starts.clear()
        self.shared.clear()
        self.seen.clear()
        f0, _i = self.bound_of(self.start_key, self.start_shards)
        starts.push(f0, 0, 0.0, self.start_key, 0, self.start_shards, -1)
        tie = 1
        best_link = -1
        have_best = False
        work = 0.0
        while starts.count() and work < budget:
            f, depth, g, state, used, shards, link = starts.pop()
            if f >= upper:
                break
            depth >>= DEPTH_SHIFT
            found, _a, _i = self.seen.get(state, used)
            if found:
                continue
            self.seen.put(state, used, 0.0, 0)
            found, known_g, known_used = self.shared.get(state, 0)
            if not found or known_g > g or known_used > used:  # else the search would stop at once
                most = min(probe_root if link < 0 else probe_moves, budget - work)
                status, out_work, out_cost, out_link = self.run(LANDING, most, upper, False, f, -1, g, state, used,
                                                                shards, link, 0, True)
                work += out_work
                if status == 1:
                    if have_best:
                        superseded.append(self.path_of(best_link))
                    best_link = out_link
                    have_best = True
                    upper = out_cost
            if depth == depth_limit:
                continue
            local = self.nbytes / shards
            found, _a, n_coll = self.h.get(state, 0)
            self.successors(state, FULL, used + n_coll == self.bound, budget - work)
            for i in range(self.moves.count()):
                kind, n, dims, e, k, nxt = self.moves.get(i)
                work += 1
                if work > budget:
                    break
                coll = kind <= A2A
                c = g + self.step_cost(kind, k, local)
                nshards = shards_after(kind, k, shards)
                h, n_coll = self.bound_of(nxt, nshards)
                if used + coll + n_coll > self.bound or c + h >= upper:
                    continue
                starts.push(c + h, (depth + 1) << DEPTH_SHIFT | tie, c, nxt, used + coll, nshards,
                            self.links.add(link, self.moves, i))
                tie += 1
        best = self.path_of(best_link) if have_best else None
        return best, upper, starts.count() == 0, int(work), superseded

    # -- for Python (compiled, the methods above are C functions) ----------------------------------

    def cost(self, kind: int, k: int, local: float) -> float:
        """:meth:`step_cost`, of a kind by its index in :data:`KINDS`."""
        return self.step_cost(kind, k, local)

    def heuristic(self, key: int, shards: int) -> tuple[float, int]:
        """:meth:`bound_of`, callable from Python compiled too."""
        return self.bound_of(key, shards)

    def tight_bound(self, key: int, shards: int) -> float:
        """:meth:`tight`, callable from Python compiled too."""
        return self.tight(key, shards)

    def moves_of(self, key: int, family: int, tight: bool) -> list:
        """:meth:`successors` as a list of (kind, mesh dims, tensor dim or -1, group size, next key)."""
        self.successors(key, family, tight, INF)
        out = []
        for i in range(self.moves.count()):
            kind, n, dims, e, k, nxt = self.moves.get(i)
            out.append((KINDS[kind], tuple([member(dims, j) for j in range(n)]), e, k, nxt))
        return out
