"""Bucket layouts: how several collectives' arrays share one flat buffer, and the copy-in / split-out ops.

A bucket of all_gathers, reduce_scatters or all_reduces runs as one
collective on a 2-D buffer:

* all_gather: each rank copies its members' shards, flattened, into its row
  (``copy_in``); one all_gather stacks the group's rows; ``split_out`` cuts
  every member's piece out of every row and concatenates the pieces along
  the member's own shard dim (any dim, not only 0);
* reduce_scatter: each rank cuts every member along its scatter dim into the
  group's pieces and copies piece ``p`` into row ``p`` (``copy_in``); one
  reduce_scatter of the rows leaves row ``p`` reduced on member ``p``, where
  ``split_out`` views every member's piece;
* all_reduce: each rank copies its members' arrays, flattened, into its one
  row (``copy_in``); one all_reduce of the row leaves every member's sum in
  place, where ``split_out`` views it.

Uneven shards (``torch.chunk`` sizes) are **padded**: a member's slot in a
row is as long as its largest piece on any rank, and shorter pieces are
followed by zeros.  So every row has the same length and the bucket always
runs the even collectives (``Iallgather``, ``Ireduce_scatter_block``), whose
counts are known without a per-rank table, at the price of a few padding
elements per uneven member (at most one slice of the member along its shard
dim per rank).  Each element keeps its place relative to its destination
rank and the group order, so a bucketed reduce_scatter combines exactly the
same values in the same rank order as the member's own collective.

``byte_view=True`` (all_gather only: movement needs no arithmetic) lays the
buffer out in bytes, so members of different dtypes share a bucket; slots
then start on 16-byte boundaries.

The buffer is a value of the graph like any other, so it has a spec: a
global array of shape ``(mesh size, row length)`` split by rows over every
mesh dim, with the bucket's mesh dims innermost.  Before an all_gather each
rank holds its row (``S(0)`` everywhere); after it, the rows of its group
(``R`` on the bucket's mesh dims).  A reduce_scatter goes from ``P(op)`` on
the bucket's mesh dims (each rank holds the ``k`` rows of partial values it
sends) to ``S(0)`` everywhere (each rank holds its reduced row).  An
all_reduce buffer has one row per group (``mesh size / group size`` rows),
split over the other mesh dims, and goes from ``P(op)`` to ``R`` on the
bucket's mesh dims: each rank holds one row before and after.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> before, after = buffer_specs(mesh, "all_gather", (0,), None, 6, np.dtype("f4"))
    >>> str(before), str(after), before.local_shape_of_rank(1), after.local_shape_of_rank(1)
    ('S(0)', 'R', (1, 6), (2, 6))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Optional, Sequence

import numpy as np

from collectives import allocator, array_module, group_layout

from ..graph.ir import MeshOp, NodeSharding, ShapeDtype
from ..mesh import DeviceMesh
from ..placements import Partial, Placement, Replicate, Shard
from ..planner import CollectiveCall
from ..spec import DTensorSpec, TensorMeta
from .ops import Collective, rank_shapes

__all__ = ["Slot", "Segment", "View", "BucketLayout", "BucketPack", "BucketUnpack", "buffer_specs", "BYTE_ALIGN"]

BYTE_ALIGN = 16
"""Slots of a byte-view buffer start on multiples of this many bytes (the largest NumPy itemsize we move)."""

Shapes = tuple[tuple[int, ...], ...]


def buffer_specs(
    mesh: DeviceMesh, kind: str, mesh_dims: tuple[int, ...], op: Optional[str], length: int, dtype: np.dtype
) -> tuple[DTensorSpec, DTensorSpec]:
    """The specs of a bucket buffer with rows of ``length`` before and after its collective (see the module doc)."""
    live = [m for m in range(mesh.ndim) if mesh.shape[m] > 1]
    group_dims = tuple(m for m in mesh_dims if mesh.shape[m] > 1)
    others = tuple(m for m in live if m not in group_dims)
    rows = mesh.size() // math.prod(mesh.shape[m] for m in group_dims) if kind == "all_reduce" else mesh.size()
    meta = TensorMeta((rows, length), dtype)

    def spec(on_group: Placement, order: tuple[int, ...]) -> DTensorSpec:
        placements: list[Placement] = [Replicate()] * mesh.ndim
        for m in others:
            placements[m] = Shard(0)
        for m in group_dims:
            placements[m] = on_group
        return DTensorSpec(mesh, tuple(placements), meta, ((0, order),) if order else ())

    rows_split = spec(Shard(0), others + group_dims)
    if kind == "all_gather":
        return rows_split, spec(Replicate(), others)
    if kind == "reduce_scatter":
        return spec(Partial(op or "sum"), others), rows_split
    if kind == "all_reduce":
        return spec(Partial(op or "sum"), others), spec(Replicate(), others)
    raise ValueError(f"only all_gather, reduce_scatter and all_reduce are bucketed, got {kind!r}")


@dataclass(frozen=True, eq=False, slots=True)
class Slot:
    """One member of a bucket: its place in every row, and every rank's shapes before and after.

    ``offset`` and ``span`` count buffer elements (bytes in a byte-view
    buffer); ``in_shapes`` / ``out_shapes`` are indexed by world rank.
    """

    aval: ShapeDtype
    axis: int
    offset: int
    span: int
    in_shapes: Shapes
    out_shapes: Shapes


class Block(NamedTuple):
    """One rank's piece of an uneven member in a received all_gather buffer: ``buf[row, start:stop]``."""

    row: int
    start: int
    stop: int


class Segment(NamedTuple):
    """A run of members copied together between the buffer and the members' arrays.

    ``count`` consecutive members whose pieces all have ``n`` elements move
    with one strided copy between the buffer, where the run starts at
    ``offset`` of each row, and the members' arrays (``blocks`` None).  An
    uneven member of an all_gather is one segment of its own with ``blocks``,
    every rank's piece, concatenated.  ``first`` is where the run starts: in
    the flat concatenation of the gathered members (all_gather), or its first
    member's index (reduce_scatter).
    """

    first: int
    count: int
    n: int
    offset: int
    blocks: Optional[tuple[Block, ...]]


class View(NamedTuple):
    """Where a member's result lies, ``[start:stop]``, with the dtype and shape it is viewed as."""

    start: int
    stop: int
    dtype: np.dtype
    shape: tuple[int, ...]


class _Recycled:
    """Host arrays of one shape and dtype for a bucket's copy-in buffer or gathered output, reused.

    A bucket's buffers have the same shape every call; large NumPy ones come
    from a :class:`collectives.buffers.BufferSlot` (reused once no result,
    view or in-flight collective holds them; the same size threshold and
    ``DTENSOR_NP_RECYCLE_*`` switches as the collectives' outputs), the rest
    (small or CuPy) are allocated each call.
    """

    __slots__ = ("shape", "dtype", "recycled")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = shape
        self.dtype = dtype
        self.recycled = allocator(shape, dtype)

    def take(self, xp: Any) -> Any:
        if xp is np and self.recycled is not None:
            return self.recycled()
        return xp.empty(self.shape, self.dtype)


def _uniform(sizes: Sequence[int], span: int) -> bool:
    """True when every rank's piece has ``span`` elements (even shards, no padding)."""
    return all(n == span for n in sizes)


def _leads(shape: tuple[int, ...], axis: int) -> bool:
    """True when pieces of ``shape`` along ``axis`` are contiguous runs of its C-order elements."""
    return math.prod(shape[:axis]) == 1


@dataclass(frozen=True, slots=True)
class _RankPlan:
    """One rank's copy-in and split-out of a bucket, worked out once.

    ``counts[p][m]``: buffer elements of member ``m`` in row ``p`` (the
    sent row for all_gather, row ``p`` of the sent rows for reduce_scatter);
    ``pads[p][m]``: zeros after it; ``leading[m]``: its pieces are
    contiguous (split along a leading dim); ``cuts[p][m]`` / ``indices[p][m]``:
    where a reduce_scatter member's piece for row ``p`` lies in its flat array
    / its index; ``segments``: the runs of members copied together, each
    ``(start, members, n, offset, blocks)``: ``members`` consecutive members
    whose pieces all have ``n`` elements (``blocks`` None), moved with one
    strided copy between the buffer at ``offset`` and the flat concatenation
    at ``start`` (all_gather: the gathered rows into the output; reduce_scatter:
    the members' pieces into the rows), or, for uneven members of an
    all_gather, ``blocks``: (row, start, stop) of every piece, concatenated;
    ``views[m]``: (start, stop, dtype,
    shape) of member ``m``'s result in the concatenation of those blocks
    (all_gather) or in the received row (reduce_scatter); ``plain``: no
    padding and no byte view on the gather side; ``packed`` / ``flat``: the
    recycled copy-in buffer and gathered output.
    """

    rows_in: int
    counts: tuple[tuple[int, ...], ...]
    pads: tuple[tuple[int, ...], ...]
    leading: tuple[bool, ...]
    cuts: tuple[tuple[tuple[int, int], ...], ...]
    indices: tuple[tuple[Any, ...], ...]
    segments: tuple[Segment, ...]
    views: tuple[View, ...]
    plain: bool
    packed: _Recycled
    flat: Optional[_Recycled]

    @classmethod
    def build(cls, layout: "BucketLayout", rank: int) -> "_RankPlan":
        group = layout.group_of(rank)
        slots = layout.slots
        if layout.kind == "all_reduce":  # one row: every member flat, in order, padded to its span
            counts = (tuple(layout.count(s, rank) for s in slots),)
            pads = (tuple(s.span - n for s, n in zip(slots, counts[0])),)
            views = tuple(View(s.offset, s.offset + n, s.aval.dtype, s.out_shapes[rank]) for s, n in zip(slots, counts[0]))
            packed = _Recycled((1, layout.length), layout.dtype)
            leading = (True,) * len(slots)
            return cls(1, counts, pads, leading, (), (), (), views, not any(pads[0]), packed, None)
        if layout.kind == "all_gather":
            counts = (tuple(layout.count(s, rank) for s in slots),)
            pads = (tuple(s.span - n for s, n in zip(slots, counts[0])),)
            leading = tuple(_leads(s.out_shapes[rank], s.axis) for s in slots)
            segments: list[Segment] = []
            views, at = [], 0
            for s, lead in zip(slots, leading):
                begin = at
                if lead:
                    sizes = [layout.count(s, q) for q in group]
                    if _uniform(sizes, s.span):
                        last = segments[-1] if segments else None
                        if last and last.blocks is None and last.n == s.span and last.offset + last.count * last.n == s.offset:
                            segments[-1] = last._replace(count=last.count + 1)
                        else:
                            segments.append(Segment(at, 1, s.span, s.offset, None))
                    else:
                        blocks = tuple(Block(p, s.offset, s.offset + n) for p, n in enumerate(sizes))
                        segments.append(Segment(at, 0, sum(sizes), s.offset, blocks))
                    at += sum(sizes)
                views.append(View(begin, at, s.aval.dtype, s.out_shapes[rank]))
            plain = not layout.byte_view and not any(pads[0])
            packed = _Recycled((1, layout.length), layout.dtype)
            flat = _Recycled((at,), layout.dtype)
            return cls(1, counts, pads, leading, (), (), tuple(segments), tuple(views), plain, packed, flat)
        leading = tuple(_leads(s.in_shapes[rank], s.axis) for s in slots)
        counts_p, pads_p, cuts_p, index_p = [], [], [], []
        starts = [0] * len(slots)
        for q in group:
            counts, pads, cuts, indices = [], [], [], []
            for m, s in enumerate(slots):
                size = s.out_shapes[q][s.axis]
                n = math.prod(s.out_shapes[q])
                inner = n // size if size else 0
                begin = starts[m]
                cuts.append((begin * inner, (begin + size) * inner))
                indices.append((slice(None),) * s.axis + (slice(begin, begin + size),))
                starts[m] = begin + size
                counts.append(n)
                pads.append(s.span - n)
            counts_p.append(tuple(counts))
            pads_p.append(tuple(pads))
            cuts_p.append(tuple(cuts))
            index_p.append(tuple(indices))
        mine = counts_p[group.index(rank)]
        views = tuple(View(s.offset, s.offset + n, s.aval.dtype, s.out_shapes[rank]) for s, n in zip(slots, mine))
        segments = []  # runs of leading members split evenly: one stacked copy each; the others piece by piece
        for m, (s, lead) in enumerate(zip(slots, leading)):
            if lead and _uniform([c[m] for c in counts_p], s.span):
                last = segments[-1] if segments else None
                if last and last.blocks is None and last.first + last.count == m and last.n == s.span:
                    segments[-1] = last._replace(count=last.count + 1)
                else:
                    segments.append(Segment(m, 1, s.span, s.offset, None))
            else:
                segments.append(Segment(m, 1, 0, s.offset, ()))
        packed = _Recycled((len(group), layout.length), layout.dtype)
        return cls(
            len(group), tuple(counts_p), tuple(pads_p), leading, tuple(cuts_p), tuple(index_p),
            tuple(segments), views, True, packed, None,
        )


@dataclass(frozen=True, eq=False, slots=True)
class BucketLayout:
    """Where every member of one bucket lives in the flat buffer, and the per-rank copy-in and split-out.

    Build it with :meth:`build`; ``pack(rank, *arrays)`` is a rank's copy-in,
    ``unpack(rank, buffer)`` its split-out (one array per member).

    Example:
        >>> import dtensor_np as dt
        >>> mesh = dt.DeviceMesh((2,))
        >>> def gather(shape, dim):
        ...     src = dt.DTensorSpec(mesh, (dt.Shard(dim),), dt.TensorMeta(shape, "f4"))
        ...     (step,) = dt.plan_redistribute(src, src.with_placements((dt.Replicate(),)))
        ...     return Collective.from_step(step), step.before, step.after
        >>> layout = BucketLayout.build("all_gather", [gather((3, 2), 0), gather((2, 3), 1)])
        >>> layout.length, [(s.offset, s.span) for s in layout.slots]  # rank 0 holds 2 rows, 2 columns
        (8, [(0, 4), (4, 4)])
        >>> a = np.arange(6, dtype="f4").reshape(3, 2); b = np.arange(6, dtype="f4").reshape(2, 3)
        >>> rows = np.concatenate([layout.pack(0, a[:2], b[:, :2]), layout.pack(1, a[2:], b[:, 2:])])
        >>> out_a, out_b = layout.unpack(0, rows)
        >>> np.array_equal(out_a, a), np.array_equal(out_b, b)
        (True, True)
    """

    kind: str
    groups: tuple[tuple[int, ...], ...]
    mesh_dims: tuple[int, ...]
    op: Optional[str]
    dtype: np.dtype
    length: int
    slots: tuple[Slot, ...]
    mesh: DeviceMesh
    byte_view: bool = False
    _plans: dict[int, _RankPlan] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, kind: str, members: Sequence[tuple[Collective, DTensorSpec, DTensorSpec]], *, byte_view: bool = False
    ) -> BucketLayout:
        """The layout of a bucket of ``members``: (collective, spec before, spec after) each, in order."""
        if not members:
            raise ValueError("a bucket needs at least one member")
        first, spec0, _ = members[0]
        if byte_view and kind != "all_gather":
            raise ValueError("a byte view only moves bytes: it cannot reduce, so only all_gather buckets take it")
        dtypes = {before.dtype for _, before, _ in members}
        if not byte_view and len(dtypes) > 1:
            raise ValueError(f"members of dtypes {sorted(map(str, dtypes))} share a bucket only with byte_view=True")
        slots = []
        offset = 0
        for collective, before, after in members:
            call = collective.call
            if call.kind != kind or call.groups != first.call.groups:
                raise ValueError(f"bucket members must be {kind}s on the groups {first.call.groups}, got {collective}")
            if kind != "all_gather" and call.op != first.call.op:
                raise ValueError(f"{kind} members must share one op ({first.call.op}), got {call.op}")
            in_shapes, out_shapes = rank_shapes(before), rank_shapes(after)
            pieces = out_shapes if kind == "reduce_scatter" else in_shapes
            span = max(math.prod(s) for s in pieces)
            if byte_view:
                span = -(-span * before.dtype.itemsize // BYTE_ALIGN) * BYTE_ALIGN
            axis = 0 if kind == "all_reduce" else call.axis  # an all_reduce splits nothing
            assert axis is not None
            aval = ShapeDtype(before.shape, before.dtype)
            slots.append(Slot(aval, axis, offset, span, in_shapes, out_shapes))
            offset += span
        dtype = np.dtype(np.uint8) if byte_view else spec0.dtype
        return cls(kind, first.call.groups, first.call.mesh_dims, first.call.op, dtype, offset, tuple(slots), spec0.mesh,
                   byte_view)

    # -- shapes and specs -----------------------------------------------------------
    @property
    def group_size(self) -> int:
        return len(self.groups[0])

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes_per_rank(self) -> int:
        """Bytes of the larger side of the collective on each rank (the gathered, scattered or reduced buffer)."""
        rows = 1 if self.kind == "all_reduce" else self.group_size
        return rows * self.length * self.itemsize

    @property
    def buffer_shape(self) -> tuple[int, ...]:
        """The buffer's global shape: a row per rank, or per group for an all_reduce (see the module doc)."""
        return self.specs()[0].shape

    def specs(self) -> tuple[DTensorSpec, DTensorSpec]:
        """The buffer's spec before and after the bucket's collective."""
        return buffer_specs(self.mesh, self.kind, self.mesh_dims, self.op, self.length, self.dtype)

    def collective(self) -> Collective:
        """The one collective that moves the whole bucket (even rows: no per-rank sizes)."""
        label = f"bucket of {len(self.slots)}"
        axis = None if self.kind == "all_reduce" else 0
        return Collective(CollectiveCall(self.kind, self.groups, self.mesh_dims, op=self.op, axis=axis), label)

    def group_of(self, rank: int) -> tuple[int, ...]:
        """The group of the bucket's collective that holds ``rank``."""
        return group_layout(self.groups, self.mesh.world_size).group_of(rank)

    def count(self, slot: Slot, rank: int) -> int:
        """Buffer elements of ``rank``'s piece of a member (its shard to gather, or its scattered piece)."""
        shape = slot.out_shapes[rank] if self.kind == "reduce_scatter" else slot.in_shapes[rank]
        n = math.prod(shape)
        return n * slot.aval.dtype.itemsize if self.byte_view else n

    def _plan(self, rank: int) -> _RankPlan:
        """What ``rank`` copies where (cached per rank: the layout is immutable)."""
        plan = self._plans.get(rank)
        if plan is None:
            plan = self._plans[rank] = _RankPlan.build(self, rank)
        return plan

    # -- per-rank copy-in and split-out ----------------------------------------------
    def pack(self, rank: int, *arrays: Any) -> Any:
        """``rank``'s buffer: one row (all_gather, all_reduce) or one row per group member (reduce_scatter).

        all_gather: one concatenation writes the row (members and zero
        padding, in order).  reduce_scatter: every run of evenly split members
        is one stacked copy (row ``p`` gets each member's piece ``p``); an
        uneven member or one split along an inner dim is copied piece by piece.
        """
        plan = self._plan(rank)
        xp = array_module(arrays[0]) if arrays else np
        if self.kind != "reduce_scatter":  # one row of the members' flat arrays (and padding)
            if plan.plain:  # no padding, no byte view: the members' flat views in order
                pieces = [x.reshape(-1) for x in arrays]
            else:
                pieces = []
                for x, pad in zip(arrays, plan.pads[0]):
                    pieces.append(x.reshape(-1).view(np.uint8) if self.byte_view else x.reshape(-1))
                    if pad:
                        pieces.append(xp.zeros(pad, self.dtype))
            buf = plan.packed.take(xp)
            if pieces:
                xp.concatenate(pieces, out=buf.reshape(-1))
            return buf
        buf = plan.packed.take(xp)
        k = plan.rows_in
        for m, count, n, offset, blocks in plan.segments:
            if blocks is None:  # members m..m+count-1, each k pieces of n: row p gets every member's piece p
                run = [x.reshape(k, 1, n) for x in arrays[m:m + count]]
                xp.concatenate(run, axis=1, out=buf[:, offset:offset + count * n].reshape(k, count, n))
                continue
            slot, x = self.slots[m], arrays[m]
            flat = x.reshape(-1) if plan.leading[m] else None
            for p in range(k):
                start, stop = plan.cuts[p][m]
                piece = flat[start:stop] if flat is not None else x[plan.indices[p][m]].reshape(-1)
                end = offset + piece.size
                buf[p, offset:end] = piece
                if plan.pads[p][m]:
                    buf[p, end:offset + slot.span] = 0
        return buf

    def unpack(self, rank: int, buf: Any) -> tuple[Any, ...]:
        """Every member's result on ``rank`` from its received buffer (in member order).

        reduce_scatter, all_reduce: views of this rank's reduced row.  all_gather: every
        member whose pieces join along a leading dim is copied into one array
        (reused across calls once nothing holds it), of which each member is
        a view: a run of evenly split members with one strided copy, an uneven
        member with one concatenation; a member gathered along an inner dim is
        concatenated on its own.
        """
        plan = self._plan(rank)
        if self.kind != "all_gather":
            row = buf[0]
            if plan.plain:
                return tuple([row[a:b].reshape(shape) for a, b, _, shape in plan.views])
            return tuple([row[a:b].view(dtype).reshape(shape) for a, b, dtype, shape in plan.views])
        xp = array_module(buf)
        assert plan.flat is not None
        flat = plan.flat.take(xp)
        k = buf.shape[0]
        for start, count, n, offset, blocks in plan.segments:
            if blocks is None:  # members with k pieces of n each: one strided copy from rank-major to member-major
                rows = buf[:, offset:offset + count * n].reshape(k, count, n).transpose(1, 0, 2)
                xp.copyto(flat[start:start + count * k * n].reshape(count, k, n), rows)
            else:
                xp.concatenate([buf[p, a:b] for p, a, b in blocks], out=flat[start:start + n])
        if plan.plain and all(plan.leading):
            return tuple([flat[a:b].reshape(shape) for a, b, _, shape in plan.views])
        outs = []
        group = self.group_of(rank)
        for slot, lead, (a, b, _, shape) in zip(self.slots, plan.leading, plan.views):
            if lead:
                outs.append(self._from_units(flat[a:b], slot, shape))
            else:
                pieces = [
                    self._from_units(buf[p, slot.offset:slot.offset + self.count(slot, q)], slot, slot.in_shapes[q])
                    for p, q in enumerate(group)
                ]
                outs.append(xp.concatenate(pieces, axis=slot.axis))
        return tuple(outs)

    def _from_units(self, block: Any, slot: Slot, shape: tuple[int, ...]) -> Any:
        return (block.view(slot.aval.dtype) if self.byte_view else block).reshape(shape)

    # -- checks for the verifier -------------------------------------------------------
    def buffer_shapes(self) -> tuple[Shapes, Shapes]:
        """Every world rank's buffer shape before and after the collective."""
        before, after = self.specs()
        return rank_shapes(before), rank_shapes(after)

    def describe(self) -> str:
        dtypes = sorted({str(s.aval.dtype) for s in self.slots})
        kib = self.nbytes_per_rank / 1024
        view = ", byte view" if self.byte_view else ""
        return f"{self.kind} bucket of {len(self.slots)} ({'/'.join(dtypes)}{view}), {kib:.1f} KiB per rank"


def _check_shapes(what: str, specs: tuple[DTensorSpec, ...], expected: Sequence[Shapes]) -> Optional[str]:
    for i, (spec, shapes) in enumerate(zip(specs, expected)):
        held = rank_shapes(spec)
        if held != shapes:
            return f"{what} {i} ({spec}) holds per-rank shapes {held}, but the bucket layout expects {shapes}"
    return None


@dataclass(frozen=True, eq=False, slots=True)
class BucketPack(MeshOp):
    """Copy-in: every rank copies its members' arrays into its bucket buffer (``layout.pack``).

    Example:
        >>> BucketPack.name
        'copy_in'
    """

    layout: BucketLayout
    name: ClassVar[str] = "copy_in"

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return (ShapeDtype(self.layout.buffer_shape, self.layout.dtype),)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        if len(inputs) != len(self.layout.slots):
            return f"expected {len(self.layout.slots)} members, got {len(inputs)}"
        return _check_shapes("member", inputs, [s.in_shapes for s in self.layout.slots]) or _check_shapes(
            "the buffer", outputs, [self.layout.buffer_shapes()[0]]
        )

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        return self.layout.describe()

    def local(self, rank: int, *arrays: Any) -> Any:
        return self.layout.pack(rank, *arrays)


@dataclass(frozen=True, eq=False, slots=True)
class BucketUnpack(MeshOp):
    """Split-out: every rank cuts its members' results out of the received bucket buffer (``layout.unpack``).

    Example:
        >>> BucketUnpack.name
        'split_out'
    """

    layout: BucketLayout
    name: ClassVar[str] = "split_out"

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return tuple(s.aval for s in self.layout.slots)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        if len(outputs) != len(self.layout.slots):
            return f"expected {len(self.layout.slots)} members, got {len(outputs)}"
        return _check_shapes("the buffer", inputs, [self.layout.buffer_shapes()[1]]) or _check_shapes(
            "member", outputs, [s.out_shapes for s in self.layout.slots]
        )

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        return f"{len(self.layout.slots)} members"

    def local(self, rank: int, buf: Any) -> tuple[Any, ...]:
        return self.layout.unpack(rank, buf)
