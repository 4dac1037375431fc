"""NumPy's text of an array: ``array2string``, ``array_str``, ``array_repr``.

Each is NumPy's own function on the values it prints: an array of at most
``threshold`` elements is gathered whole; a larger one is summarised and only
its corners (``edgeitems`` at each end of each long dim) move, one
``x[np.ix_(...)]`` (:func:`dtensor_np.dtensor.printed_values`), so the text is
NumPy's for the whole array at the cost of a few elements.  ``array_repr``
names the class as NumPy does for a subclass (``DTensor([...])``); ``repr(x)``
adds the placements and the mesh.  A collective every rank makes (unless the
array is replicated): call it on every rank, print on one.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(2000), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     text = np.array2string(x, separator=",")
    >>> text, text == np.array2string(np.arange(2000), separator=","), c.bytes["all_gather"] < 100
    ('[   0,   1,   2,...,1997,1998,1999]', True, True)
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import numpy as np

from ..dtensor import array_text, printed_values
from ..numpy_catalogue import Case
from ..propagation.registry import register_composite

__all__ = ["CASES", "array2string", "array_str", "array_repr"]


@register_composite(np.array2string)
def array2string(a: Any, max_line_width: Optional[int] = None, precision: Optional[int] = None,
                 suppress_small: Optional[bool] = None, separator: str = " ", prefix: str = "", style: Any = np._NoValue,
                 formatter: Any = None, threshold: Optional[int] = None, edgeitems: Optional[int] = None,
                 sign: Optional[str] = None, floatmode: Optional[str] = None, suffix: str = "", *,
                 legacy: Any = None) -> str:
    """``np.array2string`` of a DTensor's values (its corners only when ``threshold`` summarises it).

    Example:
        >>> import dtensor_np as dt
        >>> np.array2string(dt.distribute_tensor(np.arange(4), dt.DeviceMesh((2,)), [dt.Shard(0)]), separator=",")
        '[0,1,2,3]'
    """
    summarising = {k: v for k, v in (("threshold", threshold), ("edgeitems", edgeitems)) if v is not None}
    with np.printoptions(**summarising):
        shown, summarised = printed_values(a)
    extra = {} if style is np._NoValue else {"style": style}
    return np.array2string(shown, max_line_width, precision, suppress_small, separator, prefix, formatter=formatter,
                           threshold=0 if summarised else sys.maxsize, edgeitems=edgeitems, sign=sign,
                           floatmode=floatmode, suffix=suffix, legacy=legacy, **extra)


@register_composite(np.array_str)
def array_str(a: Any, max_line_width: Optional[int] = None, precision: Optional[int] = None,
              suppress_small: Optional[bool] = None) -> str:
    """``np.array_str`` of a DTensor's values, summarised as NumPy's print options say (``str(x)`` without the
    placements).

    Example:
        >>> import dtensor_np as dt
        >>> np.array_str(dt.distribute_tensor(np.array([1.0, 2.5]), dt.DeviceMesh((2,)), [dt.Shard(0)]))
        '[1.  2.5]'
    """
    return array_text(a, False, placed=False, max_line_width=max_line_width, precision=precision,
                      suppress_small=suppress_small)


@register_composite(np.array_repr)
def array_repr(arr: Any, max_line_width: Optional[int] = None, precision: Optional[int] = None,
               suppress_small: Optional[bool] = None) -> str:
    """``np.array_repr`` of a DTensor: NumPy's repr of its values, the class named as for a subclass
    (``repr(x)`` without the placements).

    Example:
        >>> import dtensor_np as dt
        >>> np.array_repr(dt.distribute_tensor(np.ones(2, np.float32), dt.DeviceMesh((2,)), [dt.Shard(0)]))
        'DTensor([1., 1.], dtype=float32)'
    """
    return array_text(arr, True, placed=False, max_line_width=max_line_width, precision=precision,
                      suppress_small=suppress_small)


def _as_numpy_repr(text: str) -> str:
    """A repr with NumPy's class name and no layout whitespace, to compare with NumPy's."""
    return " ".join(text.replace("DTensor(", "array(").split())


def _long(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(2000.0).reshape(shape) / 3


_WHOLE = {"untouched": None, "axis": 0, "gathers": True}  # printed whole: every value is read
_CORNERS = {"untouched": None}  # summarised: the corners move, on every placement

CASES = {
    "numpy.array2string": Case(lambda x: np.array2string(x, precision=3, separator=", "), **_WHOLE),
    "numpy.array_str": Case(lambda x: np.array_str(x, max_line_width=30, suppress_small=True), **_WHOLE),
    "numpy.array_repr": Case(lambda x: _as_numpy_repr(np.array_repr(x, precision=2)), dtype="float32", **_WHOLE),
    "numpy.array2string: summarised": Case(lambda x: np.array2string(x, threshold=10, edgeitems=2), axis=0,
                                           **_CORNERS),
    "numpy.array_str: summarised": Case(lambda x: np.array_str(x), shape=(500, 4), data=_long, axis=0, **_CORNERS),
    "numpy.array_repr: summarised": Case(lambda x: _as_numpy_repr(np.array_repr(x)), shape=(4, 500), data=_long,
                                         axis=1, **_CORNERS),
}
