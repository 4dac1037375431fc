"""Parameters by dotted name, and the placements a plan gives them.

``params`` is a flat dict with dotted names (``{"fc1.weight": w}``) or nested
dicts whose paths join with ``"."`` (``{"fc1": {"weight": w}}``).  A plan maps
a layer prefix to a :class:`~dtensor_np.tensor_parallel.styles.ParallelStyle`;
``{"fc1": ColwiseParallel()}`` places ``fc1.weight`` and ``fc1.bias``.

Example:
    >>> import numpy as np
    >>> from dtensor_np.tensor_parallel import ColwiseParallel
    >>> flat = flatten_params({"fc1": {"weight": np.ones((4, 2)), "bias": np.ones(4)}})
    >>> sorted(flat)
    ['fc1.bias', 'fc1.weight']
    >>> plan_placements(flat, {"fc1": ColwiseParallel()})
    {'fc1.weight': Shard(dim=0), 'fc1.bias': Shard(dim=0)}
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ShardingError
from ..graph.pytree import leaves_with_paths, path_name
from ..placements import Placement
from .styles import ParallelStyle

__all__ = ["flatten_params", "plan_placements"]


def flatten_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as one flat dict from dotted name to array."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of arrays (flat with dotted names, or nested), got {type(params).__name__}")
    flat: dict[str, Any] = {}
    for path, value in leaves_with_paths(dict(params)):
        name = path_name(path)
        if name in flat:
            raise ShardingError(f"two parameters are both named {name!r} (a flat and a nested entry)")
        if not (hasattr(value, "shape") and hasattr(value, "dtype")):
            raise TypeError(f"parameter {name!r}: expected an array, got {type(value).__name__}")
        flat[name] = value
    return flat


def _shape(flat: Mapping[str, Any], name: str) -> tuple[int, ...]:
    return tuple(flat[name].shape)


def plan_placements(flat: Mapping[str, Any], plan: Mapping[str, ParallelStyle]) -> dict[str, Placement]:
    """The placement on the tensor-parallel mesh dim of every parameter the plan names.

    Raises:
        ShardingError: a prefix with no ``<prefix>.weight``, a weight that is
            not 2-d, or a bias whose size is not the weight's output features.
        TypeError: a plan value that is not a ParallelStyle.
    """
    if not isinstance(plan, Mapping):
        raise TypeError(f"plan must be a dict from layer prefix to ColwiseParallel()/RowwiseParallel(), got {type(plan).__name__}")
    out: dict[str, Placement] = {}
    for prefix, style in plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(
                f"plan[{prefix!r}]: expected ColwiseParallel() or RowwiseParallel(), got {style!r}"
                + (" (call the class)" if isinstance(style, type) else "")
            )
        weight, bias = f"{prefix}.weight", f"{prefix}.bias"
        if weight not in flat:
            layers = sorted(n[: -len(".weight")] for n in flat if n.endswith(".weight"))
            raise ShardingError(
                f"unknown parameter prefix {prefix!r} in the plan: expected a parameter {weight!r}; "
                f"the layers with a weight are {layers}"
            )
        shape = _shape(flat, weight)
        if len(shape) != 2:
            raise ShardingError(f"{weight}: a linear layer's weight must be 2-d, got shape {shape}")
        placements = style.placements()
        out[weight] = placements["weight"]
        if bias in flat:
            features = shape[style.out_dim]
            if _shape(flat, bias) != (features,):
                raise ShardingError(
                    f"{bias}: expected shape ({features},), the output features of {weight} {shape} "
                    f"in the {style.weight_layout!r} layout, got {_shape(flat, bias)}"
                )
            out[bias] = placements["bias"]
    return out
