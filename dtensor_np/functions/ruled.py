"""How to call every NumPy callable that has a sharding rule (``dtensor_np.propagation``): their catalogue cases.

The rules themselves live in :mod:`dtensor_np.propagation`; this module only
says how to call each registered callable on an array, for the comparison
table and ``tests/test_numpy_api.py`` (:mod:`dtensor_np.numpy_catalogue`).
Every ufunc gets an elementwise case (its operands all the input array, in the
first dtype among float64, int64 and bool it takes); the other callables are
listed by hand in :data:`CASES`, with the dim each works along.

Example:
    >>> import numpy as np
    >>> CASES["numpy.cumsum"].axis, CASES["numpy.add"].call(np.ones(2)).tolist()
    (0, [2.0, 2.0])
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..numpy_catalogue import Case
from ..propagation.registry import registered_callables

__all__ = ["CASES", "ufunc_case"]


def _spd(shape: tuple[int, ...]) -> np.ndarray:
    """A batch of symmetric positive definite matrices (distinct entries)."""
    n = shape[-1]
    base = np.arange(int(np.prod(shape)), dtype=float).reshape(shape) / 100.0
    return base + base.swapaxes(-1, -2) + n * np.eye(n)


def ufunc_case(f: np.ufunc) -> Optional[Case]:
    """Elementwise: every operand is the input; the first dtype (float64, int64, bool) ``f`` takes."""
    for dtype in ("float64", "int64", "bool"):
        try:
            with np.errstate(all="ignore"):
                f(*[np.ones((1,), dtype)] * f.nin)
        except TypeError:
            continue
        return Case(lambda x, f=f: f(*[x] * f.nin), dtype=dtype, tolerance=4.0)
    return None  # datetime only (isnat): refused in functions.host


def _first(result: Any) -> Any:
    return result[0] if isinstance(result, tuple) else result


_BATCH = dict(shape=(3, 4, 4), untouched=0, axis=1, data=_spd, tolerance=64.0)
_CONTRACT = dict(untouched=0, axis=1, tolerance=16.0)
_ALONG0 = dict(untouched=1, axis=0)


def _cases() -> dict[str, Case]:
    c: dict[str, Case] = {}
    for name in ("sum", "mean", "prod", "max", "min", "amax", "amin", "any", "all"):
        c[f"numpy.{name}"] = Case(lambda x, f=getattr(np, name): f(x, axis=0), **_ALONG0, tolerance=8.0)
    c["numpy.matmul"] = Case(lambda x: np.matmul(x, np.ones((4, 3))), **_CONTRACT)
    c["numpy.linalg.matmul"] = Case(lambda x: np.linalg.matmul(x, np.ones((4, 3))), **_CONTRACT)
    c["numpy.dot"] = Case(lambda x: np.dot(x, np.ones((4, 3))), **_CONTRACT)
    c["numpy.tensordot"] = Case(lambda x: np.tensordot(x, np.ones((4, 3)), axes=1), **_CONTRACT)
    c["numpy.linalg.tensordot"] = Case(lambda x: np.linalg.tensordot(x, np.ones((4, 3)), axes=1), **_CONTRACT)
    c["numpy.einsum"] = Case(lambda x: np.einsum("ij,jk->ik", x, np.ones((4, 3))), **_CONTRACT)
    c["numpy.vecdot"] = Case(lambda x: np.vecdot(x, np.ones(4)), **_CONTRACT)
    c["numpy.linalg.vecdot"] = Case(lambda x: np.linalg.vecdot(x, np.ones(4)), **_CONTRACT)
    c["numpy.linalg.cross"] = Case(lambda x: np.linalg.cross(x, np.ones((5, 3))), shape=(5, 3), untouched=0, axis=1)
    c["numpy.outer"] = Case(lambda x: np.outer(x, np.ones(3)), shape=(5,), untouched=0)
    c["numpy.linalg.outer"] = Case(lambda x: np.linalg.outer(x, np.ones(3)), shape=(5,), untouched=0)
    c["numpy.linalg.trace"] = Case(lambda x: np.linalg.trace(x), **_BATCH)
    c["numpy.linalg.diagonal"] = Case(lambda x: np.linalg.diagonal(x), **_BATCH)
    c["numpy.concatenate"] = Case(lambda x: np.concatenate([x, x], axis=0), **_ALONG0)
    c["numpy.stack"] = Case(lambda x: np.stack([x, x]), untouched=0, axis=1)
    c["numpy.reshape"] = Case(lambda x: np.reshape(x, (5, 2, 2)), untouched=0, axis=1)
    c["numpy.ravel"] = Case(lambda x: np.ravel(x), untouched=None, axis=1)
    for name in ("transpose", "matrix_transpose", "swapaxes", "moveaxis"):
        call = {"transpose": lambda x: np.transpose(x), "matrix_transpose": lambda x: np.matrix_transpose(x),
                "swapaxes": lambda x: np.swapaxes(x, 0, 1), "moveaxis": lambda x: np.moveaxis(x, 0, 1)}[name]
        c[f"numpy.{name}"] = Case(call, untouched=0, axis=1)
    c["numpy.linalg.matrix_transpose"] = Case(lambda x: np.linalg.matrix_transpose(x), untouched=0, axis=1)
    c["numpy.expand_dims"] = Case(lambda x: np.expand_dims(x, 0))
    c["numpy.squeeze"] = Case(lambda x: np.squeeze(x, axis=1), shape=(5, 1, 4), untouched=0, axis=2)
    c["numpy.where"] = Case(lambda x: np.where(x > 2, x, -x))
    c["numpy.clip"] = Case(lambda x: np.clip(x, 0.5, 2.0))
    for name in ("round", "around"):
        c[f"numpy.{name}"] = Case(lambda x, f=getattr(np, name): f(x * 3.3, 1))
    c["numpy.real"] = Case(lambda x: np.real(x), dtype="complex128")
    c["numpy.imag"] = Case(lambda x: np.imag(x), dtype="complex128")
    c["numpy.astype"] = Case(lambda x: np.astype(x, np.float32))
    for name in ("empty_like", "zeros_like", "ones_like"):
        c[f"numpy.{name}"] = Case(lambda x, f=getattr(np, name), shape_only=name == "empty_like":
                                  f(x).shape if shape_only else f(x))
    c["numpy.full_like"] = Case(lambda x: np.full_like(x, 2.0))
    for name in ("cholesky", "det", "eigh", "eigvalsh", "inv", "matrix_norm", "matrix_rank", "pinv", "qr",
                 "svdvals"):
        c[f"numpy.linalg.{name}"] = Case(lambda x, f=getattr(np.linalg, name): _abs_factors(f(x)), **_BATCH)
    c["numpy.linalg.svd"] = Case(lambda x: _svd_product(np.linalg.svd(x)), **_BATCH)
    c["numpy.linalg.slogdet"] = Case(lambda x: tuple(np.linalg.slogdet(x)), **_BATCH)
    c["numpy.linalg.matrix_power"] = Case(lambda x: np.linalg.matrix_power(x, 2), **_BATCH)
    c["numpy.linalg.solve"] = Case(lambda x: np.linalg.solve(x, np.ones((3, 4, 1))), **_BATCH)
    c["numpy.linalg.vector_norm"] = Case(lambda x: np.linalg.vector_norm(x, axis=-1), untouched=0, axis=1,
                                         tolerance=8.0)
    for name in ("cumsum", "cumprod", "cumulative_sum", "cumulative_prod", "var", "std", "argmax", "argmin",
                 "sort", "argsort", "flip"):
        c[f"numpy.{name}"] = Case(lambda x, f=getattr(np, name): f(x, axis=0), **_ALONG0, tolerance=16.0)
    for name in ("unique", "unique_values", "unique_all", "unique_counts", "unique_inverse"):
        c[f"numpy.{name}"] = Case(lambda x, f=getattr(np, name): _sorted_unique(f, x), untouched=None, axis=0,
                                  data=lambda shape: np.arange(int(np.prod(shape))).reshape(shape) % 7)
    c["numpy.roll"] = Case(lambda x: np.roll(x, 1, axis=0), **_ALONG0)
    c["numpy.searchsorted"] = Case(lambda x: np.searchsorted(np.arange(4.0), x))
    for name in ("nonzero", "flatnonzero", "argwhere"):
        c[f"numpy.{name}"] = Case(lambda x, f=getattr(np, name): f(x > 2), untouched=None, axis=0)
    c["numpy.tril"] = Case(lambda x: np.tril(x))
    c["numpy.triu"] = Case(lambda x: np.triu(x, 1))
    c["numpy.broadcast_to"] = Case(lambda x: np.broadcast_to(x, (2, 5, 4)))
    c["numpy.broadcast_arrays"] = Case(lambda x: np.broadcast_arrays(x, np.ones((1, 4)))[1])
    c["numpy.meshgrid"] = Case(lambda x: tuple(np.meshgrid(x, x)), shape=(5,), untouched=None)
    c["numpy.repeat"] = Case(lambda x: np.repeat(x, 2, axis=0), **_ALONG0)
    c["numpy.tile"] = Case(lambda x: np.tile(x, (2, 1)), **_ALONG0)
    c["numpy.unstack"] = Case(lambda x: np.unstack(x, axis=0), **_ALONG0)
    c["numpy.take"] = Case(lambda x: np.take(x, [0, 3], axis=0), **_ALONG0)
    c["numpy.take_along_axis"] = Case(lambda x: np.take_along_axis(x, np.zeros((5, 4), dtype=np.int64), axis=0),
                                      **_ALONG0)
    c["numpy.packbits"] = Case(lambda x: np.packbits(x > 2, axis=1, bitorder="little"), axis=1)
    c["numpy.packbits: axis=None"] = Case(lambda x: np.packbits(x > 2), untouched=None, axis=0)
    c["numpy.unpackbits"] = Case(lambda x: np.unpackbits(x, axis=1, count=-3), dtype="uint8", axis=1)
    for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        c[f"numpy.fft.{name}"] = Case(lambda x, f=getattr(np.fft, name): f(x, axis=-1), untouched=0, axis=1,
                                      tolerance=64.0)
    for name in ("fftshift", "ifftshift"):
        c[f"numpy.fft.{name}"] = Case(lambda x, f=getattr(np.fft, name): f(x, axes=-1), untouched=0, axis=1)
    for name in ("fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"):
        c[f"numpy.fft.{name}"] = Case(lambda x, f=getattr(np.fft, name): f(x, axes=(-2, -1)), shape=(3, 5, 4),
                                      untouched=0, axis=1, tolerance=64.0)
    return c


def _abs_factors(result: Any) -> Any:
    """Factors whose signs NumPy leaves open (eigenvectors, Q and U of a QR or an SVD) compared by magnitude."""
    if isinstance(result, tuple):
        return tuple(np.abs(r) if getattr(r, "ndim", 0) >= 2 else r for r in result)
    return result


def _svd_product(result: Any) -> tuple[Any, Any]:
    """``S`` and ``U S Vh``: these matrices have repeated singular values, whose vectors NumPy leaves open."""
    u, s, vh = result
    return s, (u * s[..., None, :]) @ vh


def _sorted_unique(f: Callable[..., Any], x: Any) -> Any:
    result = f(x)
    return tuple(result) if isinstance(result, tuple) else result


def _ruled_names() -> set[str]:
    """The qualified names of the NumPy callables with a rule."""
    names = set()
    for f in registered_callables():
        module = getattr(f, "__module__", None) or "numpy"
        prefix = "numpy.linalg" if "linalg" in module else "numpy.fft" if "fft" in module else "numpy"
        names.add(f"{prefix}.{f.__name__}")
    return names


def _registered_cases() -> dict[str, Case]:
    """A case for every registered callable: the hand-written ones, and an elementwise one per ufunc."""
    ruled = _ruled_names()
    cases: dict[str, Optional[Case]] = {}
    for name, case in _cases().items():
        plain = name.partition(":")[0]
        if plain in ruled:
            # numpy.linalg's and numpy.fft's own families (linalg_extra, fourier) hold their names' cases: these
            # run as more ways to call them
            other_family = plain.startswith(("numpy.linalg.", "numpy.fft.")) and ":" not in name
            cases[f"{name}: along the last axes" if other_family else name] = case
    for f in registered_callables():
        if isinstance(f, np.ufunc):
            cases.setdefault(f"numpy.{f.__name__}", ufunc_case(f))
    return {name: case for name, case in cases.items() if case is not None}


CASES: dict[str, Case] = _registered_cases()
