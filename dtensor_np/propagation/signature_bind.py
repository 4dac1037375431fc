"""Binding a call by the NumPy function's own signature: its array parameters and a frozen key of the rest.

:func:`named_arguments`, :func:`pop_dtensor` and :func:`no_more_arguments` are
the small steps the hand-written rules' binders share (a rule that
normalises its arguments itself): name the arguments as Python would, take
the DTensor, and refuse what is left.

Used by the rules of ``numpy.linalg`` and ``numpy.fft``: every argument is
named as NumPy names it (defaults filled in), the array parameters must be
DTensors, and every other argument must be static (a scalar, a string, a
tuple): an array there is refused with a ``ShardingError`` naming it.

Example:
    >>> import numpy as np
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Replicate
    >>> from dtensor_np.sharded import SpecArg
    >>> x = SpecArg(DTensorSpec(DeviceMesh((1,)), (Replicate(),), TensorMeta((3,), "f8")))
    >>> bind = signature_binder(np.fft.fft, "numpy.fft")
    >>> bind((x,), {"n": 4})[1]
    (('n', 4), ('axis', -1), ('norm', None), ('out', None))
    >>> bind((x, np.ones(2)), {})
    Traceback (most recent call last):
    ...
    dtensor_np.errors.ShardingError: numpy.fft.fft on DTensors: expected a static n (a scalar, string or tuple), got ndarray
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from collectives import frozen

from ..errors import ShardingError
from ..sharded import array_operands, is_sharded

__all__ = ["signature_binder", "bound_arguments", "named_arguments", "pop_dtensor", "no_more_arguments"]


def named_arguments(name: str, names: Sequence[str], args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by name: the positional ones named by ``names`` in order, then the keywords.

    As Python binds a call: more positional arguments than ``names``, or a name
    given by position and again by keyword, is a TypeError.

    Example:
        >>> named_arguments("numpy.flip", ("m", "axis"), (1,), {"axis": 0})
        {'m': 1, 'axis': 0}
        >>> named_arguments("numpy.flip", ("m", "axis"), (1, 0), {"axis": 0})
        Traceback (most recent call last):
        ...
        TypeError: numpy.flip() got multiple values for argument 'axis'
    """
    if len(args) > len(names):
        raise TypeError(f"{name}() takes at most {len(names)} positional arguments, got {len(args)}")
    given = dict(zip(names, args))
    for key, value in kwargs.items():
        if key in given:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        given[key] = value
    return given


def pop_dtensor(name: str, given: dict[str, Any], key: str) -> Any:
    """``given[key]``, removed, which must be a DTensor (a TypeError naming what it is otherwise)."""
    value = given.pop(key, None)
    if not is_sharded(value):
        raise TypeError(f"{name}: expected a DTensor, got {type(value).__name__}")
    return value


def no_more_arguments(name: str, given: Mapping[str, Any]) -> None:
    """A TypeError naming the arguments left in ``given`` (the binder took all it knows)."""
    if given:
        raise TypeError(f"{name}() got unexpected arguments {sorted(given)}")


def bound_arguments(signature: inspect.Signature, name: str, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by the signature's names, defaults filled in; Python's TypeError naming ``name``.

    Example:
        >>> bound_arguments(inspect.signature(np.polyder), "numpy.polyder", ([1, 2],), {})
        {'p': [1, 2], 'm': 1}
    """
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def signature_binder(func: Callable[..., Any], module: str, arrays: int = 1, scalars: tuple[str, ...] = ()) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    """``bind(args, kwargs) -> (DTensors, key)`` for ``func``, whose first ``arrays`` parameters are arrays.

    ``key`` is ``((name, value), ...)`` for every other parameter, in the
    signature's order.  ``scalars`` name parameters that NumPy would also take
    as arrays (a per-matrix tolerance) but that must be scalars here.
    """
    signature = inspect.signature(func)
    name = f"{module}.{func.__name__}"
    params = list(signature.parameters)[:arrays]

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = bound_arguments(signature, name, args, kwargs)
        tensors = tuple(array_operands([given.pop(p) for p in params]))
        for p, t in zip(params, tensors):
            if not is_sharded(t):
                raise TypeError(f"{name}: expected a DTensor for {p}, got {type(t).__name__}; distribute it first")
        for key, value in given.items():
            an_array = is_sharded(value) or (isinstance(value, np.ndarray) and value.ndim > 0)
            if an_array or (key in scalars and isinstance(value, (list, tuple))):
                raise ShardingError(
                    f"{name} on DTensors: expected a static {key} (a scalar, string or tuple), got {type(value).__name__}"
                )
        return tensors, frozen(tuple(given.items()))

    return bind
