"""Every name of NumPy's API and what dtensor_np does with it: the one source of the comparison table and its tests.

For every callable of NumPy's main namespace, of ``numpy.linalg`` and
``numpy.fft``, and for every public attribute of ``numpy.ndarray``, the
catalogue holds either a :class:`Case` (how to call it on an array: the same
call runs on a NumPy array and on a DTensor, and gives the same values) or a
:class:`Refused` (why it takes no DTensor: it only makes sense on host data,
it makes no array, it names a memory layout a distributed array does not
have...).  The documentation builds its comparison table from it (what each
covered name communicates, found by running its case on a simulated mesh), and
``tests/test_numpy_api.py`` runs every case against NumPy on every placement
kind; neither is written by hand per name.

A case keyed ``"numpy.name: how"`` calls the same name another way (in
place, another dtype): the tests run it, the table shows the plain name's.

Cases come from the modules that implement the names (``CASES`` in
:mod:`dtensor_np.functions` modules) and from :data:`RULE_CASES` (names with a
sharding rule); refusals from :data:`REFUSED`.

Example:
    >>> case = Case(lambda x: np.cumsum(x, axis=0), axis=0, untouched=1)
    >>> case.input().shape, float(case.call(case.input()).sum())
    ((5, 4), 117.5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

__all__ = ["Case", "Refused", "Entry", "numpy_names", "outcome"]


@dataclass(frozen=True)
class Case:
    """How to call one name: ``call(x)`` on ``x`` of ``shape`` and ``dtype`` (a NumPy array or a DTensor).

    ``untouched`` and ``axis`` are the dims of ``x`` to shard for the "sharded on a dim the op does not work
    along" and "sharded on the dim it works along" placements (None: it has no such dim); ``data(shape)`` makes
    the values (default: ``arange(1, n + 1) / 4``, distinct and exact).  ``tolerance``: 0 compares exactly,
    else a relative tolerance in units of the dtype's epsilon times the size (reductions round differently).
    ``gathers``: the name's algorithm needs a whole operand (it is gathered, said in its docstring).
    """

    call: Callable[[Any], Any]
    shape: tuple[int, ...] = (5, 4)
    dtype: str = "float64"
    untouched: Optional[int] = 0
    axis: Optional[int] = None
    data: Optional[Callable[[tuple[int, ...]], np.ndarray]] = None
    tolerance: float = 0.0
    gathers: bool = False

    def input(self) -> np.ndarray:
        """The NumPy array the case is called on."""
        if self.data is not None:
            return np.asarray(self.data(self.shape)).astype(self.dtype)
        return (np.arange(1, int(np.prod(self.shape)) + 1).reshape(self.shape) / 4).astype(self.dtype)


@dataclass(frozen=True)
class Refused:
    """A name that takes no DTensor, and why (what to use instead).

    ``applicable``: False where the name takes no array at all (it makes one from Python values, configures
    NumPy, reads a file, names a dtype): such names are left out of the coverage count.
    """

    reason: str
    applicable: bool = True


Entry = Union[Case, Refused]


def numpy_names() -> list[str]:
    """Every name the catalogue must cover: NumPy's main namespace's callables (classes and dtypes left out),
    ``numpy.linalg``'s and ``numpy.fft``'s, and ``ndarray``'s public attributes, qualified
    (``numpy.sum``, ``numpy.linalg.norm``, ``ndarray.argmax``).

    Example:
        >>> names = numpy_names()
        >>> "numpy.sum" in names and "numpy.linalg.norm" in names and "ndarray.argmax" in names
        True
    """
    names = []
    for prefix, module in (("numpy", np), ("numpy.linalg", np.linalg), ("numpy.fft", np.fft)):
        for name in dir(module):
            value = getattr(module, name)
            if name.startswith("_") or not callable(value) or isinstance(value, type):
                continue
            names.append(f"{prefix}.{name}")
    names += [f"ndarray.{name}" for name in dir(np.ndarray) if not name.startswith("_")]
    return sorted(set(names))


def outcome(result: Any, counts: dict[str, int], implicit_gathers: int = 0) -> str:
    """One cell of the comparison table: the result's placements, then the collectives that made it.

    ``S(0) · all_to_all`` reads: the result is ``Shard(0)``, one ``all_to_all`` ran; ``R, R`` two replicated
    results, nothing moved; ``int`` a Python or NumPy scalar.  The same text is recorded in the documentation's
    table and checked by ``tests/test_numpy_api.py`` on 2 ranks.

    Example:
        >>> outcome(3.0, {"all_reduce": 1, "all_gather": 0})
        'float · all_reduce'
    """
    results = result if isinstance(result, (tuple, list)) else (result,)
    kinds = []
    for r in results:
        placements = getattr(r, "placements", None)
        if placements is not None:
            kinds.append("".join(str(p) for p in placements))
        else:
            kinds.append("dtype" if isinstance(r, np.dtype) else type(r).__name__)
    text = f"{len(kinds)} × {kinds[0]}" if len(kinds) > 3 and len(set(kinds)) == 1 else ", ".join(kinds)
    moved = " + ".join(f"{n} {k}" if n > 1 else k for k, n in sorted(counts.items()) if n)
    if implicit_gathers:
        moved = (moved + " + " if moved else "") + f"{implicit_gathers} implicit gather"
    return text + (f" · {moved}" if moved else "")
