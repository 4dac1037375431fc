"""NumPy functions that are compositions of others, each registered with
:func:`dtensor_np.propagation.registry.register_composite`, one module per family.

A composite calls only NumPy functions and array methods on its arguments, so it
runs on DTensors (every call through its own sharding rule: its collectives are
those of the calls it is made of, which its docstring names) and on the tracer's
arrays alike.  Each module lists how to call its functions in ``CASES`` (see
:mod:`dtensor_np.numpy_catalogue`), from which the documentation's comparison
table and ``tests/test_numpy_api.py`` are made.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(6.0).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> np.hstack([x, x]).shape
    (2, 6)
"""

from typing import Iterator

from ..numpy_catalogue import Case
from . import joining
from . import reshaping
from . import selecting
from . import predicates

__all__ = ["FAMILIES", "catalogue_cases", "joining"]

FAMILIES = {"joining": joining, "reshaping": reshaping, "selecting": selecting, "predicates": predicates}
"""The modules of composites, by name: each registers its functions and lists their cases in ``CASES``."""


def catalogue_cases() -> Iterator[tuple[str, str, Case]]:
    """``(family, qualified name, case)`` for every case of every family, in a fixed order.

    Example:
        >>> ("joining", "numpy.hstack") in {(f, n) for f, n, _ in catalogue_cases()}
        True
    """
    for family, module in sorted(FAMILIES.items()):
        for name, case in sorted(module.CASES.items()):
            yield family, name, case
