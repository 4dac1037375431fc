"""``numpy.ndarray``'s public attributes on DTensors: how each is called (``CASES``), which are refused and why
(``REFUSED``), and the two that are made of views: ``x.view(dtype)`` and ``np.ix_``.

The methods themselves are :class:`~dtensor_np.DTensor`'s, each NumPy's signature calling the NumPy function of
its name (``x.argmax(axis=0)`` is ``np.argmax(x, axis=0)``: one rule per concept); the in-place ones (``fill``,
``sort``, ``partition``, ``put``, ``resize``, ``byteswap(inplace=True)``) rebind the array, through its base for a
view.  ``item``, ``tolist``, ``tobytes`` give Python values on every rank (``item`` moves one element,
``tolist``/``tobytes`` gather the array); ``flags`` and ``flat`` are :class:`dtensor_np.dtensor.Flags` and
:class:`dtensor_np.dtensor.FlatIter`.  What cannot mean anything for an array without a single buffer
(``ctypes``, ``data``, ``strides``, ``tofile``, ``dump``, ``dumps``, ``getfield``, ``setfield``, ``setflags``)
raises an ``AttributeError`` that says what to use instead (:data:`dtensor_np.dtensor.REFUSED_ATTRIBUTES`).

``x.view(dtype)`` reads each element's bytes as ``dtype``: every rank on its own block, no communication (a
pending ``Partial`` is reduced first).  Like NumPy's it is a view: a write through it writes ``x`` (its
:class:`DTypeStep` reinterprets the written values back).  A dtype of another itemsize changes the length of the
last dim (NumPy's rule, its errors), which must then not be sharded.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.array([1.0, -2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> bits = x.view(np.int64)
    >>> bits[1] = 0                  # writes x through the view
    >>> x.full_tensor().tolist(), x.argmax().item()
    ([1.0, 0.0], 0)
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from collectives import array_module

from ..arrays import distributable
from ..dtensor import DTensor, REFUSED_ATTRIBUTES, map_shards, register_methods
from ..errors import ShardingError
from ..numpy_catalogue import Case, Refused
from ..placements import Shard
from ..propagation.registry import register_composite
from ..strides import proxy
from ..views import Step, twin_strides, view_of

__all__ = ["CASES", "REFUSED", "DTypeStep", "reinterpret", "view", "ix_"]


def reinterpret(x: DTensor, dtype: Any) -> DTensor:
    """The bytes of ``x``'s elements read as ``dtype`` (a new array, C-ordered): each rank's block on its own.

    Another itemsize changes the length of the last dim (NumPy's rule): it must not be sharded.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones((2, 2), np.float32), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> reinterpret(x, np.uint16).shape, reinterpret(x, np.float64).shape
        ((2, 4), (2, 1))
    """
    dtype = np.dtype(dtype)
    shape = proxy(x.shape, None, x.dtype).view(dtype).shape  # NumPy's shape and errors
    if shape[-1:] != x.shape[-1:] and any(isinstance(p, Shard) and p.dim == x.ndim - 1 for p in x.placements):
        raise ShardingError(f"x.view({dtype}) changes the length of the last dim ({x.shape[-1]} -> {shape[-1]}), "
                            f"which is sharded ({x.placements}): redistribute it first")
    if dtype.itemsize == x.dtype.itemsize:
        return map_shards(x, lambda a: a.view(dtype), dtype, shape)
    return map_shards(x, lambda a: array_module(a).ascontiguousarray(a).view(dtype), dtype, shape)


class DTypeStep(Step):
    """``x.view(dtype)``: the view's value is :func:`reinterpret` of its parent's; a write reinterprets back."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype

    def apply(self, value: DTensor) -> DTensor:
        return reinterpret(value, self.dtype)

    def twin(self, parent: np.ndarray) -> np.ndarray:
        return parent.view(self.dtype)

    def write_back(self, parent: DTensor, child: DTensor) -> DTensor:
        return reinterpret(child, parent.dtype)

    def __repr__(self) -> str:
        return f"DTypeStep({self.dtype})"


def view(x: DTensor, dtype: Any = None, type: Any = None) -> DTensor:
    """``x.view()``, ``x.view(dtype)`` (see the module docstring); ``x.view(type)`` raises a TypeError.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(3, dtype=np.int32), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> v = view(x, np.uint32); v[0] = 7
        >>> x.full_tensor().tolist(), view(x).base is x
        ([7, 1, 2], True)
    """
    if type is not None or (isinstance(dtype, builtins.type) and issubclass(dtype, (np.ndarray, DTensor))):
        raise TypeError("x.view(type): a DTensor is viewed as another dtype, never as another array type; use "
                        "x.full_tensor() (the whole array, gathered) or x.to_local() (this rank's block)")
    if dtype is None:
        return x[...]
    dtype = np.dtype(dtype)
    if not distributable(dtype):
        raise TypeError(f"dtensor_np distributes numeric and bool arrays; x.view({dtype}) would make a {dtype} one")
    proxy(x.shape, twin_strides(x), x.dtype).view(dtype)  # NumPy's errors for x's layout (a 0-d array, the last axis)
    if dtype == x.dtype:
        return x[...]
    return view_of(x, DTypeStep(dtype), reinterpret(x, dtype))


@register_composite(np.ix_)
def ix_(*args: Any) -> tuple[Any, ...]:
    """``np.ix_``: each 1-d sequence reshaped to index one dim of an open mesh, a boolean one as its
    ``nonzero()`` indices, as NumPy's; a DTensor one through its rules (``nonzero`` of a mask moves its counts,
    ``reshape`` is a view), plain ones are NumPy arrays.

    Example:
        >>> import dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(12.0).reshape(3, 4), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> x[np.ix_(x[:, 0] > 3, [1, 3])].full_tensor().tolist()
        [[5.0, 7.0], [9.0, 11.0]]
    """
    out = []
    nd = len(args)
    for k, new in enumerate(args):
        if not isinstance(new, (np.ndarray, DTensor)):
            new = np.asarray(new)
            if new.size == 0:
                new = new.astype(np.intp)  # NumPy's: an empty sequence indexes as an int array
        if new.ndim != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if new.dtype.kind == "b":
            (new,) = new.nonzero()
        out.append(new.reshape((1,) * k + (new.size,) + (1,) * (nd - k - 1)))
    return tuple(out)


register_methods({"view": view})


def _shuffled(shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values in no order (for the sorting methods)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(7).permutation(n) + 1).reshape(shape) / 4


def _flat(x: Any) -> Any:
    x.flat[::3] = [-1.0, -2.0]
    return x.flat[7], x.flat[[1, -1]], x.flat[2:9:3], x


def _view(x: Any) -> Any:
    bits = x.view(np.int64)
    bits[0, 1] = 0
    return bits, x


def _in_place(method: str, *args: Any, **kwargs: Any) -> Any:
    """A case for an in-place method: the array after ``x.method(*args, **kwargs)``, which returns None."""
    def call(x: Any) -> Any:
        if getattr(x, method)(*args, **kwargs) is not None:
            raise AssertionError(f"x.{method} returned a value")
        return x
    return call


CASES = {
    "ndarray.T": Case(lambda x: x.T),
    "ndarray.all": Case(lambda x: (x > 2).all(axis=0), untouched=1, axis=0),
    "ndarray.any": Case(lambda x: (x > 4).any(axis=1, keepdims=True), axis=1),
    "ndarray.argmax": Case(lambda x: x.argmax(axis=0), untouched=1, axis=0, data=_shuffled),
    "ndarray.argmin": Case(lambda x: x.argmin(axis=1, keepdims=True), axis=1, data=_shuffled),
    "ndarray.argpartition": Case(lambda x: x.argpartition(2, axis=0)[2], untouched=1, axis=0, data=_shuffled),
    "ndarray.argsort": Case(lambda x: x.argsort(axis=0), untouched=1, axis=0, data=_shuffled),
    "ndarray.astype": Case(lambda x: x.astype(np.float32, casting="same_kind")),
    "ndarray.base": Case(lambda x: (x.base is None, x[:, 1:].base is x, x.T.base is x, x.copy().base is None)),
    "ndarray.byteswap": Case(lambda x: x.byteswap(), dtype="int32"),
    "ndarray.choose": Case(lambda x: (x > 2.5).astype(np.intp).choose([x, -x]),
                           untouched=None),  # mode="raise": one all_reduce (the bounds check)
    "ndarray.clip": Case(lambda x: x.clip(1.0, 4.0)),
    "ndarray.compress": Case(lambda x: x.compress([True, False, True, True], axis=1), axis=1),
    "ndarray.conj": Case(lambda x: (x + 1j * x).conj()),
    "ndarray.conjugate": Case(lambda x: (x - 2j * x).conjugate()),
    "ndarray.copy": Case(lambda x: x.copy(order="F")),
    "ndarray.cumprod": Case(lambda x: x.cumprod(axis=0), untouched=1, axis=0),
    "ndarray.cumsum": Case(lambda x: x.cumsum(axis=0), untouched=1, axis=0),
    "ndarray.device": Case(lambda x: x.to_device(x.device).shape),
    "ndarray.diagonal": Case(lambda x: x.diagonal(1), untouched=None, axis=0),
    "ndarray.dot": Case(lambda x: x.dot(np.arange(4.0)), axis=1),
    "ndarray.dtype": Case(lambda x: str(x.dtype)),
    "ndarray.fill": Case(_in_place("fill", 2.5)),
    "ndarray.flags": Case(lambda x: (x.flags.c_contiguous, x.flags.f_contiguous, x.T.flags.f_contiguous,
                                     x[:, 1].flags.c_contiguous, x.flags.owndata, x.T.flags.owndata,
                                     x.flags.writeable, np.broadcast_to(x, x.shape).flags.writeable, x.flags.num,
                                     x.T.flags["FNC"], x[:, ::2].flags.forc)),
    "ndarray.flat": Case(_flat, untouched=None, axis=0),
    "ndarray.flatten": Case(lambda x: x.flatten(), untouched=None, axis=0),
    "ndarray.imag": Case(lambda x: (x + 2j * x).imag),
    "ndarray.item": Case(lambda x: (x.item(7), x.item(-1), x.item(3, 2), x.item((0, 1))), untouched=None, axis=0),
    "ndarray.itemsize": Case(lambda x: x.itemsize),
    "ndarray.mT": Case(lambda x: x.mT),
    "ndarray.max": Case(lambda x: x.max(axis=0, keepdims=True), untouched=1, axis=0, data=_shuffled),
    "ndarray.mean": Case(lambda x: x.mean(axis=1), axis=1),
    "ndarray.min": Case(lambda x: x.min(axis=1), axis=1, data=_shuffled),
    "ndarray.nbytes": Case(lambda x: x.nbytes),
    "ndarray.ndim": Case(lambda x: x.ndim),
    "ndarray.nonzero": Case(lambda x: (x > 3.0).nonzero(), untouched=None, axis=0),
    "ndarray.partition": Case(lambda x: (x.partition(2, axis=0), x[2])[1], untouched=1, axis=0, data=_shuffled),
    "ndarray.prod": Case(lambda x: x.prod(axis=0), untouched=1, axis=0),
    "ndarray.put": Case(_in_place("put", [0, 7, -1], [9.0, 8.0, 7.0]), untouched=None, axis=0),
    "ndarray.ravel": Case(lambda x: x.ravel(), untouched=None, axis=0),
    "ndarray.real": Case(lambda x: (x + 2j * x).real),
    "ndarray.repeat": Case(lambda x: x.repeat(2, axis=0), untouched=1, axis=0),
    "ndarray.reshape": Case(lambda x: x.reshape(10, 2), untouched=None, axis=0),
    "ndarray.resize": Case(_in_place("resize", (3, 7), refcheck=False), untouched=None, axis=0),
    "ndarray.round": Case(lambda x: (x / 3).round(2)),
    "ndarray.searchsorted": Case(lambda x: x[:, 0].searchsorted([2.0, 3.3]), untouched=None, axis=0),
    "ndarray.shape": Case(lambda x: x.shape),
    "ndarray.size": Case(lambda x: x.size),
    "ndarray.sort": Case(_in_place("sort", axis=0), untouched=1, axis=0, data=_shuffled),
    "ndarray.squeeze": Case(lambda x: x[:, 1:2].squeeze(axis=1)),
    "ndarray.std": Case(lambda x: x.std(axis=0, ddof=1), untouched=1, axis=0, tolerance=16),
    "ndarray.sum": Case(lambda x: x.sum(axis=0), untouched=1, axis=0),
    "ndarray.swapaxes": Case(lambda x: x.swapaxes(0, 1)),
    "ndarray.take": Case(lambda x: x.take([0, 3, 3], axis=1), axis=1),
    "ndarray.to_device": Case(lambda x: x.to_device(x.device)),
    "ndarray.tobytes": Case(lambda x: list(x.tobytes()), untouched=None, axis=0),
    "ndarray.tolist": Case(lambda x: x.tolist(), untouched=None, axis=0),
    "ndarray.trace": Case(lambda x: x.trace(offset=1), untouched=None, axis=0),
    "ndarray.transpose": Case(lambda x: x.transpose(1, 0)),
    "ndarray.var": Case(lambda x: x.var(axis=1), axis=1, tolerance=16),
    "ndarray.view": Case(_view),
    "numpy.ix_": Case(lambda x: x[np.ix_(x[:, 0] > 1.0, [0, 2])], untouched=None, axis=0),
}
"""How each attribute of ``numpy.ndarray`` is called on an array (``tests/test_numpy_api.py`` runs them)."""

# a single buffer's address, layout or file: nothing a distributed array has (issue 37 names them), so they are left
# out of the count of applicable names
REFUSED = {f"ndarray.{name}": Refused(reason, applicable=False) for name, reason in sorted(REFUSED_ATTRIBUTES.items())}
"""The attributes of ``numpy.ndarray`` a DTensor has not, and what to use instead."""
