"""``DeviceMesh``: an n-d grid of ranks, pure metadata built on the layout algebra.

Ranks are numbered row-major: on a mesh of shape ``(a, b)`` rank ``r`` sits at
``np.unravel_index(r, (a, b))``.  Each mesh dim keeps one :class:`Layout`
mode, so a sub-mesh (``mesh["tp"]``) and a flattened or unflattened mesh
still name global ranks.  Nothing here communicates or knows a "current rank".

Example:
    >>> mesh = DeviceMesh((2, 2), dim_names=("dp", "tp"))
    >>> mesh.rank_groups("dp"), mesh.rank_groups("tp")
    ([[0, 2], [1, 3]], [[0, 1], [2, 3]])
    >>> mesh.coordinate_of(3)
    (1, 1)
    >>> DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))["dp", "cp"].flatten().rank_groups(0)
    [[0, 2, 4, 6], [1, 3, 5, 7]]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from collectives import Groups, memo

from .errors import ShardingError
from .int_tuple import as_ints, is_integer, product, suffix_product
from .interning import Interned
from .layout import Layout

__all__ = ["DeviceMesh", "BACKENDS", "mesh_shape", "mesh_dim_names"]

BACKENDS = ("simulated", "mpi")
_SHAPE = "a non-empty tuple of positive ints"


def mesh_shape(shape: object) -> tuple[int, ...]:
    """A mesh shape (an int or a sequence of ints; NumPy integers too) as a tuple of positive ints.

    Anything else (strings, floats, bools, None, sizes below 1, no dims) is a
    ``ShardingError`` that shows what was got.

    Example:
        >>> import numpy as np
        >>> mesh_shape(4), mesh_shape(np.array([2, 2]))
        ((4,), (2, 2))
        >>> mesh_shape((2.5,))
        Traceback (most recent call last):
        ...
        dtensor_np.errors.ShardingError: mesh shape must be a non-empty tuple of positive ints, got (2.5,)
    """
    try:
        dims = as_ints((shape,) if is_integer(shape) else shape, "mesh shape", _SHAPE)
    except TypeError as e:
        raise ShardingError(str(e)) from None
    if not dims or min(dims) < 1:
        raise ShardingError(f"mesh shape must be {_SHAPE}, got {shape!r}")
    return dims


def mesh_dim_names(names: object, shape: tuple[int, ...]) -> Optional[tuple[str, ...]]:
    """Dim names for a mesh of ``shape``: None, one string (one name), or one unique non-empty string per dim.

    Example:
        >>> mesh_dim_names(["dp", "tp"], (2, 2)), mesh_dim_names("world", (4,))
        (('dp', 'tp'), ('world',))
        >>> mesh_dim_names("ab", (2, 2))
        Traceback (most recent call last):
        ...
        dtensor_np.errors.ShardingError: expected 2 dim names for mesh shape (2, 2), got 1: ('ab',)
    """
    if names is None:
        return None
    if isinstance(names, str):
        found: tuple = (names,)  # one name, never split into characters
    elif isinstance(names, (tuple, list)):
        found = tuple(names)
    else:
        raise TypeError(f"mesh dim names must be a tuple of strings (one per mesh dim), got {names!r}")
    if len(found) != len(shape):
        raise ShardingError(f"expected {len(shape)} dim names for mesh shape {shape}, got {len(found)}: {found}")
    if not all(isinstance(n, str) for n in found) or len(set(found)) != len(found):
        raise ShardingError(f"mesh dim names must be unique strings, got {found}")
    if not all(found):
        raise ShardingError(f"mesh dim names must be non-empty strings, got {found}")
    return found


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class DeviceMesh(metaclass=Interned):
    """An n-d mesh of ranks; frozen, interned (equal meshes are one object), and free of communication.

    Args:
        shape: size of every mesh dim.
        dim_names: optional unique names, one per mesh dim.
        layout: one layout mode per mesh dim mapping coordinates to world
            ranks (default: row-major over ``shape``).
        world_size: ranks in the world the layout lives in (default: the
            mesh size).
        backend: ``"simulated"`` (every rank in this process) or ``"mpi"``.

    Example:
        >>> DeviceMesh((2, 3)).rank_groups(1)
        [[0, 1, 2], [3, 4, 5]]
    """

    shape: tuple[int, ...]
    dim_names: Optional[tuple[str, ...]] = None
    layout: Optional[Layout] = field(default=None, compare=True)
    world_size: Optional[int] = None
    backend: str = "simulated"

    def __post_init__(self) -> None:
        shape = mesh_shape(self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dim_names", mesh_dim_names(self.dim_names, shape))
        layout = self.layout
        if layout is None:
            layout = Layout(shape, suffix_product(shape))
        elif len(layout) != len(shape) or tuple(m.numel() for m in layout.modes()) != shape:
            raise ShardingError(f"layout {layout} does not have one mode per mesh dim of shape {shape}")
        layout = _canonical(layout)
        object.__setattr__(self, "layout", layout)
        world = product(shape) if self.world_size is None else self.world_size
        if not is_integer(world):
            raise TypeError(f"mesh world size must be an int, got {world!r}")
        world = int(world)
        if world < product(shape):
            raise ShardingError(f"world size {world!r} is smaller than the mesh size {product(shape)}")
        object.__setattr__(self, "world_size", world)
        if self.backend not in BACKENDS:
            raise ShardingError(f"mesh backend must be one of {BACKENDS}, got {self.backend!r}")
        if not layout.check_non_overlap():
            raise ShardingError(f"mesh layout {layout} maps two coordinates to one rank")
        layout.complement(world)  # raises when the layout cannot tile the world

    def _key(self) -> tuple[Any, ...]:
        return (self.shape, self.dim_names, self.layout, self.world_size, self.backend)

    def __reduce__(self) -> tuple[Any, ...]:
        return DeviceMesh, self._key()

    # -- sizes -----------------------------------------------------------
    @property
    def ndim(self) -> int:
        """Number of mesh dims."""
        return len(self.shape)

    def size(self, dim: Union[int, str, None] = None) -> int:
        """Ranks along ``dim`` (by index or name), or in the whole mesh when ``dim`` is None."""
        if dim is None:
            return product(self.shape)
        return self.shape[self.dim_index(dim)]

    def dim_index(self, dim: Union[int, str]) -> int:
        """The index of a mesh dim given by index or name."""
        if isinstance(dim, str):
            if self.dim_names is None or dim not in self.dim_names:
                raise ShardingError(f"mesh has no dim named {dim!r}; its dims are {self.dim_names}")
            return self.dim_names.index(dim)
        if not is_integer(dim) or not -self.ndim <= dim < self.ndim:
            raise ShardingError(f"mesh dim must be in [0, {self.ndim}) or a dim name, got {dim!r}")
        return int(dim) % self.ndim

    # -- ranks -----------------------------------------------------------
    def rank_groups(self, dim: Union[int, str]) -> list[list[int]]:
        """Every group of global ranks along mesh dim ``dim``.

        Example:
            >>> DeviceMesh((2, 2)).rank_groups(0)
            [[0, 2], [1, 3]]
        """
        return [list(g) for g in self.groups((self.dim_index(dim),))]

    def groups(self, mesh_dims: Sequence[int]) -> Groups:
        """Rank groups over several mesh dims together, ordered by ``mesh_dims`` (outer first).

        Example:
            >>> DeviceMesh((2, 2)).groups((1, 0))
            ((0, 2, 1, 3),)
        """
        return _groups(self.layout, self.world_size, tuple(self.dim_index(d) for d in mesh_dims))

    def coordinate_of(self, rank: int) -> tuple[int, ...]:
        """The mesh coordinate of a global rank (within its copy of the mesh).

        Example:
            >>> DeviceMesh((2, 3)).coordinate_of(4)
            (1, 1)
        """
        table = _coordinates(self.layout, self.world_size)
        if not is_integer(rank) or not 0 <= rank < self.world_size:
            raise ShardingError(f"rank must be in [0, {self.world_size}), got {rank!r}")
        return table[int(rank)]

    def rank_at(self, coordinate: Sequence[int], offset: int = 0) -> int:
        """The global rank at a mesh coordinate (in the copy of the mesh that starts at ``offset``).

        Example:
            >>> DeviceMesh((2, 3)).rank_at((1, 2))
            5
            >>> DeviceMesh((2, 3)).rank_at((2, 0))
            Traceback (most recent call last):
            ...
            dtensor_np.errors.ShardingError: expected a coordinate of the mesh of shape (2, 3) (one int in [0, n) per mesh dim), got (2, 0)
        """
        coordinate = tuple(coordinate) if isinstance(coordinate, (tuple, list)) else coordinate
        if (not isinstance(coordinate, tuple) or len(coordinate) != len(self.shape)
                or not all(is_integer(c) and 0 <= c < n for c, n in zip(coordinate, self.shape))):
            raise ShardingError(f"expected a coordinate of the mesh of shape {self.shape} (one int in [0, n) per "
                                f"mesh dim), got {coordinate!r}")
        return int(offset + sum(m(int(c)) for m, c in zip(self.layout.modes(), coordinate)))

    @property
    def all_ranks(self) -> tuple[int, ...]:
        """Every world rank, in order (the ranks that hold a shard of an array on this mesh)."""
        return tuple(range(self.world_size))

    # -- derived meshes --------------------------------------------------
    def __getitem__(self, names: Union[str, tuple[str, ...]]) -> "DeviceMesh":
        """The sub-mesh of the named dims, which must be given in mesh order.

        Example:
            >>> DeviceMesh((2, 4), ("dp", "tp"))["tp"].rank_groups(0)
            [[0, 1, 2, 3], [4, 5, 6, 7]]
        """
        wanted = (names,) if isinstance(names, str) else names
        if not isinstance(wanted, (tuple, list)) or not all(isinstance(n, str) for n in wanted):
            raise TypeError(f"a sub-mesh is taken by dim name (mesh['tp'] or mesh['dp', 'tp']), got {names!r}")
        wanted = tuple(wanted)
        if self.dim_names is None:
            raise ShardingError("this mesh has no dim names; build it with dim_names=(...) to slice it")
        idx = [self.dim_index(n) for n in wanted]
        if idx != sorted(set(idx)):
            raise ShardingError(
                f"sub-mesh dims must be distinct and in mesh order {self.dim_names}, got {wanted}"
            )
        modes = [self.layout[i] for i in idx]
        return DeviceMesh(
            tuple(self.shape[i] for i in idx),
            wanted,
            Layout(tuple(m.shape for m in modes), tuple(m.stride for m in modes)),
            self.world_size,
            self.backend,
        )

    def flatten(self, name: Optional[str] = None) -> "DeviceMesh":
        """One mesh dim over all of this mesh's ranks, in row-major order.

        Example:
            >>> DeviceMesh((2, 2, 2), ("a", "b", "c"))["a", "c"].flatten().rank_groups(0)
            [[0, 1, 4, 5], [2, 3, 6, 7]]
        """
        if name is None and self.dim_names is not None:
            name = "_".join(self.dim_names)
        pairs = self.layout.sizes_and_strides
        mode = Layout(tuple(s for s, _ in pairs), tuple(d for _, d in pairs)).coalesce()
        return DeviceMesh(
            (self.size(),),
            None if name is None else (name,),
            Layout((mode.shape,), (mode.stride,)),
            self.world_size,
            self.backend,
        )

    def unflatten(self, dim: Union[int, str], sizes: Sequence[int], names: Optional[Sequence[str]] = None) -> "DeviceMesh":
        """Split mesh dim ``dim`` into several dims of ``sizes`` (row-major), keeping global ranks.

        Example:
            >>> DeviceMesh((8,), ("world",)).unflatten(0, (2, 4), ("dp", "tp")).rank_groups("dp")
            [[0, 4], [1, 5], [2, 6], [3, 7]]
        """
        i = self.dim_index(dim)
        sizes = as_ints(sizes, "unflatten sizes", "a sequence of positive ints")
        if isinstance(names, str):
            names = (names,)
        if not sizes or product(sizes) != self.shape[i]:
            raise ShardingError(f"unflatten sizes {sizes} must multiply to mesh dim size {self.shape[i]}")
        split = self.layout[i].composition(Layout(sizes, suffix_product(sizes)))
        new_modes = [split[j] for j in range(len(sizes))]
        modes = self.layout.modes()
        modes[i : i + 1] = new_modes
        if names is None:
            if self.dim_names is not None:
                raise ShardingError(f"name the {len(sizes)} new dims: this mesh has dim names {self.dim_names}")
            new_names = None
        else:
            if self.dim_names is None and self.ndim > 1:
                raise ShardingError("this mesh has no dim names, so the new dims cannot be named alone")
            kept = list(self.dim_names or ())
            kept[i : i + 1] = list(names)
            new_names = tuple(kept)
        return DeviceMesh(
            tuple(self.shape[:i]) + sizes + tuple(self.shape[i + 1 :]),
            new_names,
            Layout(tuple(m.shape for m in modes), tuple(m.stride for m in modes)),
            self.world_size,
            self.backend,
        )

    def with_backend(self, backend: str) -> "DeviceMesh":
        """The same mesh on another backend (``"simulated"`` or ``"mpi"``)."""
        return DeviceMesh(self.shape, self.dim_names, self.layout, self.world_size, backend)

    def __repr__(self) -> str:
        names = "" if self.dim_names is None else f", dim_names={self.dim_names}"
        default = _canonical(Layout(self.shape, suffix_product(self.shape)))
        layout = "" if self.layout == default else f", layout={self.layout}"
        world = "" if self.world_size == self.size() else f", world_size={self.world_size}"
        backend = "" if self.backend == "simulated" else f", backend={self.backend!r}"
        return f"DeviceMesh({self.shape}{names}{layout}{world}{backend})"


def _canonical(layout: Layout) -> Layout:
    """One layout per rank function: every mode coalesced, and a size-1 mode as ``1:1``."""
    modes = []
    for mode in layout.modes():
        mode = mode.coalesce()
        modes.append(Layout(1, 1) if mode.shape == 1 else mode)
    return Layout(tuple(m.shape for m in modes), tuple(m.stride for m in modes))


@memo(maxsize=1024, name="dtensor_np.mesh_groups")
def _groups(layout: Layout, world_size: int, mesh_dims: tuple[int, ...]) -> Groups:
    modes = [layout[d] for d in mesh_dims]
    joined = Layout(tuple(m.shape for m in modes), tuple(m.stride for m in modes))
    return tuple(tuple(g) for g in joined.global_ranks(world_size))


@memo(maxsize=256, name="dtensor_np.mesh_coordinates")
def _coordinates(layout: Layout, world_size: int) -> tuple[tuple[int, ...], ...]:
    """Coordinate of every world rank, one mesh dim at a time."""
    coords: list[list[int]] = [[] for _ in range(world_size)]
    for d in range(len(layout)):
        for group in _groups(layout, world_size, (d,)):
            for position, rank in enumerate(group):
                coords[rank].append(position)
    return tuple(tuple(c) for c in coords)

