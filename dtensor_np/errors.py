"""The error every layer raises for bad sharding input."""

from __future__ import annotations

__all__ = ["ShardingError"]


class ShardingError(ValueError):
    """A placement, mesh or spec that cannot work, with what was expected and what was got.

    Example:
        >>> from dtensor_np import Shard
        >>> Shard("x")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        TypeError: Shard(dim) expects an int tensor dim, got 'x'
    """
