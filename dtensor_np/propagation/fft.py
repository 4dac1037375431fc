"""Rules for ``numpy.fft`` on DTensors: every function of the Array API ``fft`` extension (2024.12), plus the 2-d ones.

Transforms (``fft ifft rfft irfft hfft ihfft``, ``fftn ifftn rfftn irfftn``,
``fft2 ifft2 rfft2 irfft2``, with NumPy's ``n=``, ``s=``, ``axes=``, ``norm=``):

* transform axes unsharded: every rank transforms its shard; nothing moves,
  other dims keep their sharding;
* a transform axis sharded on mesh dim ``m``: the sharding moves to a dim
  the transform does not touch (the longest unsharded one at least as long as
  the mesh dim) with one ``all_to_all`` (the transpose of distributed FFT
  libraries such as mpi4py-fft; every rank sends ``(k-1)/k`` of its shard),
  then every rank transforms whole axes.  There is no transpose back: the
  result stays sharded on the dim that took the sharding (``redistribute``
  moves it back with one more ``all_to_all`` when needed);
* when no other dim can take it, the transform axes are gathered: one
  ``all_gather`` for all such mesh dims together (see :mod:`.whole_axes`).

The transforms are linear, so pending sums and averages (``Partial``) flow
through them untouched; ``Partial(max/min)`` is reduced first.

``fftshift`` / ``ifftshift``: a roll by half of every shifted axis.  Unsharded
axes roll locally; a sharded axis rolls with one ``Alltoallv`` of only the
rows that change owner (counted as ``all_to_all``; see :mod:`.roll`) and
keeps its sharding; every placement,
``Partial`` included, is kept.

``fftfreq`` / ``rfftfreq`` take no array and are NumPy's own (an Array API
namespace places their results).  ``out=`` as a keyword rebinds the DTensor
(as for every function); ``out`` given by position is refused.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> a = np.random.default_rng(0).normal(size=(4, 6))
    >>> x = dt.distribute_tensor(a, mesh, [dt.Shard(1)])
    >>> with dt.comm_counter() as c:
    ...     y = np.fft.fft(x)                  # axis 1 is sharded: it moves to axis 0
    >>> str(y.spec), c.counts["all_to_all"], np.allclose(y.full_tensor(), np.fft.fft(a))
    ('S(0)', 1, True)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import ShardingError
from ..spec import DTensorSpec
from .common import axis_index, single_sharding
from .empty_batch import empty_batch, numpy_outputs
from .registry import Decision, OpRule, register
from .roll import roll_decision
from .signature_bind import signature_binder
from .whole_axes import whole_decision

__all__ = ["TRANSFORMS_1D", "TRANSFORMS_ND", "transform_axes"]

TRANSFORMS_1D = (np.fft.fft, np.fft.ifft, np.fft.rfft, np.fft.irfft, np.fft.hfft, np.fft.ihfft)
TRANSFORMS_ND = (np.fft.fftn, np.fft.ifftn, np.fft.rfftn, np.fft.irfftn, np.fft.fft2, np.fft.ifft2, np.fft.rfft2, np.fft.irfft2)


def _options(func: Callable[..., Any], key: Any) -> dict[str, Any]:
    kwargs = dict(key)
    if kwargs.pop("out") is not None:
        raise ShardingError(f"numpy.fft.{func.__name__} on DTensors: pass out= as a keyword (it rebinds the DTensor), not by position")
    return kwargs


def transform_axes(ndim: int, s: Any, axes: Any) -> list[int]:
    """The dims an n-d transform works on, in NumPy's order (repeats kept), checked as NumPy checks them.

    Example:
        >>> transform_axes(3, None, None), transform_axes(3, (4, 4), None), transform_axes(3, None, (-1, 0))
        ([0, 1, 2], [1, 2], [2, 0])
    """
    if axes is None:
        axes = range(ndim) if s is None else range(-len(s), 0)
    return [axis_index(a, ndim, "axes") for a in axes]


def _transform_rule(func: Callable[..., Any], one_dim: bool) -> OpRule:
    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        (spec,) = specs
        kwargs = _options(func, key)
        if one_dim:
            core = [axis_index(kwargs["axis"], spec.ndim, "axis")]
            shifted = {**kwargs, "axis": core[0] + 1}
        else:
            core = transform_axes(spec.ndim, kwargs["s"], kwargs["axes"])
            shifted = {**kwargs, "axes": tuple(a + 1 for a in core)}
        metas, _ = numpy_outputs(lambda x: func(x, **shifted), [empty_batch(spec)])
        return whole_decision(spec, core, metas, lambda rank, x: func(x, **kwargs), linear=True)

    return OpRule(func.__name__, signature_binder(func, "numpy.fft"), decide)


for _func in TRANSFORMS_1D:
    register(_func)(_transform_rule(_func, True))
for _func in TRANSFORMS_ND:
    register(_func)(_transform_rule(_func, False))


def _shift_rule(func: Callable[..., Any], sign: int) -> OpRule:
    """``fftshift`` (sign +1) or ``ifftshift`` (sign -1): ``np.roll`` by ``sign * (n // 2)`` along each axis."""

    def decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
        spec = single_sharding(specs[0])
        axes = dict(key)["axes"]
        if axes is None:
            dims = list(range(spec.ndim))
        elif isinstance(axes, (tuple, list)):
            dims = [axis_index(a, spec.ndim, "axes") for a in axes]
        else:
            dims = [axis_index(axes, spec.ndim, "axes")]
        shifts: dict[int, int] = {}
        for d in dims:
            shifts[d] = shifts.get(d, 0) + sign * (spec.shape[d] // 2)
        return roll_decision(spec, shifts)

    return OpRule(func.__name__, signature_binder(func, "numpy.fft"), decide)


register(np.fft.fftshift)(_shift_rule(np.fft.fftshift, 1))
register(np.fft.ifftshift)(_shift_rule(np.fft.ifftshift, -1))
