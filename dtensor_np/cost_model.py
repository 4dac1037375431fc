"""The redistribute planner's cost model: what a step costs, in microseconds.

Its own module, not the planner's: those may run compiled (:mod:`dtensor_np.native`),
and this class stays a plain Python class that a user subclasses to price steps
another way (the search then runs without its lower bound, see
:mod:`dtensor_np.plan_core`).

Example:
    >>> from dtensor_np import CostModel
    >>> CostModel(latency_us=2.0).collective(4, bytes_moved=0.0)
    2.0
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CostModel"]


@dataclass(frozen=True, slots=True)
class CostModel:
    """Cost of a step in microseconds: ``latency_us`` per collective plus bytes over bandwidth.

    Example:
        >>> CostModel().collective(1024, bytes_moved=2**20) > CostModel().collective(1024, 0)
        True
    """

    latency_us: float = 5.0
    bytes_per_us: float = 5000.0
    local_bytes_per_us: float = 20000.0

    def collective(self, group_size: int, bytes_moved: float) -> float:
        return self.latency_us + bytes_moved / self.bytes_per_us

    def local(self, bytes_touched: float) -> float:
        return bytes_touched / self.local_bytes_per_us
