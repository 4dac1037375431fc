"""The modules that may run compiled (mypyc, Cython), and the guard that keeps a stale build out.

``setup.py`` compiles the modules in :data:`COMPILED` with mypyc and those in
:data:`CORES` with Cython when it can (mypy, Cython and a C compiler at install
time; ``DTENSOR_NP_PURE=1`` turns both off).  The mypyc module is the same
code, so it plans the same steps from the same budgets (counted in moves, not
time), only faster: about 4 times for :mod:`dtensor_np.plan_search`.  A core
(``dtensor_np/_search_core.pyx``: the planner's A* in C) is not importable
as Python: where it is not built, plan_search runs its own search, with the
same result, 9 to 12 times more slowly a move compiled by mypyc, 30 to 40
times from the source (benchmarks/README.md).  Without a build, the source
runs.

Each build appends ``SOURCE_SHA256``, the hash of the source it compiled, to
the module.  :func:`load` keeps a compiled module only while that hash matches
the ``.py`` beside it (:func:`load_core`: the ``.pyx``): after an edit (an
editable install is not rebuilt by editing), or with a build that does not
import, the source runs (the core is off) and a
``RuntimeWarning`` (on every rank) says to rebuild with ``pip install -e .``.
``dtensor_np/__init__.py`` calls it before anything imports these modules.
:func:`status` says what ran.

Example:
    >>> import dtensor_np
    >>> from dtensor_np import native
    >>> native.status()["dtensor_np.plan_search"] in ("compiled", "source", "source (stale build)",
    ...                                               "source (DTENSOR_NP_PURE)")
    True
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "CORES", "PURE_ENV", "load", "load_core", "load_source", "pure_requested", "source_hash",
           "status"]

# The modules setup.py compiles with mypyc (it reads this tuple).
COMPILED = ("dtensor_np.plan_search",)
# The modules setup.py compiles with Cython from their .pyx (it reads this tuple); loaded before COMPILED.
CORES = ("dtensor_np._search_core",)
# Set to 1: always the source, even where a fresh build exists.
PURE_ENV = "DTENSOR_NP_PURE"

_status: dict[str, str] = {}


def pure_requested() -> bool:
    """Whether :data:`PURE_ENV` asks for the sources (set, and not ``0``)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_hash(path: Path) -> str:
    """The SHA-256 of a source file's bytes, as setup.py appends it to the module it compiles."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _located(name: str) -> tuple[str, Path]:
    """Where module ``name`` would be imported from (its build, or its ``.py``), and its ``.py``."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"expected an importable module {name!r}, got none")
    return spec.origin, Path(spec.origin).with_name(name.rpartition(".")[2] + ".py")


def load_source(name: str, as_name: str | None = None) -> ModuleType:
    """Imports module ``name`` from its ``.py`` file, as ``as_name`` (default ``name``), into sys.modules.

    Under another name the module is a second copy (the compiled one's twin, for comparing them);
    it must live in the same package, whose relative imports it shares.
    """
    return _exec_source(as_name or name, _located(name)[1])


def _exec_source(as_name: str, path: Path) -> ModuleType:
    """The module at ``path`` executed as ``as_name``, in sys.modules and on its package."""
    source_spec = importlib.util.spec_from_file_location(as_name, path)
    assert source_spec is not None and source_spec.loader is not None
    module = importlib.util.module_from_spec(source_spec)
    sys.modules[as_name] = module
    try:
        source_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[as_name]
        raise
    package, _, attr = as_name.rpartition(".")
    if package in sys.modules:
        setattr(sys.modules[package], attr, module)
    return module


def load(name: str) -> ModuleType:
    """Imports ``name``: its compiled build if there is one and it was built from the source beside it,
    else the source."""
    if name in sys.modules:
        return sys.modules[name]
    origin, source = _located(name)
    if origin.endswith(".py"):
        _status[name] = "source"
        return importlib.import_module(name)
    if pure_requested():
        _status[name] = f"source ({PURE_ENV})"
        return _exec_source(name, source)
    module = _fresh_build(name, source)
    if module is not None:
        _status[name] = "compiled"
        return module
    sys.modules.pop(name, None)
    _status[name] = "source (stale build)"
    _warn_stale(name, origin, source, "running the source")
    return _exec_source(name, source)


def _fresh_build(name: str, source: Path) -> ModuleType | None:
    """The build of ``name`` if it imports and was built from ``source`` (its ``SOURCE_SHA256``), else None."""
    try:
        module = importlib.import_module(name)
        return module if getattr(module, "SOURCE_SHA256", None) == source_hash(source) else None
    except Exception:  # a stale build may not even import against today's sources
        return None


def _warn_stale(name: str, origin: str, source: Path, instead: str) -> None:
    warnings.warn(f"{name}: the compiled build ({Path(origin).name}) was not built from this {source.name} "
                  f"(or does not import); {instead}, slower, until it is rebuilt (pip install -e .)",
                  RuntimeWarning, stacklevel=3)


def load_core(name: str) -> ModuleType | None:
    """Imports the core ``name`` (:data:`CORES`) if it is built, from the ``.pyx`` beside it, and
    :data:`PURE_ENV` is unset; else None, and importing it raises ImportError (its user then runs
    its Python twin)."""
    if name in sys.modules:
        return sys.modules[name]
    source = Path(__file__).with_name(name.rpartition(".")[2] + ".pyx")
    spec = importlib.util.find_spec(name)
    if pure_requested():
        _status[name] = f"off ({PURE_ENV})"
    elif spec is None or spec.origin is None:
        _status[name] = "not built"
    else:
        module = _fresh_build(name, source)
        if module is not None:
            _status[name] = "compiled"
            return module
        _status[name] = "off (stale build)"
        _warn_stale(name, spec.origin, source, "searching in Python")
    sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ImportError
    return None


def status() -> dict[str, str]:
    """For each module of :data:`COMPILED`: ``"compiled"``, ``"source"`` (no build),
    ``"source (stale build)"`` or ``"source (DTENSOR_NP_PURE)"``; of :data:`CORES`: ``"compiled"``,
    ``"not built"``, ``"off (stale build)"`` or ``"off (DTENSOR_NP_PURE)"``.

    Example:
        >>> import dtensor_np
        >>> sorted(status())
        ['dtensor_np._search_core', 'dtensor_np.plan_search']
    """
    return {name: _status.get(name, "not imported") for name in CORES + COMPILED}
