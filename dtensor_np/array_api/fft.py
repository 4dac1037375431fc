"""The ``fft`` extension of the Array API namespace (``xp.fft``): ``numpy.fft`` on DTensors.

The transforms and the shifts are ``numpy.fft``'s functions of the same
names (NumPy 2 keeps single precision: ``complex64`` in, ``complex64`` out),
run on the DTensors through their sharding rules.  ``fftfreq`` and
``rfftfreq`` create arrays, so they take the namespace (and the standard's
``dtype=``/``device=``): NumPy's frequencies, the same on every rank, of which
each rank keeps its block.

Example:
    >>> import dtensor_np as dt
    >>> xp = dt.array_api.namespace(dt.DeviceMesh((2,)))
    >>> f = xp.fft.fftfreq(4, d=0.5, dtype=xp.float32)
    >>> f.dtype, f.full_tensor().tolist(), f.placements
    (dtype('float32'), [0.0, 0.5, -1.0, -0.5], (Shard(dim=0),))
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..dtensor import DTensor

__all__ = ["FUNCTIONS", "NAMESPACE_FUNCTIONS", "fftfreq", "rfftfreq"]


def _frequencies(make: Callable[[int, float], Any], xp: Any, n: int, d: float, dtype: Any, device: Any) -> DTensor:
    return xp.place(make(n, d).astype(np.float64 if dtype is None else dtype, copy=False), device)


def fftfreq(xp: Any, n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> DTensor:
    """The sample frequencies of ``fft`` (``numpy.fft.fftfreq``), in ``dtype`` (float64 by default)."""
    return _frequencies(np.fft.fftfreq, xp, n, d, dtype, device)


def rfftfreq(xp: Any, n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> DTensor:
    """The sample frequencies of ``rfft`` (``numpy.fft.rfftfreq``), in ``dtype`` (float64 by default)."""
    return _frequencies(np.fft.rfftfreq, xp, n, d, dtype, device)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(np.fft, name)
    for name in "fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftshift ifftshift".split()
}
"""The transforms and shifts (``xp.fft.<name>``)."""

NAMESPACE_FUNCTIONS: dict[str, Callable[..., Any]] = {"fftfreq": fftfreq, "rfftfreq": rfftfreq}
"""The creation functions of the extension, which take the namespace first."""
