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

from typing import Any

__all__ = ["is_sharded", "register_sharded_type"]

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
