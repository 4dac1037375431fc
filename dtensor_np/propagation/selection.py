"""Partitioning along a sharded axis that no other dim can take: a distributed selection (placeholder)."""

from __future__ import annotations


import numpy as np

from ..spec import DTensorSpec, TensorMeta
from .registry import Decision
from .whole_axes import whole_decision

__all__ = ["selection_decision"]


def selection_decision(spec: DTensorSpec, axis: int, m: int, kth: tuple[int, ...], arg: bool) -> Decision:
    dtype = np.dtype(np.intp) if arg else spec.dtype
    func = np.argpartition if arg else np.partition
    return whole_decision(spec, (axis,), [TensorMeta(spec.shape, dtype)], lambda rank, x: func(x, kth, axis=axis))
