"""The error raised when a collective is called with arguments that cannot work."""
from __future__ import annotations

__all__ = ["CollectiveError"]


class CollectiveError(ValueError):
    """A collective was called with inconsistent or invalid arguments.

    Raised before any message is sent (and, with ``check=True`` under MPI, on
    every rank of the group together), so a bad call never leaves a rank
    waiting inside a collective.  The message says what was expected and what
    was given.

    Example:
        >>> from collectives import SimulatedBackend
        >>> import numpy as np
        >>> SimulatedBackend(2).all_reduce({0: np.ones(2)}, ((0, 1),))
        Traceback (most recent call last):
        ...
        collectives.errors.CollectiveError: all_reduce: expected shards for ranks [0, 1], got ranks [0]
    """
