"""Sharding propagation: pure rules from input specs to output specs.

``einop_rule`` and ``pointwise_rule`` follow PyTorch's semantics; the op
rules (elementwise, contraction, reduction, shape ops) build on them and are
looked up by NumPy callable with :func:`rule_for`.

Example:
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
    >>> mesh = DeviceMesh((2,))
    >>> a = DTensorSpec.from_dim_map(mesh, [0, -1], [], TensorMeta((4, 4), "f4"))
    >>> b = DTensorSpec.from_dim_map(mesh, [-1, -1], [], TensorMeta((4, 4), "f4"))
    >>> pointwise_rule([a, b]).redistribute_specs[1].dim_map  # b is chunked to match a
    [0, -1]
"""

import numpy as np

from . import contraction, elementwise, indexing, reduction, shape_ops  # noqa: F401  (register the rules)
from . import fft, linalg  # noqa: F401  (numpy.fft and numpy.linalg)
from . import layout_ops, reorder, scans, statistics  # noqa: F401  (cumsum, argmax, var, sort, flip, tile, take...)
from . import binning, nan_reductions, selection  # noqa: F401  (order statistics, histograms, nanmax...)
from . import moments  # noqa: F401  (var, std, nanvar, nanstd, nanmean: one pass, one collective)
from . import updates  # noqa: F401  (x[index] = value and the functional updates)
from . import bits  # noqa: F401  (packbits, unpackbits)
from . import convolution, gathered_operands, halo, least_squares  # noqa: F401  (issue 37: diff, convolve, lstsq, polyfit, eig...)
from . import row_maps, placing  # noqa: F401  (insert, delete, pad, resize; put_along_axis, isin, partition...)
from .einop import OutputSharding, einop_rule, pointwise_rule
from .registry import Decision, OpRule, decide, registered_ops, rule_for, rule_lookup
from .elementwise import foreign_ufunc_rule
from .reduction import ufunc_reduce_rule
from ..errors import ShardingError


def rule_of(fn: object, method: str = "__call__") -> "OpRule | None":
    """The rule of a NumPy callable or ufunc method (``"reduce"``), or None when it has none.

    Another library's elementwise ufunc (``scipy.special.erf``'s) gets the rule of NumPy's ufuncs
    (:func:`~dtensor_np.propagation.elementwise.foreign_ufunc_rule`).

    Example:
        >>> import numpy as np
        >>> rule_of(np.add).name, rule_of(np.add, "reduce").name, rule_of(np.fft.fftfreq)
        ('add', 'add.reduce', None)
    """
    if method == "__call__":
        rule = rule_lookup(fn)
        return foreign_ufunc_rule(fn) if rule is None and isinstance(fn, np.ufunc) else rule
    try:
        return ufunc_reduce_rule(fn) if method == "reduce" else None  # type: ignore[arg-type]
    except ShardingError:
        return None


__all__ = [
    "OutputSharding",
    "einop_rule",
    "pointwise_rule",
    "Decision",
    "OpRule",
    "decide",
    "rule_for",
    "rule_of",
    "registered_ops",
]
