"""The cases of the functions :mod:`dtensor_np.views` implements (``copy``, ``copyto``, the ``split`` family,
``diagonal``), and of the conversions to NumPy (``asarray`` & co., which gather: stated, counted and warned
about by :mod:`dtensor_np.conversion`).

``split`` and its family return views of the pieces (local where the split
axis is not sharded; a piece of a sharded axis keeps the shards it covers, no
collective); ``copyto`` writes through the view model (the destination's
views see it).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(8.0).reshape(4, 2), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> [p.shape for p in np.split(x, 2)]
    [(2, 2), (2, 2)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..numpy_catalogue import Case

__all__ = ["CASES"]


def _copyto(x: Any) -> Any:
    np.copyto(x, np.arange(4.0), where=np.array([True, False, True, True]))
    return x


def _copyto_view(x: Any) -> Any:
    view = x[:, 1::2]
    np.copyto(view, -1.0)
    return x


CASES = {
    "numpy.copy": Case(lambda x: np.copy(x), axis=1),
    "numpy.copyto": Case(_copyto, axis=1),
    "numpy.copyto: through a view": Case(_copyto_view, axis=1),
    "numpy.split": Case(lambda x: tuple(np.split(x, [1, 3], axis=0)), untouched=1, axis=0),
    "numpy.array_split": Case(lambda x: tuple(np.array_split(x, 3, axis=1)), axis=1),
    "numpy.hsplit": Case(lambda x: tuple(np.hsplit(x, 2)), axis=1),
    "numpy.vsplit": Case(lambda x: tuple(np.vsplit(x, [2])), untouched=1, axis=0),
    "numpy.dsplit": Case(lambda x: tuple(np.dsplit(x, [1])), shape=(3, 4, 2), axis=2),
    "numpy.diagonal": Case(lambda x: np.diagonal(x), shape=(4, 4, 3), untouched=2, axis=0),
}

for _name in ("asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "asarray_chkfinite",
              "require"):
    CASES[f"numpy.{_name}"] = Case(lambda x, f=getattr(np, _name): f(x), gathers=True)
CASES["numpy.from_dlpack"] = Case(lambda x: np.from_dlpack(x), gathers=True)
for _name in ("iterable", "isscalar"):
    CASES[f"numpy.{_name}"] = Case(lambda x, f=getattr(np, _name): f(x))
