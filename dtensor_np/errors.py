"""The errors every layer raises for bad sharding input."""

from __future__ import annotations

from numpy.exceptions import AxisError as _NumpyAxisError

__all__ = ["ShardingError", "AxisError"]


class ShardingError(ValueError):
    """A placement, mesh or spec that cannot work, with what was expected and what was got.

    Example:
        >>> from dtensor_np import Shard
        >>> Shard("x")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        TypeError: Shard(dim) expects an int tensor dim, got 'x'
    """


class AxisError(ShardingError, _NumpyAxisError):
    """An axis out of range for the array: a ``ShardingError`` and NumPy's ``AxisError`` (so also an ``IndexError``).

    Code written for NumPy (``except np.exceptions.AxisError``) and code written
    for dtensor_np (``except dt.ShardingError``) both catch it.

    Example:
        >>> import numpy as np
        >>> e = AxisError(5, 2, "axis2")
        >>> str(e), isinstance(e, np.exceptions.AxisError), isinstance(e, ShardingError)
        ('axis2: axis 5 is out of bounds for array of dimension 2', True, True)
    """
