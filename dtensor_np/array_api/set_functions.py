"""Set functions of the Array API namespace: NumPy's ``unique_*``, with the standard's named tuples.

Each is NumPy's function of the same name on the DTensor (its sharding rule
decides the communication: the distinct values depend on every rank's data);
the results come back as the named tuples the standard specifies.

Example:
    >>> import dtensor_np as dt
    >>> UniqueCountsResult._fields, UniqueAllResult._fields
    (('values', 'counts'), ('values', 'indices', 'inverse_indices', 'counts'))
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ..dtensor import DTensor

__all__ = ["FUNCTIONS", "UniqueAllResult", "UniqueCountsResult", "UniqueInverseResult", "unique_all",
           "unique_counts", "unique_inverse"]


class UniqueAllResult(NamedTuple):
    values: DTensor
    indices: DTensor
    inverse_indices: DTensor
    counts: DTensor


class UniqueCountsResult(NamedTuple):
    values: DTensor
    counts: DTensor


class UniqueInverseResult(NamedTuple):
    values: DTensor
    inverse_indices: DTensor


def unique_all(x: DTensor, /) -> UniqueAllResult:
    """The distinct values, the first index of each, the inverse indices (``x``'s shape) and the counts."""
    return UniqueAllResult(*np.unique_all(x))


def unique_counts(x: DTensor, /) -> UniqueCountsResult:
    """The distinct values and how often each occurs."""
    return UniqueCountsResult(*np.unique_counts(x))


def unique_inverse(x: DTensor, /) -> UniqueInverseResult:
    """The distinct values and, for each element of ``x``, the index of its value among them."""
    return UniqueInverseResult(*np.unique_inverse(x))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{f.__name__: f for f in (unique_all, unique_counts, unique_inverse)},
    "unique_values": np.unique_values,
}
