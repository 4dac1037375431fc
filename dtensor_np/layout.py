"""CuTe-style layout algebra over ranks, lexicographic (row-major).

A :class:`Layout` is a function from an index to an integer (a rank): the
index is turned into a coordinate of ``shape`` (the last mode moves fastest)
and dotted with ``stride``.  Device meshes keep one layout mode per mesh dim,
so sub-meshes, flattening and unflattening are layout operations and their
rank groups fall out of :meth:`Layout.global_ranks`.

Example:
    >>> L = Layout((2, 3), (3, 1))
    >>> L.all_ranks_from_zero()
    [0, 1, 2, 3, 4, 5]
    >>> Layout(4, 1).global_ranks(8)
    [[0, 1, 2, 3], [4, 5, 6, 7]]
    >>> Layout((2, 2), (4, 2)).coalesce()
    Layout(shape=4, stride=2)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .errors import ShardingError
from .int_tuple import (
    IntTuple,
    congruent,
    flatten,
    index_to_coordinate,
    inner_product,
    is_int,
    is_integer,
    is_tuple,
    product,
)

__all__ = ["Layout"]


def _check_int_tuple(name: str, value: object) -> None:
    if is_int(value):
        return
    if is_tuple(value):
        for item in value:  # type: ignore[union-attr]
            _check_int_tuple(name, item)
        return
    raise TypeError(f"Layout {name} must be an int or a nested tuple of ints, got {value!r}")


def _plain(value: object) -> object:
    """NumPy integers in a (nested) int tuple as Python ints; anything else as it was."""
    if is_integer(value):
        return int(value)  # type: ignore[call-overload]
    if is_tuple(value):
        return tuple(_plain(item) for item in value)  # type: ignore[union-attr]
    return value


def _make(shapes: list[int], strides: list[int]) -> "Layout":
    """A layout from flat mode lists: one mode becomes a plain int layout."""
    if len(shapes) == 1:
        return Layout(shapes[0], strides[0])
    return Layout(tuple(shapes), tuple(strides))


@dataclass(frozen=True, slots=True)
class Layout:
    """``shape:stride``, a function from an index to a rank; frozen and hashable.

    Example:
        >>> Layout((2, 3), (1, 2)).all_ranks_from_zero()
        [0, 2, 4, 1, 3, 5]
    """

    shape: IntTuple
    stride: IntTuple

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _plain(self.shape))  # NumPy integers are taken, as ints
        object.__setattr__(self, "stride", _plain(self.stride))
        _check_int_tuple("shape", self.shape)
        _check_int_tuple("stride", self.stride)
        if not congruent(self.shape, self.stride):
            raise ShardingError(
                f"Layout shape and stride must nest alike, got shape {self.shape!r} "
                f"and stride {self.stride!r}"
            )
        if any(s < 1 for s in flatten(self.shape)):
            raise ShardingError(f"Layout sizes must be >= 1, got shape {self.shape!r}")
        if any(d < 0 for d in flatten(self.stride)):
            raise ShardingError(f"Layout strides must be >= 0, got stride {self.stride!r}")

    # -- structure -------------------------------------------------------
    def __len__(self) -> int:
        """The number of top-level modes (1 for an int layout)."""
        return len(self.shape) if is_tuple(self.shape) else 1  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> "Layout":
        """Top-level mode ``i`` as a layout of its own."""
        if is_int(self.shape):
            if i not in (0, -1):
                raise IndexError(f"mode {i} out of range for a layout of 1 mode")
            return self
        return Layout(self.shape[i], self.stride[i])  # type: ignore[index]

    def modes(self) -> list["Layout"]:
        """Every top-level mode, outermost first."""
        return [self[i] for i in range(len(self))]

    @property
    def sizes_and_strides(self) -> list[tuple[int, int]]:
        """Flat ``(size, stride)`` pairs, outermost first."""
        return list(zip(flatten(self.shape), flatten(self.stride)))

    def numel(self) -> int:
        """How many indices the layout maps: the product of its sizes."""
        return product(self.shape)

    def __call__(self, index: int) -> int:
        """The rank at a flat index (row-major over the flattened shape)."""
        sizes = flatten(self.shape)
        return inner_product(index_to_coordinate(index, sizes), flatten(self.stride))

    def __str__(self) -> str:
        return f"{self.shape}:{self.stride}"

    # -- algebra ---------------------------------------------------------
    def coalesce(self) -> "Layout":
        """The same function with the fewest modes: size-1 modes dropped, contiguous modes merged.

        Example:
            >>> Layout((3, 2), (2, 1)).coalesce()
            Layout(shape=6, stride=1)
            >>> Layout((3, 2), (4, 1)).coalesce()
            Layout(shape=(3, 2), stride=(4, 1))
        """
        shapes: list[int] = []
        strides: list[int] = []
        # Walk from the innermost (fastest) mode outwards, merging an outer
        # mode into the inner one when it continues it exactly.
        for size, stride in reversed(self.sizes_and_strides):
            if size == 1:
                continue
            if shapes and stride == shapes[-1] * strides[-1]:
                shapes[-1] *= size
            else:
                shapes.append(size)
                strides.append(stride)
        if not shapes:
            return Layout(1, 0)
        return _make(shapes[::-1], strides[::-1])

    def composition(self, other: "Layout") -> "Layout":
        """``self o other``: the layout ``i -> self(other(i))``, shaped like ``other``.

        A size-1 mode of ``other`` picks index 0 only, so it becomes ``1:0``
        whatever ``self`` is.

        Example:
            >>> Layout((6, 2), (2, 1)).composition(Layout(3, 2))
            Layout(shape=3, stride=2)
            >>> Layout((4, 3), (4, 6)).composition(Layout((1, 3), (4, 3)))
            Layout(shape=(1, 3), stride=(0, 4))
        """
        if is_tuple(other.shape):
            parts = [self.composition(mode) for mode in other.modes()]
            result = Layout(tuple(p.shape for p in parts), tuple(p.stride for p in parts))
            # By modes is i -> self(other(i)) only when the modes' offsets add without carrying
            # from one coordinate of ``self`` into the next; where they do not, refuse.
            size = self.numel()
            for got, index in zip(result.all_ranks_from_zero(), other.all_ranks_from_zero()):
                if index < size and got != self(index):
                    raise ShardingError(
                        f"cannot compose {self} with {other}: the modes of {other} overlap in the "
                        f"coordinates of {self} (index {index} maps to {self(index)}, by modes to {got})"
                    )
            return result
        rest_size: int = other.shape  # type: ignore[assignment]
        rest_stride: int = other.stride  # type: ignore[assignment]
        if rest_stride == 0 or rest_size == 1:
            return Layout(rest_size, 0)  # one index (or one rank over and over): self(0) == 0
        flat = self.coalesce()
        pairs = flat.sizes_and_strides
        shapes: list[int] = []
        strides: list[int] = []
        # Innermost modes first: divide out ``rest_stride``, then keep ``rest_size``.
        for size, stride in reversed(pairs[1:]):
            if size % rest_stride != 0 and rest_stride % size != 0:
                raise ShardingError(
                    f"cannot compose {self} with {other}: stride {rest_stride} "
                    f"does not divide mode size {size} (nor the reverse)"
                )
            new_size = min(max(1, size // rest_stride), rest_size)
            if new_size != 1:
                shapes.append(new_size)
                strides.append(rest_stride * stride)
            if rest_size % new_size != 0:
                raise ShardingError(
                    f"cannot compose {self} with {other}: size {rest_size} is not "
                    f"divisible by {new_size}"
                )
            rest_size //= new_size
            rest_stride = -(-rest_stride // size)
            if rest_size == 1:
                break  # every index is placed: the outer modes are never reached
        if rest_size != 1 or not shapes:
            shapes.append(rest_size)
            strides.append(rest_stride * pairs[0][1])
        if len(shapes) > 1:  # one mode of ``other`` spans several of ``self``: one (nested) mode, as ``other`` has
            return Layout((tuple(shapes[::-1]),), (tuple(strides[::-1]),))
        return _make(shapes[::-1], strides[::-1])

    def complement(self, world_size: int) -> "Layout":
        """The layout of offsets that, repeated with ``self``, covers ``range(world_size)``.

        Example:
            >>> Layout(4, 1).complement(8)
            Layout(shape=2, stride=4)
            >>> Layout((2, 2), (4, 2)).complement(8)
            Layout(shape=2, stride=1)
        """
        if not is_int(world_size) or world_size < 1:
            raise ShardingError(f"complement needs a positive world size, got {world_size!r}")
        shapes: list[int] = []
        strides: list[int] = []
        current = 1
        for stride, size in sorted((d, s) for s, d in self.sizes_and_strides):
            if stride == 0 or size == 1:
                continue
            if stride % current != 0:
                raise ShardingError(
                    f"layout {self} has no complement: stride {stride} is not a "
                    f"multiple of {current}"
                )
            shapes.append(stride // current)
            strides.append(current)
            current = size * stride
        if world_size % current != 0:
            raise ShardingError(
                f"layout {self} spans {current} ranks, which does not divide the "
                f"world size {world_size}"
            )
        shapes.append(world_size // current)
        strides.append(current)
        # Largest stride outermost, so the complement is itself row-major.
        return _make(shapes[::-1], strides[::-1]).coalesce()

    # -- ranks -----------------------------------------------------------
    def all_ranks_from_zero(self) -> list[int]:
        """The rank at every index, in index order.

        Example:
            >>> Layout((2, 3), (3, 1)).all_ranks_from_zero()
            [0, 1, 2, 3, 4, 5]
        """
        strides = flatten(self.stride)
        return [
            inner_product(coord, strides)
            for coord in itertools.product(*(range(s) for s in flatten(self.shape)))
        ]

    def global_ranks(self, world_size: int) -> list[list[int]]:
        """Every copy of this layout inside the world: one rank list per offset of the complement.

        Example:
            >>> Layout(2, 2).global_ranks(4)
            [[0, 2], [1, 3]]
        """
        base = self.all_ranks_from_zero()
        return [
            [offset + r for r in base]
            for offset in self.complement(world_size).all_ranks_from_zero()
        ]

    def check_non_overlap(self) -> bool:
        """True when no two indices map to the same rank (the layout is injective).

        When the modes, sorted by stride, each start past the span of the ones
        below it, the answer is True at once; otherwise the ranks are built up
        one mode at a time and any collision answers False (at most ``numel()``
        ranks are ever held).

        Example:
            >>> Layout((2, 2), (2, 1)).check_non_overlap()
            True
            >>> Layout((2, 2), (1, 1)).check_non_overlap()
            False
            >>> Layout((3, 2), (2, 3)).check_non_overlap()  # 0, 3, 2, 5, 4, 7
            True
        """
        modes = sorted((d, s) for s, d in self.sizes_and_strides if s > 1)
        if any(stride == 0 for stride, _ in modes):
            return False
        span = 0
        for stride, size in modes:
            if stride < span:
                break
            span = size * stride
        else:
            return True
        reached = {0}
        for stride, size in modes:
            grown = {r + k * stride for r in reached for k in range(size)}
            if len(grown) != len(reached) * size:
                return False
            reached = grown
        return True
