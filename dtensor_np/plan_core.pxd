# The C types of plan_core.py, for Cython's pure-Python mode (this file augments the .py beside it;
# no code here: the search and its containers' two bodies are all in the .py).
cimport cython
from libc.stdint cimport int8_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc

cdef enum:
    ML = 8   # mesh dims of size > 1 (live)
    MD = 8   # tensor dims
    MM = 16  # mesh dims

cdef int AG, AR, RS, A2A, CHUNK, PART
cdef int64_t DEPTH_SHIFT
cdef double INF
cdef uint64_t ONE, HASH_MUL

cdef struct Slot:
    uint64_t key
    int64_t sub
    double a
    int64_t i
    uint32_t gen  # the slot holds an entry while this is its table's generation

cdef struct Node:
    double f
    int64_t tie
    double g
    uint64_t key
    int64_t used
    int64_t shards
    int64_t link

cdef struct Move:
    uint64_t nxt
    uint64_t dims
    int64_t k
    int8_t kind
    int8_t n
    int8_t e

cdef struct Link:
    int64_t parent
    Move move

ctypedef Slot* SlotP
ctypedef Node* NodeP
ctypedef Move* MoveP
ctypedef Link* LinkP
ctypedef int* IntP
ctypedef int64_t* I64P
ctypedef uint64_t* U64P
ctypedef double* DblP


@cython.final
cdef class Table:
    cdef SlotP slots
    cdef Py_ssize_t cap, size, last
    cdef uint64_t last_key
    cdef int64_t last_sub
    cdef uint32_t gen

    @cython.locals(mask=Py_ssize_t, i=Py_ssize_t, s=SlotP)
    cdef inline (bint, double, int64_t) get(self, uint64_t key, int64_t sub) noexcept
    @cython.locals(s=SlotP)
    cdef inline int put(self, uint64_t key, int64_t sub, double a, int64_t i) except -1
    @cython.locals(j=Py_ssize_t)
    cdef void clear(self) noexcept
    @cython.locals(old=SlotP, old_cap=Py_ssize_t, mask=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t)
    cdef int grow(self) except -1


cdef class Array:
    cdef void* data
    cdef Py_ssize_t cap, size, itemsize

    @cython.final
    cdef inline Py_ssize_t count(self) noexcept
    @cython.final
    cdef inline void clear(self) noexcept
    @cython.final
    cdef inline int reserve(self) except -1


@cython.final
cdef class Heap(Array):
    @cython.locals(nodes=NodeP, node=Node, i=Py_ssize_t, parent=Py_ssize_t)
    cdef inline int push(self, double f, int64_t tie, double g, uint64_t key, int64_t used, int64_t shards,
                  int64_t link) except -1
    @cython.locals(nodes=NodeP, top=Node, last=Node, i=Py_ssize_t, child=Py_ssize_t)
    cdef inline (double, int64_t, double, uint64_t, int64_t, int64_t, int64_t) pop(self) noexcept


@cython.final
cdef class MoveList(Array):
    cdef inline int add(self, int kind, int n, uint64_t dims, int e, int64_t k, uint64_t nxt) except -1
    @cython.locals(mv=MoveP)
    cdef inline (int, int, uint64_t, int, int64_t, uint64_t) get(self, Py_ssize_t i) noexcept


@cython.final
cdef class Links(Array):
    @cython.locals(lk=LinkP)
    cdef inline int64_t add(self, int64_t parent, MoveList moves, Py_ssize_t i) except -1
    @cython.locals(lk=LinkP)
    cdef inline (int64_t, int, int, uint64_t, int) get(self, int64_t i) noexcept


@cython.locals(x=uint64_t)
cdef uint64_t mix(uint64_t key, int64_t sub) noexcept
cdef bint less(Node* a, Node* b) noexcept
@cython.locals(q=cython.p_void)
cdef void* grown(void* p, size_t nbytes) except NULL
@cython.locals(n=int)
cdef int bit_length(uint64_t x) noexcept
cdef uint64_t dim_at(uint64_t m, int i) noexcept
cdef int member(uint64_t dims, int i) noexcept
cdef int64_t shards_after(int kind, int64_t k, int64_t shards) noexcept
@cython.locals(i=int, j=int, t=int)
cdef bint next_permutation(int* a, int n) noexcept
@cython.locals(i=int, j=int)
cdef bint next_combination(int* c, int r, int n) noexcept


@cython.final
cdef class Core:
    cdef int L, ndim, nmesh, lane, td_bits, n_ops, n_targets, n_parks
    cdef int live[ML]
    cdef int64_t size[MM]
    cdef int shift[MM]
    cdef uint64_t clear[MM]
    cdef uint64_t unflag[MM]
    cdef int op_id[MM]
    cdef uint64_t goal_place[MM]
    cdef double weight[MM]
    cdef int goal_stacks[MD * ML]
    cdef int goal_lens[MD]
    cdef bint is_spare[MD]
    cdef uint64_t partial_flag, place_mask, td_mask, live_mask, goal_pmask, goal_shard_mask, spare_mask
    cdef readonly uint64_t start_key, goal_key
    cdef readonly int64_t start_shards
    cdef double nbytes, goal_local, least_local, latency, inv_bw, bpu, lbpu
    cdef bint linear
    cdef object model
    cdef int64_t bound
    cdef int expand_work, tight_work
    cdef Table h, sharp, shared, fewest, best, refined, seen
    cdef MoveList moves
    cdef Heap open, starts
    cdef Links links
    # scratch: view's, successors' and reductions', tight's
    cdef int v_stacks[MD * ML]
    cdef int v_lens[MD]
    cdef int v_settled[MD]
    cdef int targets[MD]
    cdef int parks[MD]
    cdef int ready[MD]
    cdef int group_of[ML]
    cdef uint64_t group_dims[ML]
    cdef int group_len[ML]
    cdef uint64_t group_bits[ML]
    cdef int comb[ML]
    cdef int idx[ML]
    cdef int red[ML]
    cdef int dirty_d[MD]
    cdef int dirty_lo[MD]
    cdef uint64_t dirty_bits[MD]
    cdef int64_t dirty_k[MD]
    cdef int64_t pushes[MD]
    cdef double cheapest[MD]
    cdef double extra[MD]
    cdef double last_alone[MD]
    cdef double last_taking[MD]

    @cython.locals(key=uint64_t, d=Py_ssize_t, pos=Py_ssize_t)
    cpdef uint64_t key_of(self, tuple stacks, uint64_t pmask) except? 0
    cdef inline uint64_t field(self, uint64_t e, uint64_t pos, int m) noexcept
    @cython.locals(i=int, n=int64_t)
    cdef inline int64_t product(self, uint64_t mask) noexcept
    @cython.locals(stacks=IntP, lens=IntP, settled=IntP, lane=int, d=int, i=int, m=int,
                   pos=int, field=uint64_t, place=uint64_t, smask=uint64_t, pmask=uint64_t)
    cdef (uint64_t, uint64_t) view(self, uint64_t key) noexcept
    @cython.locals(found=bint, h=double, n_coll=int64_t, lane=int, tdb=int, smask=uint64_t, pmask=uint64_t,
                   mis=uint64_t, i=int, m=int, field=uint64_t, place=uint64_t, dirty=int, moving=double,
                   lanes=uint64_t, lo=uint64_t, pos=int, reduce=uint64_t, red=int64_t, ops=uint64_t, n_ops=int,
                   unsharded=uint64_t, pushes=int64_t, slope=double, after=double, least=double)
    cdef (double, int64_t) bound_of(self, uint64_t key, int64_t shards) except *
    @cython.locals(smask=uint64_t, pmask=uint64_t, stacks=IntP, lens=IntP, settled=IntP,
                   lane=int, dirty_d=IntP, dirty_lo=IntP, dirty_bits=U64P,
                   dirty_k=I64P, local=double, inv_bw=double, latency=double, free_=uint64_t,
                   total=double, n_dirty=int, d=int, lo=int, j=int, bits=uint64_t, before_all=double,
                   pend=uint64_t, seen_ops=uint64_t, i=int, m=int, pushes=I64P,
                   cheapest=DblP, extra=DblP, last_alone=DblP,
                   last_taking=DblP, apart=double, parked=double, others=double, t=int, f=int,
                   on_f=uint64_t, k=int64_t, top=int, landing=bint, reach=uint64_t, fall=double, e=int,
                   pushed=uint64_t, bit=uint64_t, n=int64_t, fall_apart=double, fall_last=double, net=double,
                   rate=double, cheap=double, least=double)
    cdef double tight(self, uint64_t key, int64_t shards) noexcept
    @cython.locals(smask=uint64_t, pmask=uint64_t, moves=MoveList, stacks=IntP, lens=IntP,
                   settled=IntP, targets=IntP, parks=IntP, ready=IntP, lane=int,
                   n_targets=int, first_spare=bint, e=int, t=int, n_parks=int, parked=uint64_t, d=int, n=int,
                   lo=int, top=int, k=int64_t, nkey=uint64_t, dims=uint64_t, j=int, m=int,
                   group_of=IntP, group_dims=U64P, group_len=IntP,
                   group_bits=U64P, i=int, n_groups=int, bit=uint64_t, r=int, g=uint64_t, g_n=int,
                   bits=uint64_t, subset=uint64_t, spare=uint64_t, n_spare=int)
    cdef void successors(self, uint64_t key, int family, bint tight, double most) except *
    @cython.locals(k=int64_t, rest=uint64_t, i=int, m=int)
    cdef int reduction(self, uint64_t key, uint64_t dims, int r) except -1
    @cython.locals(red=IntP, idx=IntP, k=int64_t, rest=uint64_t, i=int, count=int, perm=uint64_t,
                   t=int, e=int, nkey=uint64_t, pos=int)
    cdef void reductions(self, uint64_t key, uint64_t dims, int r, bint every_order, int onto, int one,
                         double most) except *
    cdef inline double step_cost(self, int kind, int64_t k, double local) except? -1.0
    @cython.locals(parent=int64_t, kind=int, n=int, dims=uint64_t, e=int, i=int)
    cdef list path_of(self, int64_t link)
    @cython.locals(bound=int64_t, expand_work=int, best=Table, fewest=Table, open_=Heap, slack=double, limit=double,
                   work=double, f=double, _i=int64_t, _a=double, g=double, state=uint64_t, used=int64_t,
                   shards=int64_t, link=int64_t, found=bint, known_g=double, known=bint, known_used=int64_t,
                   n_coll=int64_t, spare=int64_t, sharp=double, local=double, i=Py_ssize_t, kind=int, n=int,
                   dims=uint64_t, e=int, k=int64_t, nxt=uint64_t, n_used=int64_t, c=double, nshards=int64_t,
                   h=double)
    cdef (int, double, double, int64_t) run(self, int family, double budget, double upper, bint ties, double f0,
                                             int64_t tie0, double g0, uint64_t key0, int64_t used0, int64_t shards0,
                                             int64_t link0, int64_t tie, bint use_shared) except *
    @cython.locals(f0=double, _i=int64_t, status=int, work=double, cost=double, found=int64_t)
    cpdef tuple astar(self, int family, double budget, double upper, bint ties)
    @cython.locals(starts=Heap, f0=double, _i=int64_t, _a=double, tie=int64_t, best_link=int64_t, have_best=bint,
                   work=double,
                   f=double, depth=int64_t, g=double, state=uint64_t, used=int64_t, shards=int64_t, link=int64_t,
                   found=bint, known_g=double, known_used=int64_t, most=double, status=int, out_work=double,
                   out_cost=double, out_link=int64_t, local=double, n_coll=int64_t, i=Py_ssize_t, kind=int, n=int,
                   dims=uint64_t, e=int, k=int64_t, nxt=uint64_t, coll=int64_t, c=double, nshards=int64_t,
                   h=double)
    cpdef tuple probes(self, double budget, double upper, int64_t depth_limit, double probe_root, double probe_moves)
