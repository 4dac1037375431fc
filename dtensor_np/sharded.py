"""Which objects are distributed arguments of a NumPy call: DTensors and the spec stand-ins of graph passes.

The op rules' binders pick the distributed arguments out of a call with
:func:`is_sharded`; ``DTensor`` registers itself, and graph transforms
register stand-ins that carry only a ``.spec``, so one set of binders and
rules serves eager calls and traced graphs.

Example:
    >>> import numpy as np
    >>> is_sharded(np.zeros(2))
    False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .spec import DTensorSpec

__all__ = ["SpecArg", "is_sharded", "register_sharded_type", "register_constant_maker", "array_operands"]

_SHARDED_TYPES: list[type] = []
_CONSTANT_MAKER: list[Any] = []  # make(value, like) -> a replicated DTensor of value on like's mesh (dtensor_np.constants)
_NUMBERS = (bool, int, float, complex, np.generic)


def register_sharded_type(cls: type) -> type:
    """Mark a class whose instances carry a ``.spec`` and count as distributed arguments in ``bind``.

    ``DTensor`` is one; graph transforms register spec-only stand-ins so the
    same binders and rules serve them.
    """
    if cls not in _SHARDED_TYPES:
        _SHARDED_TYPES.append(cls)
    return cls


def is_sharded(x: Any) -> bool:
    """True for a DTensor (or another registered distributed argument)."""
    return isinstance(x, tuple(_SHARDED_TYPES))


@register_sharded_type
@dataclass(frozen=True, eq=False, slots=True)
class SpecArg:
    """A spec standing where an array goes in a call, so the op rules' binders pick it out.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Replicate
        >>> arg = SpecArg(DTensorSpec(DeviceMesh((1,)), (Replicate(),), TensorMeta((2, 3), "f4")))
        >>> is_sharded(arg), arg.shape, arg.ndim
        (True, (2, 3), 2)
    """

    spec: DTensorSpec

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def ndim(self) -> int:
        return self.spec.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.spec.dtype


def register_constant_maker(make: Any) -> None:
    """Give :func:`array_operands` the function ``make(value, like)`` that puts a plain array on ``like``'s mesh."""
    _CONSTANT_MAKER[:] = [make]


def _array_like(value: Any) -> bool:
    """An operand NumPy would take as an array of at least one dim: an ndarray (or CuPy array), or a list or tuple
    of numbers (nested)."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    if isinstance(value, (list, tuple)):
        return bool(value) and all(isinstance(v, _NUMBERS) or _array_like(v) for v in value)
    return type(value).__module__.startswith("cupy") and getattr(value, "ndim", 0) > 0


def array_operands(values: Any) -> list[Any]:
    """``values`` with every plain array operand (an ndarray, a list of numbers) put on the mesh of the first
    distributed one as a replicated constant (no communication; see :mod:`dtensor_np.constants`).

    Values with no distributed one among them, and spec stand-ins, are left as they are.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones(3), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> [str(getattr(v, "spec", v)) for v in array_operands([x, np.arange(3.0), 2.0])]
        ['S(0)', 'R', '2.0']
    """
    values = list(values)
    like = next((v for v in values if is_sharded(v)), None)
    if like is None or isinstance(like, SpecArg) or not _CONSTANT_MAKER:
        return values
    make = _CONSTANT_MAKER[0]
    return [make(v, like) if not is_sharded(v) and _array_like(v) else v for v in values]
