"""What :mod:`dtensor_np.plan_core` reads of Cython's ``cython`` module when it runs as Python.

Cython is a build requirement only: compiled, ``cython.compiled`` is True and
the compiler drops the branches written for Python; run as Python without
Cython installed, the module imports this instead: ``compiled`` False and the
one decorator it uses, :func:`cdivision`, doing nothing (the C types are in
``plan_core.pxd``).

Example:
    >>> from dtensor_np import cython_shim
    >>> cython_shim.compiled, cython_shim.cdivision(True)(len) is len
    (False, True)
"""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

compiled = False


def cdivision(flag: bool) -> Callable[[F], F]:
    """Compiled, C's integer division for the function (no check for 0); as Python, nothing."""
    return lambda function: function
