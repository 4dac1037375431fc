"""``numpy.fft``: every name, checked against NumPy (the rules are :mod:`dtensor_np.propagation.fft`'s).

The transforms run on whole transform axes: an unsharded transform axis
moves nothing; a sharded one moves its sharding to another dim with one
``all_to_all`` (or is gathered with one ``all_gather`` where no dim can take
it).  ``fftshift``/``ifftshift`` roll a sharded axis with two ``rechunk``
exchanges of the rows that change owner.  ``fftfreq`` and ``rfftfreq`` make
an array from a length and a spacing, so they take no DTensor: they are
refused here (NumPy's own call gives a host array; the Array API
namespace's ``xp.fft.fftfreq(n, d=..., device=...)`` places one on a mesh).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(8.0).reshape(2, 4), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.fft.rfft(x)
    >>> np.allclose(y.full_tensor(), np.fft.rfft(np.arange(8.0).reshape(2, 4))), str(y.spec), c.total
    (True, 'S(0)', 0)
"""

from __future__ import annotations

import numpy as np

from ..numpy_catalogue import Case, Refused

__all__ = ["CASES", "REFUSED"]

_ALONG_ROWS = dict(untouched=1, axis=0)
_PLANES = dict(shape=(4, 3, 4), untouched=0, axis=1)

CASES = {
    "numpy.fft.fft": Case(lambda x: np.fft.fft(x, axis=0), **_ALONG_ROWS),
    "numpy.fft.ifft": Case(lambda x: np.fft.ifft(x, n=6, axis=0, norm="ortho"), **_ALONG_ROWS),
    "numpy.fft.rfft": Case(lambda x: np.fft.rfft(x, axis=0), **_ALONG_ROWS),
    "numpy.fft.irfft": Case(lambda x: np.fft.irfft(x, axis=0), **_ALONG_ROWS),
    "numpy.fft.hfft": Case(lambda x: np.fft.hfft(x, axis=0), **_ALONG_ROWS),
    "numpy.fft.ihfft": Case(lambda x: np.fft.ihfft(x, axis=0), **_ALONG_ROWS),
    "numpy.fft.fft2": Case(lambda x: np.fft.fft2(x), **_PLANES),
    "numpy.fft.ifft2": Case(lambda x: np.fft.ifft2(x, norm="forward"), **_PLANES),
    "numpy.fft.rfft2": Case(lambda x: np.fft.rfft2(x), **_PLANES),
    "numpy.fft.irfft2": Case(lambda x: np.fft.irfft2(x), **_PLANES),
    "numpy.fft.fftn": Case(lambda x: np.fft.fftn(x, axes=(1, 2)), **_PLANES),
    "numpy.fft.ifftn": Case(lambda x: np.fft.ifftn(x, s=(2, 4), axes=(1, 2)), **_PLANES),
    "numpy.fft.rfftn": Case(lambda x: np.fft.rfftn(x, axes=(1, 2)), **_PLANES),
    "numpy.fft.irfftn": Case(lambda x: np.fft.irfftn(x, axes=(1, 2)), **_PLANES),
    "numpy.fft.fftshift": Case(lambda x: np.fft.fftshift(x, axes=0), **_ALONG_ROWS),
    "numpy.fft.ifftshift": Case(lambda x: np.fft.ifftshift(x, axes=0), **_ALONG_ROWS),
}

_FREQUENCIES = ("makes an array from a length n and a spacing d, and takes no array, so no DTensor reaches it: "
                "NumPy's own call gives a host array (dt.distribute_tensor(np.fft.{name}(n, d), mesh, placements) "
                "places it), or use the Array API namespace's xp.fft.{name}(n, d=d, device=...)")

REFUSED = {
    "numpy.fft.fftfreq": Refused(_FREQUENCIES.format(name="fftfreq"), applicable=False),
    "numpy.fft.rfftfreq": Refused(_FREQUENCIES.format(name="rfftfreq"), applicable=False),
    "numpy.fft.test": Refused("NumPy's test runner for numpy.fft: it takes no array (run NumPy's own tests)",
                              applicable=False),
}
