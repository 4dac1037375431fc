"""Indexing functions of the Array API namespace: ``take`` and ``take_along_axis``, NumPy's.

Their sharding rules gather the selected elements from the ranks that hold
them (the indices are data, so this depends on them).

Example:
    >>> sorted(FUNCTIONS)
    ['take', 'take_along_axis']
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[str, Callable[..., Any]] = {"take": np.take, "take_along_axis": np.take_along_axis}
