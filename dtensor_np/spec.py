"""``TensorMeta`` and ``DTensorSpec``: the global shape, dtype and placements of a distributed array.

A spec is a pure value: the mesh, one placement per mesh dim, the global
shape and dtype, and the *shard order* (for a tensor dim sharded on several
mesh dims, which mesh dim splits it first).  From a spec and a mesh
coordinate, :func:`compute_local_shape_and_global_offset` names the block a
rank holds, with ``torch.chunk`` sizes at every level of splitting.

Example:
    >>> from dtensor_np import DeviceMesh, Shard, Replicate
    >>> mesh = DeviceMesh((2, 2))
    >>> compute_local_shape_and_global_offset((5, 4), mesh, [Shard(0), Shard(0)], (1, 0))
    ((1, 4), (3, 0))
    >>> spec = DTensorSpec(mesh, (Shard(0), Replicate()), TensorMeta((4, 6), "float32"))
    >>> spec.dim_map, spec.sums, spec.num_shards
    ([0, -1], [], 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from collectives import chunk_size_and_offset, memo

from .arrays import distributable
from .errors import ShardingError
from .int_tuple import as_ints
from .interning import Interned
from .mesh import DeviceMesh
from .placements import Partial, Placement, Replicate, Shard, check_placement, check_shard_order, placements_str

__all__ = [
    "TensorMeta",
    "array_shape",
    "DTensorSpec",
    "ShardOrder",
    "compute_local_shape_and_global_offset",
    "default_shard_order",
]

# ((tensor_dim, (mesh_dim, ...)), ...): for every sharded tensor dim, the mesh
# dims that split it, outermost split first; sorted by tensor dim.
ShardOrder = tuple[tuple[int, tuple[int, ...]], ...]


def array_shape(shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (NumPy integers taken; bools, floats, strings refused).

    Example:
        >>> array_shape([2, np.int64(3)])
        (2, 3)
    """
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"TensorMeta shape must be a sequence of ints, got {shape!r}")
    raw = tuple(shape)
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) for s in raw):
        raise TypeError(f"TensorMeta shape must be a sequence of ints, got {shape!r}")
    checked = tuple(int(s) for s in raw)
    if any(s < 0 for s in checked):
        raise ShardingError(f"TensorMeta shape must be non-negative, got {checked}")
    return checked


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Global shape and dtype of a distributed array.

    Example:
        >>> TensorMeta((2, 3), "float32")
        TensorMeta(shape=(2, 3), dtype=dtype('float32'))
    """

    shape: tuple[int, ...]
    dtype: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", array_shape(self.shape))
        dtype = np.dtype(self.dtype)
        if not distributable(dtype):  # refused where the array is made, on every rank: never at its first collective
            raise TypeError(f"dtensor_np distributes numeric and bool arrays: expected a numeric or bool dtype, got "
                            f"{dtype} (object, string, void and datetime dtypes cannot be reduced or moved by MPI)")
        object.__setattr__(self, "dtype", dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)


def default_shard_order(placements: Sequence[Placement]) -> ShardOrder:
    """Mesh dims in ascending order for every sharded tensor dim.

    Example:
        >>> default_shard_order((Shard(0), Shard(1), Shard(0)))
        ((0, (0, 2)), (1, (1,)))
    """
    by_dim: dict[int, list[int]] = {}
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Shard):
            by_dim.setdefault(p.dim, []).append(mesh_dim)
    return tuple((d, tuple(m)) for d, m in sorted(by_dim.items()))


def normalize_placements(placements: Sequence[Any], mesh: DeviceMesh, ndim: Optional[int] = None) -> tuple[Placement, ...]:
    """``placements`` checked for ``mesh`` (one per mesh dim) and, given ``ndim``, for an ``ndim``-d array (negative dims made positive)."""
    if isinstance(placements, (Shard, Replicate, Partial)) or not isinstance(placements, (list, tuple)):
        raise TypeError(f"placements must be a list or tuple of placements, got {placements!r}")
    out = tuple(check_placement(p) for p in placements)
    if len(out) != mesh.ndim:
        raise ShardingError(
            f"expected {mesh.ndim} placements (one per dim of mesh {mesh.shape}), "
            f"got {len(out)}: {placements_str(out) or '[]'}"
        )
    if ndim is None:
        return out
    fixed = []
    for p in out:
        if isinstance(p, Shard):
            if ndim == 0:
                raise ShardingError(f"cannot place {p} on a 0-d array: it has no dim to shard")
            if not -ndim <= p.dim < ndim:
                raise ShardingError(f"{p} is out of range for a {ndim}-d array (dims -{ndim}..{ndim - 1})")
            if p.dim < 0:
                p = Shard(p.dim % ndim)
        fixed.append(p)
    return tuple(fixed)


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class DTensorSpec(metaclass=Interned):
    """Mesh, placements, global meta and shard order of a distributed array; frozen and interned.

    Equal specs are one object (see :mod:`dtensor_np.interning`), so ``==`` and
    ``hash`` are identity and a spec is a cheap dictionary key.

    Example:
        >>> from dtensor_np import DeviceMesh, Partial
        >>> spec = DTensorSpec(DeviceMesh((2,)), [Partial()])
        >>> spec.sums, str(spec)
        ([0], 'P(sum)')
    """

    mesh: DeviceMesh
    placements: tuple[Placement, ...]
    tensor_meta: Optional[TensorMeta] = None
    shard_order: Optional[ShardOrder] = None

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, DeviceMesh):
            raise TypeError(f"DTensorSpec needs a DeviceMesh, got {type(self.mesh).__name__}")
        if self.tensor_meta is not None and not isinstance(self.tensor_meta, TensorMeta):
            raise TypeError(f"tensor_meta must be a TensorMeta, got {self.tensor_meta!r}")
        ndim = None if self.tensor_meta is None else self.tensor_meta.ndim
        placements = normalize_placements(self.placements, self.mesh, ndim)
        object.__setattr__(self, "placements", placements)
        default = default_shard_order(placements)
        if self.shard_order is None:
            object.__setattr__(self, "shard_order", default)
        else:
            order = tuple(sorted((d, ms) for d, ms in check_shard_order(self.shard_order) if ms))
            if sorted((d, sorted(ms)) for d, ms in order) != sorted((d, sorted(ms)) for d, ms in default):
                raise ShardingError(
                    f"shard order {order} does not match placements {placements_str(placements)} "
                    f"(expected the mesh dims {default} in some order)"
                )
            object.__setattr__(self, "shard_order", order)

    def _key(self) -> tuple[Any, ...]:
        return (self.mesh, self.placements, self.tensor_meta, self.shard_order)

    def __reduce__(self) -> tuple[Any, ...]:
        return DTensorSpec, self._key()

    # -- meta ------------------------------------------------------------
    def _meta(self) -> TensorMeta:
        if self.tensor_meta is None:
            raise ShardingError(f"spec {self} has no tensor_meta (global shape and dtype)")
        return self.tensor_meta

    @property
    def shape(self) -> tuple[int, ...]:
        return self._meta().shape

    @property
    def ndim(self) -> int:
        return self._meta().ndim

    @property
    def dtype(self) -> np.dtype:
        return self._meta().dtype

    # -- sharding views --------------------------------------------------
    @property
    def dim_map(self) -> list[int]:
        """For every tensor dim, the mesh dim that shards it, or -1.

        Example:
            >>> from dtensor_np import DeviceMesh
            >>> DTensorSpec(DeviceMesh((2, 2)), [Replicate(), Shard(0)], TensorMeta((4, 4), "f4")).dim_map
            [1, -1]
        """
        dim_map = [-1] * self.ndim
        for mesh_dim, p in enumerate(self.placements):
            if isinstance(p, Shard):
                if dim_map[p.dim] != -1:
                    raise ShardingError(
                        f"dim_map cannot describe tensor dim {p.dim} sharded on several mesh dims "
                        f"({dim_map[p.dim]} and {mesh_dim}) in {self}"
                    )
                dim_map[p.dim] = mesh_dim
        return dim_map

    @property
    def sums(self) -> list[int]:
        """Mesh dims on which the array is a pending reduction (``Partial``)."""
        return [i for i, p in enumerate(self.placements) if isinstance(p, Partial)]

    @property
    def num_shards(self) -> int:
        """How many pieces the sharded mesh dims cut the array into."""
        n = 1
        for i, p in enumerate(self.placements):
            if isinstance(p, Shard):
                n *= self.mesh.shape[i]
        return n

    def is_replicated(self) -> bool:
        """True when every mesh dim is ``Replicate``."""
        return all(isinstance(p, Replicate) for p in self.placements)

    @classmethod
    def from_dim_map(
        cls,
        mesh: DeviceMesh,
        dim_map: Sequence[int],
        sums: Sequence[int],
        tensor_meta: Optional[TensorMeta] = None,
    ) -> "DTensorSpec":
        """A spec from a dim map (tensor dim -> mesh dim or -1) and pending-sum mesh dims.

        Example:
            >>> from dtensor_np import DeviceMesh
            >>> str(DTensorSpec.from_dim_map(DeviceMesh((2, 2)), [1, -1], [0]))
            'P(sum)S(0)'
        """
        placements: list[Placement] = [Replicate()] * mesh.ndim
        for mesh_dim in sums:
            if not 0 <= mesh_dim < mesh.ndim:
                raise ShardingError(f"sums entry {mesh_dim} is not a mesh dim of mesh {mesh.shape}")
            placements[mesh_dim] = Partial()
        for tensor_dim, mesh_dim in enumerate(dim_map):
            if mesh_dim == -1:
                continue
            if not 0 <= mesh_dim < mesh.ndim:
                raise ShardingError(f"dim_map entry {mesh_dim} is not a mesh dim of mesh {mesh.shape}")
            if not isinstance(placements[mesh_dim], Replicate):
                raise ShardingError(
                    f"mesh dim {mesh_dim} is asked to hold {placements[mesh_dim]} and Shard({tensor_dim})"
                )
            placements[mesh_dim] = Shard(tensor_dim)
        return cls(mesh, tuple(placements), tensor_meta)

    # -- local blocks ----------------------------------------------------
    def local_shape_and_offset(self, coordinate: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The block of the global array held at a mesh coordinate."""
        return _local_block(self.shape, self.mesh.shape, self.shard_order, tuple(coordinate))

    def local_shape_of_rank(self, rank: int) -> tuple[int, ...]:
        """The local shape held by a global rank."""
        return self.local_block(rank)[0]

    def local_block(self, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(shape, offset)`` of the block of the global array a global rank holds.

        Example:
            >>> from dtensor_np import DeviceMesh
            >>> DTensorSpec(DeviceMesh((2,)), [Shard(0)], TensorMeta((5, 2), "f4")).local_block(1)
            ((2, 2), (3, 0))
        """
        return _local_block(self.shape, self.mesh.shape, self.shard_order, self.mesh.coordinate_of(rank))

    def local_index(self, rank: int) -> tuple[slice, ...]:
        """The index of the global array that gives a rank's block (``full[spec.local_index(r)]``).

        Example:
            >>> from dtensor_np import DeviceMesh
            >>> DTensorSpec(DeviceMesh((2,)), [Shard(1)], TensorMeta((2, 5), "f4")).local_index(1)
            (slice(0, 2, None), slice(3, 5, None))
        """
        shape, offset = self.local_block(rank)
        return tuple(slice(o, o + n) for o, n in zip(offset, shape))

    def with_placements(self, placements: Sequence[Placement], shard_order: Optional[ShardOrder] = None) -> "DTensorSpec":
        """The same array on other placements."""
        return DTensorSpec(self.mesh, tuple(placements), self.tensor_meta, shard_order)

    def __str__(self) -> str:
        text = placements_str(self.placements)
        if self.shard_order != default_shard_order(self.placements):
            order = ",".join(f"{d}:{list(ms)}" for d, ms in self.shard_order)  # type: ignore[union-attr]
            text += f"[order {order}]"
        return text


@memo(maxsize=65536, name="dtensor_np.local_blocks")
def _local_block(
    global_shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    shard_order: ShardOrder,
    coordinate: tuple[int, ...],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = list(global_shape)
    offset = [0] * len(global_shape)
    for tensor_dim, mesh_dims in shard_order:
        for mesh_dim in mesh_dims:
            size, start = chunk_size_and_offset(shape[tensor_dim], mesh_shape[mesh_dim], coordinate[mesh_dim])
            shape[tensor_dim] = size
            offset[tensor_dim] += start
    return tuple(shape), tuple(offset)


def compute_local_shape_and_global_offset(
    global_shape: Sequence[int],
    mesh: DeviceMesh,
    placements: Sequence[Placement],
    coordinate: Sequence[int],
    shard_order: Optional[ShardOrder] = None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and global offset of the block at ``coordinate`` (``torch.chunk`` sizes, nested in shard order).

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> compute_local_shape_and_global_offset((5,), DeviceMesh((4,)), [Shard(0)], (3,))
        ((0,), (5,))
    """
    spec = DTensorSpec(mesh, tuple(placements), TensorMeta(global_shape, np.uint8), shard_order)
    coordinate = as_ints(coordinate, "compute_local_shape_and_global_offset: coordinate", "a mesh coordinate (one int per mesh dim)")
    if len(coordinate) != mesh.ndim or any(not 0 <= c < s for c, s in zip(coordinate, mesh.shape)):
        raise ShardingError(f"coordinate {coordinate} is not on mesh {mesh.shape}")
    return spec.local_shape_and_offset(coordinate)
