"""Parallel styles for linear layers: how ``ColwiseParallel`` and ``RowwiseParallel`` place a layer's parameters.

A linear layer named ``fc1`` has ``fc1.weight`` and (optionally) ``fc1.bias``.
With the default ``weight_layout="out_in"`` (torch.nn.Linear: ``y = x @ W.T + b``,
``W`` of shape (out, in)):

================  ==========  ==========
style             weight      bias
================  ==========  ==========
ColwiseParallel   Shard(0)    Shard(0)
RowwiseParallel   Shard(1)    Replicate
================  ==========  ==========

With ``weight_layout="in_out"`` (``y = x @ W + b``, ``W`` of shape (in, out))
the weight's shard dim flips: Colwise shards dim 1, Rowwise dim 0.

Example:
    >>> ColwiseParallel().placements()
    {'weight': Shard(dim=0), 'bias': Shard(dim=0)}
    >>> RowwiseParallel(weight_layout="in_out").placements()["weight"]
    Shard(dim=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ShardingError
from ..placements import Placement, Replicate, Shard

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "WEIGHT_LAYOUTS"]

WEIGHT_LAYOUTS = ("out_in", "in_out")


@dataclass(frozen=True)
class ParallelStyle:
    """How one linear layer is split; ``weight_layout`` is ``"out_in"`` (default) or ``"in_out"``.

    Example:
        >>> from dtensor_np import ColwiseParallel
        >>> ColwiseParallel().weight_layout
        'out_in'
    """

    weight_layout: str = "out_in"
    # the weight dim that is sharded under "out_in" (None: replicated), and the bias placement
    _out_in_weight_dim: ClassVar[int]
    _bias: ClassVar[Placement]

    def __post_init__(self) -> None:
        if type(self) is ParallelStyle:
            raise TypeError("ParallelStyle is abstract: use ColwiseParallel() or RowwiseParallel()")
        if self.weight_layout not in WEIGHT_LAYOUTS:
            raise ShardingError(f"weight_layout must be one of {WEIGHT_LAYOUTS}, got {self.weight_layout!r}")

    @property
    def out_dim(self) -> int:
        """The weight dim of the output features (0 for "out_in", 1 for "in_out")."""
        return 0 if self.weight_layout == "out_in" else 1

    def placements(self) -> dict[str, Placement]:
        """The placement of the layer's ``weight`` and ``bias`` on the tensor-parallel mesh dim."""
        dim = self._out_in_weight_dim if self.weight_layout == "out_in" else 1 - self._out_in_weight_dim
        return {"weight": Shard(dim), "bias": self._bias}


@dataclass(frozen=True)
class ColwiseParallel(ParallelStyle):
    """Split the output features: each rank computes a slice of the layer's outputs.

    Example:
        >>> ColwiseParallel(weight_layout="in_out").placements()["weight"]
        Shard(dim=1)
    """

    _out_in_weight_dim: ClassVar[int] = 0
    _bias: ClassVar[Placement] = Shard(0)


@dataclass(frozen=True)
class RowwiseParallel(ParallelStyle):
    """Split the input features: each rank computes a partial sum of the layer's outputs.

    Example:
        >>> RowwiseParallel().placements()
        {'weight': Shard(dim=1), 'bias': Replicate()}
    """

    _out_in_weight_dim: ClassVar[int] = 1
    _bias: ClassVar[Placement] = Replicate()
