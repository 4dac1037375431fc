"""NumPy functions that are compositions of others, each registered with
:func:`dtensor_np.propagation.registry.register_composite`, one module per family.

A composite calls only NumPy functions and array methods on its arguments, so it
runs on DTensors (every call through its own sharding rule: its collectives are
those of the calls it is made of, which its docstring names) and on the tracer's
arrays alike.  Each module lists how to call its functions in ``CASES`` (see
:mod:`dtensor_np.numpy_catalogue`), from which the documentation's comparison
table and ``tests/test_numpy_api.py`` are made.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(6.0).reshape(2, 3), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> np.hstack([x, x]).shape
    (2, 6)
"""

from typing import Any, Iterator

import numpy as np

from ..numpy_catalogue import Case, Entry, numpy_names
from ..propagation.registry import register_refusal
from . import differences, elementwise, fourier, host, joining, linalg_extra, metadata, ndarray_methods, polynomials
from . import predicates, printing, products, reshaping, ruled, selecting, statistics, viewing

__all__ = ["FAMILIES", "catalogue", "catalogue_cases", "differences", "elementwise", "fourier", "host", "joining",
           "linalg_extra", "metadata", "ndarray_methods", "polynomials", "predicates", "printing", "products",
           "reshaping", "ruled", "selecting", "statistics", "viewing"]

FAMILIES = {"differences": differences, "elementwise": elementwise, "fourier": fourier, "host": host,
            "joining": joining, "linalg_extra": linalg_extra, "metadata": metadata, "ndarray_methods": ndarray_methods,
            "polynomials": polynomials, "predicates": predicates, "printing": printing, "products": products,
            "reshaping": reshaping, "ruled": ruled, "selecting": selecting, "statistics": statistics,
            "viewing": viewing}
"""The modules of composites, by name: each registers its functions and lists their cases in ``CASES``."""


def _register_refusals() -> None:
    """Each refused name's reason, for its error (:func:`~dtensor_np.propagation.registry.register_refusal`)."""
    for module in FAMILIES.values():
        for name, refused in getattr(module, "REFUSED", {}).items():
            func = _resolve(name)
            if callable(func) and not name.startswith("ndarray."):
                register_refusal(func, refused.reason)


def catalogue_cases() -> Iterator[tuple[str, str, Case]]:
    """``(family, qualified name, case)`` for every case of every family, in a fixed order.

    Example:
        >>> ("joining", "numpy.hstack") in {(f, n) for f, n, _ in catalogue_cases()}
        True
    """
    for family, module in sorted(FAMILIES.items()):
        for name, case in sorted(getattr(module, "CASES", {}).items()):
            yield family, name, case


def _resolve(name: str) -> Any:
    """The object a qualified name (``numpy.abs``, ``numpy.linalg.norm``, ``ndarray.sum``) stands for."""
    owner, _, attr = name.rpartition(".")
    module = {"numpy": np, "numpy.linalg": np.linalg, "numpy.fft": np.fft, "ndarray": np.ndarray}.get(owner)
    return getattr(module, attr, None) if module is not None else None


def catalogue() -> dict[str, Entry]:
    """Every name of :func:`~dtensor_np.numpy_catalogue.numpy_names` that the families cover or refuse, with
    its entry; an alias (``numpy.abs`` is ``numpy.absolute``, ``numpy.concat`` is ``numpy.concatenate``)
    shares the entry of the name it stands for.

    Example:
        >>> entries = catalogue()
        >>> entries["numpy.abs"] is entries["numpy.absolute"]
        True
    """
    entries: dict[str, Entry] = {}
    for module in FAMILIES.values():
        entries.update(getattr(module, "CASES", {}))
        entries.update(getattr(module, "REFUSED", {}))
    by_object = {}
    for name, entry in entries.items():
        obj = _resolve(name)
        if obj is not None:
            by_object.setdefault(id(obj), entry)
    for name in numpy_names():
        if name not in entries:
            entry = by_object.get(id(_resolve(name)))
            if entry is not None:
                entries[name] = entry
    return entries


_register_refusals()
