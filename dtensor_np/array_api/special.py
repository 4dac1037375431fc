"""``xp.special``: SciPy's elementwise special functions on DTensors, block by block.

With ``SCIPY_ARRAY_API=1``, ``scipy.special.erf(x)`` of an array that is not
NumPy's calls ``xp.special.erf`` when the array's namespace has it (the
Array API's anticipated ``special`` extension, as ``torch.special``), and
otherwise converts the array to NumPy, which for a DTensor gathers it on every
rank.  ``xp.special`` has SciPy's special functions that are ufuncs without a
core signature (``erf``, ``gammaln``, ``ndtr``, ``xlogy``... elementwise by
definition): each runs on the local blocks through the rule of NumPy's ufuncs
(:func:`dtensor_np.propagation.elementwise.foreign_ufunc_rule`), with no
collective but broadcasting's.  Any other name is missing (``AttributeError``),
so SciPy takes its generic path; so is the whole extension without SciPy.
Blocks that are not NumPy arrays (CuPy's: SciPy's ufuncs take NumPy arrays
only) go SciPy's own last way: ``np.asarray`` of each argument (an implicit
gather, warned and counted), the ufunc, ``xp.asarray`` of the answer.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> x = xp.asarray([0.0, 0.5, 1.0])
    >>> with dt.comm_counter() as counter:
    ...     y = xp.special.erf(x)
    >>> y.placements, counter.total, bool(np.allclose(y.full_tensor(), [0.0, 0.5205, 0.8427], atol=1e-4))
    ((Shard(dim=0),), 0, True)
    >>> hasattr(xp.special, "logsumexp")  # not elementwise: SciPy's own array-API code runs instead
    False
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from collectives import array_module

from ..dtensor import DTensor

__all__ = ["SpecialFunctions", "elementwise_special"]


def elementwise_special(name: str) -> "np.ufunc | None":
    """SciPy's special function ``name`` as its ufunc, when it is an elementwise one (else None).

    Example:
        >>> elementwise_special("ndtr").__name__, elementwise_special("softmax")
        ('ndtr', None)
    """
    try:
        from scipy import special
    except ImportError:
        return None
    f = getattr(special, name, None)
    f = getattr(f, "__wrapped__", f)  # with SCIPY_ARRAY_API=1, scipy.special.erf wraps the ufunc (functools.wraps)
    return f if isinstance(f, np.ufunc) and f.signature is None else None


def _numpy_blocks(x: Any) -> bool:
    return not isinstance(x, DTensor) or all(array_module(b) is np for b in x.local_shards().values())


class SpecialFunctions:
    """The ``special`` extension of one namespace: its attributes are SciPy's elementwise special functions."""

    def __init__(self, name: str, namespace: Any) -> None:
        self.__name__ = name
        self._namespace = namespace

    def __getattr__(self, name: str) -> Callable[..., Any]:
        ufunc = None if name.startswith("_") else elementwise_special(name)
        if ufunc is None:
            raise AttributeError(f"{self.__name__} has no elementwise special function {name!r}")
        xp = self._namespace

        def special(*args: Any, **kwargs: Any) -> Any:
            if all(_numpy_blocks(a) for a in args):
                return xp.adopt(ufunc(*args, **kwargs))
            return xp.asarray(ufunc(*[np.asarray(a) for a in args], **kwargs))  # SciPy's last resort, as without us

        special.__name__ = special.__qualname__ = name
        special.__doc__ = ufunc.__doc__
        setattr(self, name, special)
        return special

    def __repr__(self) -> str:
        return f"<{self.__name__}>"
