"""Flat parameters: a bucket of parameters kept as one flat buffer per rank, as PyTorch FSDP's ``FlatParameter``.

A :class:`FlatLayout` lays the members of a bucket end to end.  Each member
has a *compute spec*: replicated on the data-parallel mesh dim ``dp``, with
whatever placement it has on the other dims (tensor parallelism).  On a rank,
the members' local blocks in their compute specs, raveled and concatenated
and followed by zeros, make a flat vector of ``dp * row`` elements; the rank
at position ``d`` on the dp dim *stores* its ``d``-th run of ``row``
elements.  As a value of the graph the buffer has the spec of a bucket buffer
(:func:`~dtensor_np.passes.bucket_layout.buffer_specs`): a global array of
shape ``(mesh size, row)``, one row per rank, the dp dim innermost.

* ``all_gather`` on dp stacks the group's rows: the ``(dp, row)`` result,
  raveled, is the flat vector, so :class:`FlatUnpack` (``unflatten``) returns
  every member as a *view* of it.  Nothing is copied in (a rank's stored row
  is the send buffer) or out.
* gradients go the other way: :class:`FlatPack` (``flatten``) writes each
  member's local gradient (a pending sum on dp) once into a ``(dp, row)``
  buffer, and one ``reduce_scatter`` on dp leaves every rank the reduced row
  it stores: the gradient of its flat shard, laid out like the parameters.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,), ("dp",))
    >>> specs = tuple(dt.DTensorSpec(mesh, (dt.Replicate(),), dt.TensorMeta(s, "f8")) for s in [(2, 3), (3,)])
    >>> layout = FlatLayout.of(specs, dp_dim=0)
    >>> layout.row, layout.offsets[0], str(layout.storage_spec())
    (5, (0, 6), 'S(0)')
    >>> rows = [layout.shard_rows(r, [np.arange(6.0).reshape(2, 3), np.array([6.0, 7, 8])]) for r in (0, 1)]
    >>> rows[0].tolist(), rows[1].tolist()
    ([[0.0, 1.0, 2.0, 3.0, 4.0]], [[5.0, 6.0, 7.0, 8.0, 0.0]])
    >>> [v.tolist() for v in layout.unflatten(0, np.concatenate(rows))]
    [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [6.0, 7.0, 8.0]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from collectives import array_module

from ..errors import ShardingError
from ..graph.ir import MeshOp, NodeSharding, ShapeDtype
from ..mesh import DeviceMesh
from ..placements import Partial, Replicate
from ..spec import DTensorSpec
from .bucket_layout import buffer_specs

__all__ = ["FlatLayout", "FlatPack", "FlatUnpack"]


@dataclass(frozen=True, eq=False, slots=True)
class FlatLayout:
    """Where every member of a flat bucket lies on every rank (see the module doc).

    ``specs``: the members' compute specs (replicated on mesh dim ``dp_dim``);
    ``offsets[rank][m]``: where member ``m`` starts in the rank's flat vector;
    ``row``: the elements each rank stores (the flat vector is ``dp * row``
    long, its tail zeros).
    """

    specs: tuple[DTensorSpec, ...]
    dp_dim: int
    row: int
    offsets: tuple[tuple[int, ...], ...]
    pieces: tuple[tuple[tuple[int, int, tuple[int, ...]], ...], ...] = ()

    @classmethod
    def of(cls, specs: Sequence[DTensorSpec], dp_dim: int) -> FlatLayout:
        """The layout of members with these compute specs, stored split over mesh dim ``dp_dim``."""
        specs = tuple(specs)
        if not specs:
            raise ShardingError("a flat bucket needs at least one member")
        mesh, dtype = specs[0].mesh, specs[0].dtype
        for s in specs:
            if s.mesh != mesh or s.dtype != dtype:
                raise ShardingError(
                    f"the members of a flat bucket share one mesh and dtype: expected {mesh!r} {dtype}, "
                    f"got {s.mesh!r} {s.dtype}"
                )
            if s.placements[dp_dim] != Replicate():
                raise ShardingError(f"a flat member is replicated on the dp mesh dim, got {s}")
        offsets, pieces, longest = [], [], 0
        for rank in mesh.all_ranks:
            shapes = [s.local_shape_of_rank(rank) for s in specs]
            sizes = [math.prod(shape) for shape in shapes]
            starts = tuple(int(x) for x in np.cumsum([0] + sizes[:-1]))
            offsets.append(starts)
            pieces.append(tuple((o, o + n, shape) for o, n, shape in zip(starts, sizes, shapes)))
            longest = max(longest, sum(sizes))
        dp = mesh.shape[dp_dim]
        return cls(specs, dp_dim, max(1, -(-longest // dp)), tuple(offsets), tuple(pieces))

    # -- what the layout is ----------------------------------------------------------
    @property
    def mesh(self) -> DeviceMesh:
        return self.specs[0].mesh

    @property
    def dtype(self) -> np.dtype:
        return self.specs[0].dtype

    @property
    def dp(self) -> int:
        """The size of the data-parallel mesh dim."""
        return self.mesh.shape[self.dp_dim]

    @property
    def aval(self) -> ShapeDtype:
        """The buffer as a global value: one row per rank."""
        return ShapeDtype((self.mesh.size(), self.row), self.dtype)

    def storage_spec(self) -> DTensorSpec:
        """Each rank holds the row it stores (before the all_gather, after the reduce_scatter)."""
        return buffer_specs(self.mesh, "all_gather", (self.dp_dim,), None, self.row, self.dtype)[0]

    def gathered_spec(self) -> DTensorSpec:
        """Each rank holds the ``(dp, row)`` rows of its dp group: its whole flat vector."""
        return buffer_specs(self.mesh, "all_gather", (self.dp_dim,), None, self.row, self.dtype)[1]

    def partial_spec(self) -> DTensorSpec:
        """Each rank holds a ``(dp, row)`` flat vector of gradients still to be summed over dp."""
        return buffer_specs(self.mesh, "reduce_scatter", (self.dp_dim,), "sum", self.row, self.dtype)[0]

    # -- moving data ------------------------------------------------------------------
    def unflatten(self, rank: int, buf: Any) -> tuple[Any, ...]:
        """The members' local blocks on ``rank`` as views of its gathered ``(dp, row)`` buffer."""
        flat = buf.reshape(-1)
        return tuple([flat[start:stop].reshape(shape) for start, stop, shape in self.pieces[rank]])

    def flatten(self, rank: int, *arrays: Any) -> Any:
        """The ``(dp, row)`` flat vector of ``rank``'s member arrays (one copy of each; zeros after)."""
        xp = array_module(arrays[0]) if arrays else np
        flat = xp.empty(self.dp * self.row, self.dtype)
        end = 0
        for (start, stop, _), x in zip(self.pieces[rank], arrays):
            flat[start:stop] = x.reshape(-1)
            end = stop
        flat[end:] = 0  # the padding
        return flat.reshape(self.dp, self.row)

    def accumulate(self, rank: int, total: Any, *arrays: Any) -> Any:
        """``total`` (a ``(dp, row)`` flat vector) with ``rank``'s member arrays added in place; returns it.

        Example:
            >>> import numpy as np, dtensor_np as dt
            >>> spec = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Replicate(),), dt.TensorMeta((3,), "f8"))
            >>> FlatLayout.of((spec,), 0).accumulate(0, np.ones((2, 2)), np.arange(3.0)).tolist()
            [[1.0, 2.0], [3.0, 1.0]]
        """
        flat = total.reshape(-1)
        for (start, stop, _), x in zip(self.pieces[rank], arrays):
            flat[start:stop] += x.reshape(-1)
        return total

    def shard_rows(self, rank: int, full: Sequence[Any]) -> Any:
        """The ``(1, row)`` row ``rank`` stores, cut from the members' full arrays (no communication)."""
        local = [x[s.local_index(rank)] if hasattr(x, "shape") else np.asarray(x) for x, s in zip(full, self.specs)]
        d = self.mesh.coordinate_of(rank)[self.dp_dim]
        return self.flatten(rank, *local)[d:d + 1].copy()

    def describe(self) -> str:
        return f"flat bucket of {len(self.specs)} ({self.dtype}), {self.row} elements per rank"


def _check(what: str, specs: tuple[DTensorSpec, ...], expected: Sequence[DTensorSpec]) -> Optional[str]:
    if len(specs) != len(expected):
        return f"expected {len(expected)} {what}, got {len(specs)}"
    for got, want in zip(specs, expected):
        if (got.placements, got.shard_order, got.shape, got.dtype) != (want.placements, want.shard_order, want.shape,
                                                                         want.dtype):
            return f"{what}: expected {want} {want.shape}, got {got} {got.shape}"
    return None


@dataclass(frozen=True, eq=False, slots=True)
class FlatUnpack(MeshOp):
    """``unflatten``: the members of a gathered flat bucket, as views (``layout.unflatten``).

    Example:
        >>> FlatUnpack.name
        'unflatten'
    """

    layout: FlatLayout
    name: ClassVar[str] = "unflatten"

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return tuple(ShapeDtype(s.shape, s.dtype) for s in self.layout.specs)

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        return _check("buffer", inputs, [self.layout.gathered_spec()]) or _check("members", outputs, self.layout.specs)

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        return f"{len(self.layout.specs)} views"

    def local(self, rank: int, buf: Any) -> tuple[Any, ...]:
        return self.layout.unflatten(rank, buf)


@dataclass(frozen=True, eq=False, slots=True)
class FlatPack(MeshOp):
    """``flatten``: the members' gradients (pending sums on dp) written once into a flat bucket (``layout.flatten``).

    With ``accumulate`` the node reads a flat buffer first and adds the members
    into it in place (``layout.accumulate``): gradient accumulation over
    micro-batches with no second buffer.

    Example:
        >>> FlatPack.name
        'flatten'
    """

    layout: FlatLayout
    accumulate: bool = False
    name: ClassVar[str] = "flatten"

    def abstract_eval(self, avals: tuple[ShapeDtype, ...]) -> tuple[ShapeDtype, ...]:
        return (self.layout.aval,)

    def member_specs(self) -> tuple[DTensorSpec, ...]:
        """The members' specs as gradients: the compute spec with a pending sum on dp."""
        dp = self.layout.dp_dim
        return tuple(
            s.with_placements(tuple(Partial("sum") if m == dp else p for m, p in enumerate(s.placements)))
            for s in self.layout.specs
        )

    def check_sharding(self, inputs: tuple[DTensorSpec, ...], outputs: tuple[DTensorSpec, ...]) -> Optional[str]:
        buffer = [self.layout.partial_spec()]
        if self.accumulate:
            return _check("sum", inputs[:1], buffer) or _check("members", inputs[1:], self.member_specs()) or _check(
                "buffer", outputs, buffer)
        return _check("members", inputs, self.member_specs()) or _check("buffer", outputs, buffer)

    def describe(self, sharding: Optional[NodeSharding]) -> str:
        return self.layout.describe() + (", added in place to the first input" if self.accumulate else "")

    def local(self, rank: int, *arrays: Any) -> Any:
        if self.accumulate:
            return self.layout.accumulate(rank, *arrays)
        return self.layout.flatten(rank, *arrays)
