"""What counts as a local array: NumPy or CuPy, of a dtype collectives can move.

Example:
    >>> import numpy as np
    >>> array_library(np.zeros(2)), check_array([1, 2]).dtype.kind, as_array(np.float32(2)).shape
    ('numpy', 'i', ())
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Callable

import numpy as np

from .local_tensor import LocalTensor
from .sharded import is_sharded

__all__ = ["array_function", "array_library", "as_array", "astype", "check_array", "checksum", "distributable"]


def array_library(x: Any) -> str:
    """``"numpy"`` or ``"cupy"``: the library an array belongs to."""
    module = type(x).__module__.split(".")[0]
    return "cupy" if module == "cupy" else "numpy"


def distributable(dtype: Any) -> bool:
    """Whether arrays of ``dtype`` can be DTensors: numeric and bool ones (object, string, void and datetime dtypes
    cannot be reduced or moved by MPI).  The one decision behind :func:`check_array`, ``TensorMeta`` and
    ``x.view(dtype)``.

    Example:
        >>> distributable(np.float16), distributable("U3"), distributable("datetime64[s]")
        (True, False, False)
    """
    return np.dtype(dtype).kind not in "OUSVMm"


def check_array(x: Any, what: str = "array") -> Any:
    """``x`` as a NumPy or CuPy array of a dtype collectives can move; TypeError otherwise."""
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:  # a mask or matrix semantics would be lost
        masked = isinstance(x, np.ma.MaskedArray)
        kind = ("numpy.ma.MaskedArray" if masked else "numpy.matrix" if isinstance(x, np.matrix)
                else f"{type(x).__module__}.{type(x).__name__}")
        fix = "x.filled(fill_value) (the mask cannot be distributed)" if masked else "np.asarray(x)"
        raise TypeError(f"expected a plain numpy.ndarray or cupy.ndarray for the {what}, got {kind}; pass {fix}")
    if array_library(x) != "cupy" and not isinstance(x, np.ndarray):
        if is_sharded(x) or isinstance(x, LocalTensor):
            raise TypeError(f"expected a NumPy or CuPy array for the {what}, got a {type(x).__name__}")
        x = np.asarray(x)
    if not distributable(x.dtype):
        raise TypeError(
            f"dtensor_np distributes numeric and bool arrays; the {what} has dtype {x.dtype} "
            f"(object, string, void and datetime dtypes cannot be reduced or moved by MPI)"
        )
    return x


def checksum(x: Any) -> int:
    """A CRC-32 of the array's bytes in C order: equal arrays (bit for bit) give equal checksums.

    A CuPy array is copied to host memory for it.

    Example:
        >>> import numpy as np
        >>> checksum(np.arange(4)) == checksum(np.arange(4).copy()), checksum(np.arange(4)) == checksum(np.ones(4, int))
        (True, False)
    """
    if array_library(x) == "cupy":
        x = x.get()
    return zlib.crc32(np.ascontiguousarray(x).view(np.uint8))


def array_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Make a plain function overridable like a NumPy function (NEP 18): tracers record it, DTensors dispatch it.

    When an argument (at the top level or in a list or tuple) defines
    ``__array_function__`` and is not an ndarray, its ``__array_function__``
    is called with the wrapped function, as NumPy does for its own functions.

    Example:
        >>> @array_function
        ... def double(x):
        ...     return x * 2
        >>> double(np.arange(2)).tolist()
        [0, 2]
    """

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        overloaded = [x for x in _candidates(args) + _candidates(tuple(kwargs.values()))
                      if hasattr(type(x), "__array_function__") and not isinstance(x, np.ndarray)]
        if overloaded:
            types = tuple({type(x) for x in overloaded})
            for x in overloaded:
                result = type(x).__array_function__(x, wrapped, types, args, kwargs)
                if result is not NotImplemented:
                    return result
            raise TypeError(f"no implementation of {fn.__name__} for {[t.__name__ for t in types]}")
        return fn(*args, **kwargs)

    return wrapped


def _candidates(values: tuple[Any, ...]) -> list[Any]:
    out = []
    for x in values:
        if isinstance(x, (list, tuple)):
            out.extend(x)
        else:
            out.append(x)
    return out


def astype(x: Any, dtype: Any) -> Any:
    """``x.astype(dtype)`` as a function (NumPy < 2.1 has no ``np.astype``)."""
    return x.astype(dtype)


def as_array(x: Any) -> Any:
    """A NumPy scalar or Python number as a 0-d array; arrays unchanged."""
    return np.asarray(x) if isinstance(x, (np.generic, bool, int, float, complex)) else x
