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

__all__ = ["SpecArg", "is_sharded", "register_sharded_type"]

_SHARDED_TYPES: list[type] = []


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
