"""Placements: how a tensor sits on one mesh dim (``Shard``, ``Replicate``, ``Partial``).

Placements are interned (see :mod:`dtensor_np.interning`): ``Shard(1)`` is
one object wherever it is made, so comparing and hashing them is identity.

Example:
    >>> str(Shard(0)), str(Replicate()), str(Partial())
    ('S(0)', 'R', 'P(sum)')
    >>> Shard(1) == Shard(1), Partial("max") == Partial("sum"), Partial() is Partial("sum")
    (True, False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from collectives import REDUCE_OPS, ReduceOp

from .errors import ShardingError
from .interning import Interned
from .int_tuple import is_integer

__all__ = ["Placement", "Shard", "Replicate", "Partial", "REDUCE_OPS", "ReduceOp", "check_placement", "placements_str"]


class _PlacementBase(metaclass=Interned):
    """Shared predicates; ``Placement`` is the union of the three kinds."""

    __slots__ = ()

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__dataclass_fields__)  # type: ignore[attr-defined]

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), self._key()

    def is_shard(self, dim: int | None = None) -> bool:
        """True for ``Shard`` (on ``dim``, when given)."""
        return False

    def is_replicate(self) -> bool:
        """True for ``Replicate``."""
        return False

    def is_partial(self) -> bool:
        """True for ``Partial``."""
        return False


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Shard(_PlacementBase):
    """The tensor is split along tensor dim ``dim`` over the mesh dim (``torch.chunk`` sizes).

    Example:
        >>> Shard(0), str(Shard(-1))
        (Shard(dim=0), 'S(-1)')
    """

    dim: int

    def __post_init__(self) -> None:
        if self.dim.__class__ is not int:  # a NumPy integer is its int (as NumPy takes axes); a bool or a float is not
            if not is_integer(self.dim):
                raise TypeError(f"Shard(dim) expects an int tensor dim, got {self.dim!r}")
            object.__setattr__(self, "dim", int(self.dim))

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Replicate(_PlacementBase):
    """Every rank of the mesh dim holds the whole tensor.

    Example:
        >>> str(Replicate())
        'R'
    """

    def is_replicate(self) -> bool:
        return True

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Partial(_PlacementBase):
    """Every rank holds a partial value; the tensor is their reduction by ``reduce_op``.

    Example:
        >>> str(Partial("max"))
        'P(max)'
    """

    reduce_op: str = "sum"

    def __post_init__(self) -> None:
        if self.reduce_op not in REDUCE_OPS:
            raise ShardingError(
                f"Partial(reduce_op) expects one of {', '.join(REDUCE_OPS)}, got {self.reduce_op!r}"
            )

    def is_partial(self) -> bool:
        return True

    def __str__(self) -> str:
        return f"P({self.reduce_op})"


Placement = Union[Shard, Replicate, Partial]
PLACEMENT_TYPES = (Shard, Replicate, Partial)


def check_placement(p: object) -> Placement:
    """``p`` if it is a placement, else a ``TypeError`` saying what it got."""
    if not isinstance(p, PLACEMENT_TYPES):
        raise TypeError(
            f"expected a placement (Shard(dim), Replicate() or Partial(op)), got {p!r}"
        )
    return p  # type: ignore[return-value]


def check_shard_order(order: object) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``order`` as ``((tensor_dim, (mesh_dim, ...)), ...)``; a ``TypeError`` saying what it got otherwise.

    Lists are taken for tuples and NumPy integers for ints; strings, floats and
    bools are not dims.

    Example:
        >>> check_shard_order([(0, [1, 0])])
        ((0, (1, 0)),)
        >>> check_shard_order(((0, 0),))
        Traceback (most recent call last):
        ...
        TypeError: shard_order must be a tuple of (tensor dim, (mesh dim, ...)) pairs of ints, got ((0, 0),)
    """
    pairs = []
    for entry in order if isinstance(order, (tuple, list)) else (None,):
        if not (
            isinstance(entry, (tuple, list))
            and len(entry) == 2
            and is_integer(entry[0])
            and isinstance(entry[1], (tuple, list))
            and all(is_integer(m) for m in entry[1])
        ):
            raise TypeError(f"shard_order must be a tuple of (tensor dim, (mesh dim, ...)) pairs of ints, got {order!r}")
        pairs.append((int(entry[0]), tuple(int(m) for m in entry[1])))
    return tuple(pairs)


def placements_str(placements: tuple[Placement, ...]) -> str:
    """Compact form of a placement tuple: ``S(0)R``."""
    return "".join(str(p) for p in placements)
