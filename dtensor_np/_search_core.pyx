# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The planner's A* and probes (``plan_search._astar``, ``_probes``) in C: the same search, move for move.

:class:`Core` holds one :class:`dtensor_np.plan_search._Problem`'s tables as C
arrays and runs its ``FULL`` and ``LANDING`` searches and its probes over the same int keys,
with the same moves in the same order, the same float arithmetic in the same
order, the same tie-breaks and the same work count: it returns the path, cost,
completeness and work that the Python search returns (tests/test_search_core.py
compares them).  Only the time differs: a move takes about 0.08 us instead of
0.6 to 1 us compiled by mypyc.  It is built from this file by Cython at install
(setup.py); without a build, plan_search runs its own search.

Limits (plan_search checks them before it builds a Core, else it searches in
Python): at most :data:`MAX_LIVE` mesh dims of size > 1, :data:`MAX_DIMS`
tensor dims, mesh dim indices below :data:`MAX_MESH`, keys of at most 60 bits,
fewer than 2**53 bytes and 2**53 ranks, :class:`dtensor_np.cost_model.CostModel`'s
linear costs.  The build compiles it without fused multiply-add (setup.py
``EXACT_FLOATS``): each float operation rounds as Python's does.

Example:
    >>> from dtensor_np import plan_search, DeviceMesh, Shard, Replicate, DTensorSpec, TensorMeta
    >>> src = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(0)), TensorMeta((8, 8), "f4"))
    >>> dst = src.with_placements((Replicate(), Replicate()))
    >>> pb = plan_search._Problem(plan_search.search_state(src), plan_search.search_state(dst), (2, 2), 2, 256,
    ...                           plan_search.CostModel(), 2)
    >>> core = plan_search._core(pb)
    >>> core.astar(plan_search.FULL, 100.0, float("inf"), True)[0]
    [('all_gather', (0, 1), -1)]
"""

from libc.stdlib cimport malloc, realloc, free, calloc
from libc.stdint cimport uint64_t, uint32_t, int64_t, int32_t, int8_t
from libc.math cimport INFINITY

MAX_LIVE = 8
MAX_DIMS = 8
MAX_MESH = 16

cdef enum:
    ML = 8   # live mesh dims
    MD = 8   # tensor dims
    MM = 16  # mesh dims (indices)

cdef enum:
    AG = 0   # all_gather
    AR = 1   # all_reduce
    RS = 2   # reduce_scatter
    A2A = 3  # all_to_all
    CHUNK = 4
    PART = 5

KINDS = ("all_gather", "all_reduce", "reduce_scatter", "all_to_all", "chunk", "partition")

cdef enum:
    FULL = 0
    LANDING = 1

cdef enum:
    DEPTH_SHIFT = 40  # the probes' heap: a start's depth above the order of pushes in its tie


cdef struct Move:
    uint64_t nxt
    int64_t k
    int8_t kind
    int8_t e
    int8_t n
    int8_t dims[ML]


cdef struct Moves:
    Move* items
    Py_ssize_t size
    Py_ssize_t cap


cdef struct Slot:
    uint64_t key
    int64_t sub
    double a
    double b
    int64_t i
    uint32_t gen  # the slot holds an entry while this is its table's generation
    char flag


cdef struct Table:
    Slot* slots
    Py_ssize_t cap
    Py_ssize_t size
    uint32_t gen  # >= 1: calloc'd slots are empty


cdef struct HNode:
    double f
    int64_t tie
    double g
    uint64_t key
    int64_t used
    int64_t shards
    int64_t link


cdef struct Link:
    int64_t parent
    int8_t kind
    int8_t e
    int8_t n
    int8_t dims[ML]


cdef struct View:
    int8_t stacks[MD][ML]
    int lens[MD]
    int settled[MD]
    uint64_t smask
    uint64_t pmask


cdef inline uint64_t _mix(uint64_t key, int64_t sub) nogil:
    cdef uint64_t x = key ^ (<uint64_t>sub * 0x9E3779B97F4A7C15ULL)
    x ^= x >> 30
    x *= 0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= 0x94D049BB133111EBULL
    x ^= x >> 31
    return x


cdef int table_init(Table* t, Py_ssize_t cap) except -1:
    t.slots = <Slot*>calloc(cap, sizeof(Slot))
    if t.slots == NULL:
        raise MemoryError()
    t.cap = cap
    t.size = 0
    t.gen = 1
    return 0


cdef void table_free(Table* t) noexcept:
    free(t.slots)
    t.slots = NULL
    t.cap = t.size = 0


cdef Slot* table_find(Table* t, uint64_t key, int64_t sub) noexcept:
    cdef Py_ssize_t mask = t.cap - 1
    cdef Py_ssize_t i = <Py_ssize_t>(_mix(key, sub) & <uint64_t>mask)
    cdef Slot* s
    while True:
        s = &t.slots[i]
        if s.gen != t.gen:
            return NULL
        if s.key == key and s.sub == sub:
            return s
        i = (i + 1) & mask


cdef int table_grow(Table* t) except -1:
    cdef Slot* old = t.slots
    cdef Py_ssize_t old_cap = t.cap, j, i, mask
    t.slots = <Slot*>calloc(old_cap * 2, sizeof(Slot))
    if t.slots == NULL:
        t.slots = old
        raise MemoryError()
    t.cap = old_cap * 2
    mask = t.cap - 1
    for j in range(old_cap):
        if old[j].gen == t.gen:
            i = <Py_ssize_t>(_mix(old[j].key, old[j].sub) & <uint64_t>mask)
            while t.slots[i].gen == t.gen:
                i = (i + 1) & mask
            t.slots[i] = old[j]
    free(old)
    return 0


cdef Slot* table_slot(Table* t, uint64_t key, int64_t sub, bint* found) except NULL:
    """The slot of (key, sub) (``found``), else the empty slot it would take, not yet taken
    (:func:`table_take`; valid until the next put into ``t``): one probe where a find and a put
    take two."""
    cdef Py_ssize_t mask, i
    cdef Slot* s
    if (t.size + 1) * 2 > t.cap:
        table_grow(t)
    mask = t.cap - 1
    i = <Py_ssize_t>(_mix(key, sub) & <uint64_t>mask)
    while True:
        s = &t.slots[i]
        if s.gen != t.gen:
            found[0] = False
            return s
        if s.key == key and s.sub == sub:
            found[0] = True
            return s
        i = (i + 1) & mask


cdef inline void table_take(Table* t, Slot* s, uint64_t key, int64_t sub) noexcept:
    """Puts (key, sub) into the empty slot that :func:`table_slot` gave (zeroed, as a put makes it)."""
    s.gen = t.gen
    s.key = key
    s.sub = sub
    s.a = s.b = 0.0
    s.i = 0
    s.flag = 0
    t.size += 1


cdef Slot* table_put(Table* t, uint64_t key, int64_t sub) except NULL:
    """The slot of (key, sub), made (zeroed) if new; valid until the next put."""
    cdef bint found
    cdef Slot* s = table_slot(t, key, sub, &found)
    if not found:
        table_take(t, s, key, sub)
    return s


cdef Slot* table_upsert(Table* t, uint64_t key, int64_t sub, bint* new) except NULL:
    """:func:`table_put`, saying whether the entry is new."""
    cdef Py_ssize_t before = t.size
    cdef Slot* s = table_put(t, key, sub)
    new[0] = t.size != before
    return s


cdef void table_clear(Table* t) noexcept:
    """Empties the table in O(1) (a new generation; every 2**32 - 1 of them, the slots are wiped)."""
    cdef Py_ssize_t j
    t.size = 0
    t.gen += 1
    if t.gen == 0:
        for j in range(t.cap):
            t.slots[j].gen = 0
        t.gen = 1


cdef inline bint node_less(HNode* a, HNode* b) noexcept nogil:
    return a.f < b.f or (a.f == b.f and a.tie < b.tie)


cdef struct Heap:  # a binary heap of nodes by (f, tie): ties are unique, so any heap pops alike
    HNode* items
    Py_ssize_t size
    Py_ssize_t cap


cdef int heap_init(Heap* q, Py_ssize_t cap) except -1:
    q.items = <HNode*>malloc(cap * sizeof(HNode))
    if q.items == NULL:
        raise MemoryError()
    q.cap = cap
    q.size = 0
    return 0


cdef int heap_push(Heap* q, HNode* item) except -1:
    cdef Py_ssize_t i, parent
    if q.size == q.cap:
        q.items = <HNode*>_grow(q.items, q.cap * 2 * sizeof(HNode))
        q.cap *= 2
    i = q.size
    q.size += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not node_less(item, &q.items[parent]):
            break
        q.items[i] = q.items[parent]
        i = parent
    q.items[i] = item[0]
    return 0


cdef HNode heap_pop(Heap* q) noexcept:
    """The least node (the heap is not empty)."""
    cdef HNode top = q.items[0], last
    cdef Py_ssize_t i = 0, child
    q.size -= 1
    if q.size:
        last = q.items[q.size]
        while True:
            child = 2 * i + 1
            if child >= q.size:
                break
            if child + 1 < q.size and node_less(&q.items[child + 1], &q.items[child]):
                child += 1
            if not node_less(&q.items[child], &last):
                break
            q.items[i] = q.items[child]
            i = child
        q.items[i] = last
    return top


cdef class Core:
    """One problem's tables (see the module docstring); built by ``plan_search._core``."""

    cdef int L, ndim, nmesh, td_bits, lane, n_ops, n_spare
    cdef int live[ML]
    cdef int64_t size[MM]
    cdef int shift[MM]
    cdef uint64_t clear[MM]
    cdef uint64_t unflag[MM]
    cdef int op_id[MM]
    cdef uint64_t goal_place[MM]
    cdef double weight[MM]
    cdef uint64_t td_mask, partial_flag, place_mask
    cdef int8_t goal_stacks[MD][ML]
    cdef int goal_lens[MD]
    cdef int is_spare[MD]
    cdef uint64_t goal_pmask, goal_shard_mask, spare_mask, live_mask, goal_key
    cdef double goal_local, least_local, nbytes, latency, inv_bw, bpu, lbpu
    cdef int64_t bound
    cdef int expand_work, tight_work
    cdef uint64_t start_key
    cdef int64_t start_shards
    cdef Table h      # key -> bound (a), collectives (i); sharper bound (b) where flag
    cdef Table shared  # the probes' table: key -> (g (a), collectives used (i))
    cdef Table best, fewest, refined, seen  # a search's (best: (key, used) -> g), reused
    cdef Moves moves
    cdef Heap open  # the A*'s
    cdef Heap starts  # the probes': a node's tie is its depth << DEPTH_SHIFT | the order of pushes
    cdef Link* links  # the paths: each node's move and parent, by index
    cdef Py_ssize_t n_links, cap_links

    def __cinit__(self):
        table_init(&self.h, 1024)
        table_init(&self.shared, 256)
        table_init(&self.best, 1024)
        table_init(&self.fewest, 512)
        table_init(&self.refined, 64)
        table_init(&self.seen, 64)
        heap_init(&self.open, 256)
        heap_init(&self.starts, 64)
        self.cap_links = 256
        self.links = <Link*>malloc(self.cap_links * sizeof(Link))
        if self.links == NULL:
            raise MemoryError()
        self.moves.cap = 256
        self.moves.size = 0
        self.moves.items = <Move*>malloc(self.moves.cap * sizeof(Move))
        if self.moves.items == NULL:
            raise MemoryError()

    def __dealloc__(self):
        table_free(&self.h)
        table_free(&self.shared)
        table_free(&self.best)
        table_free(&self.fewest)
        table_free(&self.refined)
        table_free(&self.seen)
        free(self.moves.items)
        free(self.open.items)
        free(self.starts.items)
        free(self.links)

    def __init__(self, pb, int64_t cap, int expand_work, int tight_work):
        """The tables of ``pb``, a ``plan_search._Problem`` (its fields, read once); ``cap`` the most
        collectives a path may use."""
        cdef int i, d, pos
        cdef uint64_t full64 = 0xFFFFFFFFFFFFFFFFULL
        live, sizes, ndim = pb.live, pb.mesh_shape, pb.ndim
        self.L = len(live)
        self.nmesh = len(sizes)
        if self.L > ML or ndim > MD or self.nmesh > MM:
            raise ValueError(f"expected at most {ML} live mesh dims, {MD} tensor dims and {MM} mesh dims, "
                             f"got {self.L}, {ndim} and {self.nmesh}")
        for i in range(self.L):
            self.live[i] = live[i]
        for i in range(self.nmesh):
            self.size[i] = sizes[i]
            self.shift[i] = pb.shift[i]
            self.clear[i] = <uint64_t>(pb.clear[i] & full64)  # (Python's ~mask is negative)
            self.unflag[i] = <uint64_t>(pb.unflag[i] & full64)
            self.op_id[i] = pb.op_id[i]
            self.goal_place[i] = pb.goal_place[i]
            self.weight[i] = pb.weight[i]
        self.n_ops = pb.n_ops
        self.td_bits = pb.td_bits
        self.td_mask = (1 << self.td_bits) - 1
        self.partial_flag = pb.partial_flag
        self.place_mask = self.partial_flag - 1
        self.lane = pb.lane
        self.ndim = ndim
        for d in range(ndim):
            self.goal_lens[d] = len(pb.goal_stacks[d])
            for pos in range(self.goal_lens[d]):
                self.goal_stacks[d][pos] = pb.goal_stacks[d][pos]
            self.is_spare[d] = d in pb.spare
        self.n_spare = len(pb.spare)
        self.goal_pmask = pb.goal_pmask
        self.goal_shard_mask = pb.goal_shard_mask
        self.spare_mask = pb.spare_mask
        self.live_mask = pb.live_mask
        self.goal_key = pb.goal_key
        self.start_key = pb.start_key
        self.start_shards = pb.start_shards
        self.goal_local = pb.goal_local
        self.least_local = pb.least_local
        self.nbytes = <double>pb.nbytes
        self.latency = pb.latency
        self.inv_bw = pb.inv_bw
        self.bpu = pb.bytes_per_us
        self.lbpu = pb.local_bytes_per_us
        self.bound = cap
        self.expand_work = expand_work
        self.tight_work = tight_work

    # -- the state a key names ------------------------------------------------------------------

    cdef void view(self, uint64_t key, View* v) noexcept:
        cdef int d, i, m, pos
        cdef uint64_t place
        for d in range(self.ndim):
            v.lens[d] = 0
            v.settled[d] = self.lane
        v.smask = 0
        v.pmask = 0
        for i in range(self.L):
            m = self.live[i]
            place = (key >> self.shift[m]) & self.place_mask
            if place:
                d = <int>(place & self.td_mask) - 1
                pos = <int>(place >> self.td_bits)
                v.stacks[d][pos] = m
                v.lens[d] += 1
                v.smask |= (<uint64_t>1) << m
                if place != self.goal_place[m] and pos < v.settled[d]:
                    v.settled[d] = pos
            if (key >> self.shift[m]) & self.partial_flag:
                v.pmask |= (<uint64_t>1) << m
        for d in range(self.ndim):
            if v.lens[d] < v.settled[d]:
                v.settled[d] = v.lens[d]

    cdef inline int64_t product(self, uint64_t mask) noexcept:
        cdef int64_t n = 1
        cdef int i, m
        for i in range(self.L):
            m = self.live[i]
            if (mask >> m) & 1:
                n *= self.size[m]
        return n

    # -- the bounds -------------------------------------------------------------------------------

    cdef Slot* bound_of(self, uint64_t key, int64_t shards) except NULL:
        """The bound slot of ``key`` (``_Problem.bound_of``), worked out if new."""
        cdef bint new
        cdef Slot* s = table_upsert(&self.h, key, 0, &new)
        if not new:
            return s
        cdef uint64_t smask = 0, pmask = 0, mis = 0, field, place, lanes, lo, reduce, unsharded, mask
        cdef int i, m, dirty = 0, lane = self.lane, tdb = self.td_bits, ops = 0, n_ops = 0
        cdef double moving = 0.0, slope, after, least, h
        cdef int64_t red0, pushes, n_coll
        for i in range(self.L):
            m = self.live[i]
            field = key >> self.shift[m]
            if field & self.partial_flag:
                pmask |= (<uint64_t>1) << m
            place = field & self.place_mask
            if place:
                smask |= (<uint64_t>1) << m
                if place != self.goal_place[m]:
                    mis |= (<uint64_t>1) << (((place & self.td_mask) - 1) * lane + (place >> tdb))
        if mis:
            lanes = ((<uint64_t>1) << lane) - 1
            for i in range(self.L):
                m = self.live[i]
                place = (key >> self.shift[m]) & self.place_mask
                if place and self.weight[m] != 0.0:
                    lo = (mis >> (((place & self.td_mask) - 1) * lane)) & lanes
                    if lo and <int>(place >> tdb) >= _ctz(lo):
                        moving += self.weight[m]
            while mis:
                dirty += (mis & lanes) != 0
                mis >>= lane
        reduce = pmask & ~self.goal_pmask
        red0 = self.product(reduce)
        for i in range(self.L):
            m = self.live[i]
            if (reduce >> m) & 1 and not (ops >> self.op_id[m]) & 1:
                ops |= 1 << self.op_id[m]
                n_ops += 1
        n_coll = dirty + n_ops
        unsharded = ~smask & ~pmask
        mask = self.goal_shard_mask & unsharded
        pushes = self.product(mask)
        slope = 1 - (2 - moving) / <double>red0
        after = self.nbytes / <double>shards / <double>pushes
        if slope > 0:
            after /= <double>self.product(self.spare_mask & unsharded)
        least = (<double>(pushes * red0 + red0 - 2) + moving) * self.least_local - self.nbytes / <double>shards
        h = (self.goal_local + (after * slope if not (least > after * slope) else least)) * self.inv_bw \
            + self.latency * <double>n_coll
        s.a = h  # (nothing above puts into self.h: s still points at the new entry)
        s.i = n_coll
        return s

    cdef double tight(self, uint64_t key, int64_t shards) noexcept:
        """``_Problem.tight`` (the caller caches it)."""
        cdef View v
        self.view(key, &v)
        cdef double local = self.nbytes / <double>shards
        cdef double inv_bw = self.inv_bw, latency = self.latency
        cdef uint64_t free_ = self.live_mask & ~v.smask & ~(v.pmask & self.goal_pmask)
        cdef double total = 0.0
        cdef int ndim = self.ndim, d, e, i, j, m, lo, n_dirty = 0, f, top, t
        cdef int dirty_d[MD]
        cdef int dirty_lo[MD]
        cdef uint64_t dirty_bits[MD]
        cdef int64_t dirty_k[MD]
        cdef uint64_t bits, pend, seen_ops, on_f, reach, pushed, bit
        cdef int64_t pushes[MD]
        cdef int64_t n, k, k_e
        cdef double before_all, apart, parked, others, fall, fall_apart, fall_last, net, rate, cheap, x, best_x
        cdef double cheapest[MD]
        cdef double extra[MD]
        cdef double last_alone[MD]
        cdef double last_taking[MD]
        cdef bint landing
        for d in range(ndim):
            lo = v.settled[d]
            if v.lens[d] > lo:
                bits = 0
                for j in range(lo, v.lens[d]):
                    bits |= (<uint64_t>1) << v.stacks[d][j]
                dirty_d[n_dirty] = d
                dirty_lo[n_dirty] = lo
                dirty_bits[n_dirty] = bits
                dirty_k[n_dirty] = self.product(bits)
                n_dirty += 1
        before_all = local / <double>self.product(free_)
        # one collective per pending reduce op, in the order of its first mesh dim
        pend = v.pmask & ~self.goal_pmask
        seen_ops = 0
        for i in range(self.L):
            m = self.live[i]
            if not (pend >> m) & 1 or (seen_ops >> self.op_id[m]) & 1:
                continue
            seen_ops |= (<uint64_t>1) << self.op_id[m]
            bits = 0
            for j in range(i, self.L):
                if (pend >> self.live[j]) & 1 and self.op_id[self.live[j]] == self.op_id[m]:
                    bits |= (<uint64_t>1) << self.live[j]
            total += latency + (1 - 1 / <double>self.product(bits)) * local / <double>self.product(free_ & ~bits) * inv_bw
        if n_dirty == 0:
            return total
        apart = 0.0
        parked = INFINITY
        others = 0.0
        for t in range(n_dirty):
            f = dirty_d[t]
            on_f = dirty_bits[t]
            k = dirty_k[t]
            top = v.stacks[f][dirty_lo[t]] if v.lens[f] - dirty_lo[t] == 1 else -1
            landing = False
            reach = 0
            fall = 1.0
            for e in range(ndim):
                pushes[e] = 1
                if e == f:
                    continue
                pushed = 0
                for j in range(v.settled[e], self.goal_lens[e]):
                    m = self.goal_stacks[e][j]
                    bit = (<uint64_t>1) << m
                    if on_f & bit:
                        landing = landing or m == top
                        break
                    reach |= bit
                    if free_ & bit:
                        pushed |= bit
                n = self.product(pushed)
                fall *= <double>n
                pushes[e] = n
            fall_apart = fall
            fall_last = fall
            for i in range(n_dirty):
                e = dirty_d[i]
                if e != f and v.lens[e] - dirty_lo[i] > 1:
                    k_e = dirty_k[i]
                    net = <double>self.product(dirty_bits[i] & reach) / <double>k_e
                    fall_last *= net
                    if net < 1:
                        n = pushes[e]
                        if <double>n * net > 1:
                            fall_apart *= net
                        else:
                            fall_apart /= <double>n
            if landing:
                rate = 1 - 1 / <double>k
            else:
                rate = <double>(k - 1)
            apart += latency + rate * local / fall_apart * inv_bw
            if top >= 0:
                cheap = latency + (1 - 1 / <double>k) * before_all * inv_bw
            else:
                cheap = latency + <double>(k - 1) * before_all * inv_bw
            others += cheap
            cheapest[t] = cheap
            last_alone[t] = latency + rate * local / fall_last * inv_bw
            last_taking[t] = latency + (<double>k - 0.5) * local / fall_last * inv_bw
            extra[t] = latency + <double>(2 * k - 1) * before_all * inv_bw - cheap
        if n_dirty > 1:
            for i in range(n_dirty):
                best_x = INFINITY
                for j in range(n_dirty):
                    if j != i and extra[j] < best_x:
                        best_x = extra[j]
                x = last_alone[i] + best_x
                if last_taking[i] < x:
                    x = last_taking[i]
                x = others - cheapest[i] + x
                if x < parked:
                    parked = x
        total += apart if not (parked < apart) else parked
        return total

    # -- the moves ---------------------------------------------------------------------------------

    cdef inline Move* emit(self) except NULL:
        cdef Move* items
        if self.moves.size == self.moves.cap:
            items = <Move*>realloc(self.moves.items, self.moves.cap * 2 * sizeof(Move))
            if items == NULL:
                raise MemoryError()
            self.moves.items = items
            self.moves.cap *= 2
        self.moves.size += 1
        return &self.moves.items[self.moves.size - 1]

    cdef inline int emit_move(self, int kind, int8_t* dims, int n, int e, int64_t k, uint64_t nxt) except -1:
        """Appends a move: ``kind`` over ``dims[:n]`` (in that order), onto tensor dim ``e`` (-1: none),
        over ``k`` ranks, to the state ``nxt``."""
        cdef Move* mv = self.emit()
        cdef int i
        mv.kind = kind
        mv.e = e
        mv.n = n
        for i in range(n):
            mv.dims[i] = dims[i]
        mv.k = k
        mv.nxt = nxt
        return 0

    cdef inline int emit_one(self, int kind, int8_t m, int e, uint64_t nxt) except -1:
        """:meth:`emit_move` of the one mesh dim ``m``."""
        return self.emit_move(kind, &m, 1, e, self.size[m], nxt)

    cdef inline uint64_t field(self, int e, int pos, int m) noexcept:
        """The key bits that put mesh dim ``m`` on tensor dim ``e`` at place ``pos`` (``_Problem.key``)."""
        return ((<uint64_t>(e + 1)) | (<uint64_t>pos << self.td_bits)) << self.shift[m]

    cdef int reductions(self, uint64_t key, View* v, int8_t* subset, int r, int family_orders, int* targets,
                        int n_targets, bint all_reduce, double most) except -1:
        """``_Problem._reductions``: ``family_orders`` 1 for every permutation of ``subset``, 0 for
        ``subset`` as it is."""
        cdef int64_t k = 1
        cdef uint64_t rest = key, nkey
        cdef int i, t, e, pos, m
        cdef int idx[ML]
        cdef int8_t perm[ML]
        for i in range(r):
            m = subset[i]
            k *= self.size[m]
            rest &= self.unflag[m]
        if all_reduce:
            self.emit_move(AR, subset, r, -1, k, rest)
        for i in range(r):
            idx[i] = i
        while True:
            if self.moves.size > most:
                return 0
            for i in range(r):
                perm[i] = subset[idx[i]]
            for t in range(n_targets):
                e = targets[t]
                nkey = rest
                pos = v.lens[e]
                for i in range(r):
                    nkey |= self.field(e, pos, perm[i])
                    pos += 1
                self.emit_move(RS, perm, r, e, k, nkey)
            if not family_orders or not _next_permutation(idx, r):
                return 0

    cdef int successors(self, uint64_t key, int family, bint tight, double most) except -1:
        """``_Problem.successors`` into ``self.moves`` (FULL and LANDING)."""
        cdef View v
        self.view(key, &v)
        self.moves.size = 0
        cdef int ndim = self.ndim, d, e, n, lo, top, j, t, i, m, r, g_n, n_targets = 0, n_parks = 0
        cdef int targets[MD]
        cdef int parks[MD]
        cdef int ready[MD]
        cdef uint64_t parked = 0, popped, nkey, bit, bits
        cdef int64_t k
        cdef bint first_spare = False
        # push targets: every tensor dim, but of those empty now and in the target only the first
        for e in range(ndim):
            if v.lens[e] or not self.is_spare[e]:
                targets[n_targets] = e
                n_targets += 1
            elif not first_spare:
                first_spare = True
                targets[n_targets] = e
                n_targets += 1
        for e in range(ndim):
            ready[e] = -1
            if v.settled[e] == v.lens[e] and v.lens[e] < self.goal_lens[e]:
                ready[e] = self.goal_stacks[e][v.lens[e]]
        if family == FULL:
            for t in range(n_targets):
                e = targets[t]
                if not tight or v.lens[e] > v.settled[e]:
                    parks[n_parks] = e
                    n_parks += 1
                    parked |= (<uint64_t>1) << e
        # pops of the unsettled top of a stack
        for d in range(ndim):
            n = v.lens[d]
            lo = v.settled[d]
            if n <= lo:
                continue
            top = v.stacks[d][n - 1]
            if tight and n - lo > 1:  # the whole unsettled part in one all_gather
                k = 1
                nkey = key
                for j in range(lo, n):
                    m = v.stacks[d][j]
                    k *= self.size[m]
                    nkey &= self.clear[m]
                self.emit_move(AG, &v.stacks[d][lo], n - lo, -1, k, nkey)
                continue
            popped = key & self.clear[top]
            self.emit_one(AG, top, -1, popped)
            for t in range(n_targets):
                e = targets[t]
                if e != d and ((parked >> e) & 1 or ready[e] == top):
                    self.emit_one(A2A, top, e, popped | self.field(e, v.lens[e], top))
            k = self.size[top]
            nkey = popped
            for j in range(2, n - lo + 1):  # merged: the top j of the stack
                m = v.stacks[d][n - j]
                k *= self.size[m]
                nkey &= self.clear[m]
                self.emit_move(AG, &v.stacks[d][n - j], j, -1, k, nkey)
        # chunks and partitions of Replicate mesh dims; the pending mesh dims of each reduce op
        cdef int8_t groups[ML][ML]
        cdef int group_len[ML]
        cdef int group_of[MM]
        cdef int n_groups = 0
        for i in range(self.n_ops):
            group_of[i] = -1
        for i in range(self.L):
            m = self.live[i]
            bit = (<uint64_t>1) << m
            if v.smask & bit:
                continue
            if v.pmask & bit:
                if not self.goal_pmask & bit:
                    j = group_of[self.op_id[m]]
                    if j < 0:
                        j = group_of[self.op_id[m]] = n_groups
                        group_len[j] = 0
                        n_groups += 1
                    groups[j][group_len[j]] = m
                    group_len[j] += 1
                continue
            for t in range(n_targets):
                e = targets[t]
                if (parked >> e) & 1 or ready[e] == m:
                    self.emit_one(CHUNK, m, e, key | self.field(e, v.lens[e], m))
            if self.goal_pmask & bit:
                self.emit_one(PART, m, -1, key | (self.partial_flag << self.shift[m]))
        cdef int8_t subset[ML]
        cdef int8_t g[ML]
        cdef int8_t spare_dims[ML]
        cdef int comb[ML]
        cdef int n_spare_dims
        cdef int one[1]
        cdef uint64_t dims_bits
        for j in range(n_groups):
            r = group_len[j]
            dims_bits = 0
            for i in range(r):
                dims_bits |= (<uint64_t>1) << groups[j][i]
            if tight:  # one collective for all of them: all_reduce, or reduce_scatter
                self.all_reduce(key, groups[j], r)
                self.reductions(key, &v, groups[j], r, 1, parks, n_parks, False, most)
                if self.moves.size > most:
                    return 0
                for e in range(ndim):
                    if ready[e] < 0:
                        continue
                    n = v.lens[e]
                    g_n = 0
                    bits = 0
                    for i in range(n, min(n + r, self.goal_lens[e])):
                        g[g_n] = self.goal_stacks[e][i]
                        bits |= (<uint64_t>1) << g[g_n]
                        g_n += 1
                    if g_n == r and bits == dims_bits:
                        one[0] = e
                        self.reductions(key, &v, g, g_n, 0, one, 1, False, most)
                        if self.moves.size > most:
                            return 0
                continue
            if family == FULL:
                for i in range(1, r + 1):
                    for t in range(i):
                        comb[t] = t
                    while True:
                        for t in range(i):
                            subset[t] = groups[j][comb[t]]
                        self.reductions(key, &v, subset, i, 1, targets, n_targets, True, most)
                        if self.moves.size > most:
                            return 0
                        if not _next_combination(comb, i, r):
                            break
                continue
            # LANDING: all_reduce all at once, or of those the target replicates; reduce_scatter into
            # target slots
            n_spare_dims = 0
            for i in range(r):
                if not (self.goal_shard_mask >> groups[j][i]) & 1:
                    spare_dims[n_spare_dims] = groups[j][i]
                    n_spare_dims += 1
            self.all_reduce(key, groups[j], r)
            if n_spare_dims and n_spare_dims != r:
                self.all_reduce(key, spare_dims, n_spare_dims)
            for e in range(ndim):
                m = ready[e]
                if m < 0 or not (dims_bits >> m) & 1:
                    continue
                n = v.lens[e]
                for i in range(n + 1, self.goal_lens[e] + 1):
                    if not (dims_bits >> self.goal_stacks[e][i - 1]) & 1:
                        break
                    for t in range(n, i):
                        g[t - n] = self.goal_stacks[e][t]
                    one[0] = e
                    self.reductions(key, &v, g, i - n, 0, one, 1, False, most)
                    if self.moves.size > most:
                        return 0
        return 0

    cdef int all_reduce(self, uint64_t key, int8_t* dims, int r) except -1:
        """Appends the all_reduce of ``dims[:r]``."""
        cdef int64_t k = 1
        cdef uint64_t rest = key
        cdef int i
        for i in range(r):
            k *= self.size[dims[i]]
            rest &= self.unflag[dims[i]]
        return self.emit_move(AR, dims, r, -1, k, rest)

    cdef inline double step_cost(self, int kind, int64_t k, double local) noexcept:
        if kind == AG:
            return self.latency + <double>(k - 1) * local / self.bpu
        if kind == AR:
            return self.latency + <double>(2 * (k - 1)) / <double>k * local / self.bpu
        if kind == RS or kind == A2A:
            return self.latency + <double>(k - 1) / <double>k * local / self.bpu
        if kind == CHUNK:
            return local / <double>k / self.lbpu
        return local / self.lbpu

    # -- the search --------------------------------------------------------------------------------

    cdef object path_of(self, int64_t link):
        """The moves that lead to a node, from the root of the links, as (kind, dims, tensor dim)."""
        path = []
        cdef int i
        while link >= 0:
            path.append((KINDS[self.links[link].kind],
                         tuple([self.links[link].dims[i] for i in range(self.links[link].n)]), self.links[link].e))
            link = self.links[link].parent
        path.reverse()
        return path

    cdef int64_t link_to(self, int64_t parent, Move* mv) except -2:
        """A new link: ``mv`` after the node of link ``parent``; its index."""
        cdef int j
        cdef Link* lk
        if self.n_links == self.cap_links:
            self.links = <Link*>_grow(self.links, self.cap_links * 2 * sizeof(Link))
            self.cap_links *= 2
        lk = &self.links[self.n_links]
        lk.parent = parent
        lk.kind = mv.kind
        lk.e = mv.e
        lk.n = mv.n
        for j in range(mv.n):
            lk.dims[j] = mv.dims[j]
        self.n_links += 1
        return self.n_links - 1

    cdef HNode start_node(self, int64_t tie) except *:
        """The start's node: f its bound, the tie given, no cost, no collectives, no link."""
        cdef HNode node
        node.f = self.bound_of(self.start_key, self.start_shards).a
        node.tie = tie
        node.g = 0.0
        node.key = self.start_key
        node.used = 0
        node.shards = self.start_shards
        node.link = -1
        return node

    def astar(self, int family, double budget, double upper, bint ties):
        """``plan_search._astar`` from the start: (its moves as (kind, dims, tensor dim), or None;
        cost; complete; work)."""
        cdef HNode root
        cdef double work = 0.0, cost = upper
        cdef int64_t found = -1
        cdef int status
        self.n_links = 0
        root = self.start_node(0)
        status = self.run(family, budget, upper, ties, &root, 1, False, &work, &cost, &found)
        if status == 1:
            return self.path_of(found), cost, True, int(work)
        return None, upper, status == 0, int(work)

    cdef int run(self, int family, double budget, double upper, bint ties, HNode* root, int64_t tie,
                 bint use_shared, double* work_out, double* cost_out, int64_t* found) except -2:
        """The A* from ``root`` (its links in ``self.links``): 1 found (``found`` the goal's link,
        ``cost_out`` its cost), 0 complete without a path below ``upper``, -1 past ``budget``.
        ``work_out`` counts the work."""
        cdef int64_t bound = self.bound, used, n_used, nshards, spare
        cdef double work = 0.0, slack, limit, f, g, c, h, sharp, local
        cdef uint64_t state, goal = self.goal_key
        cdef Slot* s
        cdef Slot* hs
        cdef HNode node, nd
        cdef Move* mv
        cdef bint refine = family == FULL or family == LANDING, known_found, known
        cdef int64_t known_used = 0
        cdef double known_g = 0.0
        cdef int expand_work = self.expand_work if family == FULL else 0
        cdef Py_ssize_t i, count
        table_clear(&self.best)
        table_clear(&self.fewest)
        table_clear(&self.refined)
        self.open.size = 0
        heap_push(&self.open, root)
        s = table_put(&self.best, root.key, root.used)
        s.a = root.g
        slack = 1e-9 * (upper if upper > 1.0 else 1.0)
        if upper == INFINITY:
            limit = INFINITY
        elif ties:
            limit = upper + slack
        else:
            limit = upper - slack
        while self.open.size:
            node = heap_pop(&self.open)
            f = node.f
            g = node.g
            state = node.key
            used = node.used
            if f >= limit:
                break
            if state == goal:
                work_out[0] = work
                cost_out[0] = g
                found[0] = node.link
                return 1
            s = table_find(&self.best, state, used)
            if s != NULL and s.a < g:
                continue
            s = table_find(&self.fewest, state, 0)
            known_found = s != NULL
            if known_found:
                known_used = s.i
                known_g = s.a
                if known_used <= used and known_g <= g:
                    continue
            spare = 1
            if refine:
                hs = table_find(&self.h, state, 0)
                spare = bound - used - hs.i
                if spare == 0 and table_find(&self.refined, state, used) == NULL:
                    table_put(&self.refined, state, used)
                    if hs.flag:
                        sharp = hs.b
                    else:
                        sharp = self.tight(state, node.shards)
                        hs.b = sharp
                        hs.flag = 1
                        work += self.tight_work
                        if work > budget:
                            work_out[0] = work
                            return -1
                    if g + sharp > f:
                        if g + sharp < limit:
                            node.f = g + sharp
                            node.tie = tie
                            tie += 1
                            heap_push(&self.open, &node)
                        continue
            if work >= budget:
                work_out[0] = work
                return -1
            if not known_found or used < known_used:
                s = table_put(&self.fewest, state, 0)
                s.i = used
                s.a = g
            work += expand_work
            if use_shared:
                s = table_find(&self.shared, state, 0)
                if s != NULL and s.a <= g and s.i <= used:
                    continue
                s = table_put(&self.shared, state, 0)
                s.a = g
                s.i = used
            local = self.nbytes / <double>node.shards
            self.successors(state, family, spare == 0, budget - work)
            count = self.moves.size
            for i in range(count):
                mv = &self.moves.items[i]
                work += 1
                if work > budget:
                    work_out[0] = work
                    return -1
                n_used = used + (mv.kind <= A2A)
                c = g + self.step_cost(mv.kind, mv.k, local)
                s = table_slot(&self.best, mv.nxt, n_used, &known)
                if known and c >= s.a:
                    continue
                nshards = _shards_after(mv, node.shards)
                hs = self.bound_of(mv.nxt, nshards)  # (puts into self.h only: s stays valid)
                h = hs.a
                if n_used + hs.i > bound or c + h >= limit:
                    continue
                if not known:
                    table_take(&self.best, s, mv.nxt, n_used)
                s.a = c
                nd.f = c + h
                nd.tie = tie
                nd.g = c
                nd.key = mv.nxt
                nd.used = n_used
                nd.shards = nshards
                nd.link = self.link_to(node.link, mv)
                tie += 1
                heap_push(&self.open, &nd)
        work_out[0] = work
        return 0

    def probes(self, double budget, double upper, int depth_limit, double probe_root, double probe_moves):
        """``plan_search._probes``: (the cheapest path found below ``upper`` or None, its cost (else
        ``upper``), complete, work, the paths it beat in the order found)."""
        cdef int64_t bound = self.bound, tie = 0, depth, used, coll, nshards, best_link = -1
        cdef double work = 0.0, g, c, h, local, most, out_work, out_cost
        cdef uint64_t state
        cdef bint have_best = False
        cdef HNode start, root, child
        cdef Slot* s
        cdef Slot* hs
        cdef Move* mv
        cdef Py_ssize_t i, count
        cdef int64_t found
        cdef int status
        superseded = []
        self.n_links = 0
        self.starts.size = 0
        table_clear(&self.shared)
        table_clear(&self.seen)
        start = self.start_node(tie)
        tie += 1
        heap_push(&self.starts, &start)
        while self.starts.size and work < budget:
            root = heap_pop(&self.starts)
            if root.f >= upper:
                break
            depth = root.tie >> DEPTH_SHIFT
            root.tie = -1  # the probe's own ties start at 0
            g = root.g
            state = root.key
            used = root.used
            if table_find(&self.seen, state, used) != NULL:
                continue
            table_put(&self.seen, state, used)
            s = table_find(&self.shared, state, 0)
            if s == NULL or s.a > g or s.i > used:
                most = probe_root if root.link < 0 else probe_moves
                if budget - work < most:
                    most = budget - work
                out_work = 0.0
                status = self.run(LANDING, most, upper, False, &root, 0, True, &out_work, &out_cost, &found)
                work += out_work
                if status == 1:
                    if have_best:
                        superseded.append(self.path_of(best_link))
                    best_link = found
                    have_best = True
                    upper = out_cost
            if depth == depth_limit:
                continue
            local = self.nbytes / <double>root.shards
            hs = table_find(&self.h, state, 0)
            self.successors(state, FULL, used + hs.i == bound, budget - work)
            count = self.moves.size
            for i in range(count):
                mv = &self.moves.items[i]
                work += 1
                if work > budget:
                    break
                coll = mv.kind <= A2A
                c = g + self.step_cost(mv.kind, mv.k, local)
                nshards = _shards_after(mv, root.shards)
                hs = self.bound_of(mv.nxt, nshards)
                h = hs.a
                if used + coll + hs.i > bound or c + h >= upper:
                    continue
                child.f = c + h
                child.tie = (depth + 1) << DEPTH_SHIFT | tie  # by (f, depth, order of pushes)
                tie += 1
                child.g = c
                child.key = mv.nxt
                child.used = used + coll
                child.shards = nshards
                child.link = self.link_to(root.link, mv)
                heap_push(&self.starts, &child)
        best = self.path_of(best_link) if have_best else None
        return best, upper, self.starts.size == 0, int(work), superseded


cdef inline int64_t _shards_after(Move* mv, int64_t shards) noexcept:
    if mv.kind == CHUNK or mv.kind == RS:
        return shards * mv.k
    if mv.kind == AG:
        return shards // mv.k
    return shards


cdef inline int _ctz(uint64_t x) noexcept nogil:
    cdef int n = 0
    while not (x & 1):
        x >>= 1
        n += 1
    return n


cdef bint _next_permutation(int* a, int n) noexcept:
    """The next permutation of ``a`` in lexicographic order (itertools.permutations' order); False
    after the last."""
    cdef int i = n - 2, j, t
    while i >= 0 and a[i] >= a[i + 1]:
        i -= 1
    if i < 0:
        return False
    j = n - 1
    while a[j] <= a[i]:
        j -= 1
    t = a[i]; a[i] = a[j]; a[j] = t
    i += 1
    j = n - 1
    while i < j:
        t = a[i]; a[i] = a[j]; a[j] = t
        i += 1
        j -= 1
    return True


cdef bint _next_combination(int* c, int r, int n) noexcept:
    """The next r-combination of range(n) in lexicographic order (itertools.combinations' order)."""
    cdef int i = r - 1, j
    while i >= 0 and c[i] == n - r + i:
        i -= 1
    if i < 0:
        return False
    c[i] += 1
    for j in range(i + 1, r):
        c[j] = c[j - 1] + 1
    return True


cdef void* _grow(void* p, size_t nbytes) except NULL:
    cdef void* q = realloc(p, nbytes)
    if q == NULL:
        raise MemoryError()
    return q
