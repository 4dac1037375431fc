"""Conversions of a DTensor to a NumPy array: explicit ones, and implicit ones that warn by default.

A library that needs a NumPy array calls ``np.asarray(x)`` (``np.array``,
``x.__array__()``: scikit-learn's host code, SciPy's special functions,
matplotlib).  For a DTensor that gathers the whole array on every rank, which
a user may not expect; so the default is to do it and warn once per call site
with :class:`ImplicitGatherWarning`, naming the bytes gathered and the file and
line that asked.  ``DTENSOR_NP_IMPLICIT_GATHER=raise|warn|allow`` in the
environment, or the context manager :func:`implicit_gather`, chooses
(``raise``: a ``TypeError`` on every rank before anything moves).  Every such
gather is counted by ``dt.comm_counter()`` (``implicit_gathers``,
``implicit_bytes``).  Explicit conversions never warn: ``x.full_tensor()``,
``x.__dlpack__(dl_device=(1, 0))`` and ``np.from_dlpack(x, device="cpu")``
(the Array API's cross-device copy, which scikit-learn's ``move_to`` uses).

Example:
    >>> import warnings, numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with implicit_gather("allow"):
    ...     np.asarray(x).tolist()
    [0.0, 1.0, 2.0, 3.0]
    >>> with implicit_gather("raise"):
    ...     np.asarray(x)
    Traceback (most recent call last):
    ...
    TypeError: np.asarray of a DTensor of 32 bytes would gather it on every rank, and implicit gathers are refused here (dt.implicit_gather("raise")); call x.full_tensor() for the whole array, or allow it with dt.implicit_gather("warn")
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings
from typing import Iterator

from collectives.counting import record_implicit_gather

__all__ = ["ImplicitGatherWarning", "IMPLICIT_GATHER_ENV", "MODES", "implicit_gather", "implicit_gather_mode",
           "before_implicit_gather"]

IMPLICIT_GATHER_ENV = "DTENSOR_NP_IMPLICIT_GATHER"
"""``raise``, ``warn`` (the default) or ``allow``."""
MODES = ("raise", "warn", "allow")


class ImplicitGatherWarning(UserWarning):
    """A DTensor was gathered whole on every rank because NumPy asked for an array (``np.asarray(x)``).

    Example:
        >>> issubclass(ImplicitGatherWarning, UserWarning)
        True
    """


_MODE: contextvars.ContextVar[str] = contextvars.ContextVar("dtensor_np_implicit_gather", default="")


def _checked(mode: object, where: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{where}: expected one of {MODES}, got {mode!r}")
    return str(mode)


def implicit_gather_mode() -> str:
    """The mode in force: :func:`implicit_gather`'s, else :data:`IMPLICIT_GATHER_ENV`'s, else ``"warn"``."""
    mode = _MODE.get()
    if mode:
        return mode
    return _checked(os.environ.get(IMPLICIT_GATHER_ENV, "warn").strip().lower() or "warn", IMPLICIT_GATHER_ENV)


@contextlib.contextmanager
def implicit_gather(mode: str) -> Iterator[None]:
    """Inside the block, ``np.asarray(x)`` of a DTensor raises (``"raise"``), warns (``"warn"``) or gathers silently
    (``"allow"``).

    Every rank must use the same mode (it decides whether a collective runs).

    Example:
        >>> with implicit_gather("allow"):
        ...     implicit_gather_mode()
        'allow'
    """
    token = _MODE.set(_checked(mode, "implicit_gather"))
    try:
        yield
    finally:
        _MODE.reset(token)


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside dtensor_np, collectives and numpy (the line that asked)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(("dtensor_np", "collectives", "numpy")):
            return level
        frame = frame.f_back
        level += 1
    return level


def before_implicit_gather(what: str, nbytes: int) -> None:
    """What to do before ``what`` gathers a DTensor of ``nbytes`` for NumPy: raise, warn or nothing (see the module)."""
    mode = implicit_gather_mode()
    if mode == "raise":
        raise TypeError(
            f"{what} of a DTensor of {nbytes} bytes would gather it on every rank, and implicit gathers are refused "
            f"here (dt.implicit_gather(\"raise\")); call x.full_tensor() for the whole array, or allow it with "
            f"dt.implicit_gather(\"warn\")")
    if mode == "warn":
        level = _caller_stacklevel()  # 1: this function; warnings.warn counts alike
        frame = sys._getframe(level - 1)
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        warnings.warn(ImplicitGatherWarning(
            f"{what} gathers a DTensor of {nbytes} bytes on every rank ({where}); call x.full_tensor() to say so, "
            f"or choose with dt.implicit_gather(\"allow\" | \"raise\") or {IMPLICIT_GATHER_ENV}"), stacklevel=level)
    record_implicit_gather(nbytes)
