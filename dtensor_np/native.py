"""The modules that may run compiled, and the guard that keeps a stale build out.

``setup.py`` compiles the modules of :data:`COMPILED` when it can (a C
compiler, and Cython and mypy, fetched for the build; ``DTENSOR_NP_PURE=1``
turns it off): the planner's search, :mod:`dtensor_np.plan_core`, with Cython
(:data:`CYTHON`: its pure-Python mode, the C types in ``plan_core.pxd``), and
its graph, problem, rewrites and driver with mypyc (:data:`MYPYC`).  Each is one
text that runs as Python too; a build plans the same steps from the same budgets
(counted in moves, not time), only faster: about 30 times on 5 and 6 mesh dims
(benchmarks/README.md).  Without a build, the sources run.

Each build appends ``SOURCE_SHA256``, the hash of the source it compiled
(:func:`source_hash`: plan_core's ``.py`` and ``.pxd``; for the modules of
:data:`MYPYC`, all of theirs, since they call each other's compiled code
directly), to the module.  :func:`load` keeps a compiled module only while
that hash matches the sources beside it: after an edit (an editable install is
not rebuilt by editing), or with a build that does not import, the source runs
and a ``RuntimeWarning`` (on every rank) says to rebuild with ``pip install -e
.``.  ``dtensor_np/__init__.py`` calls it before anything imports these modules.
:func:`status` says what ran; :func:`twin` runs the source beside a build (for
what the build cannot hold).

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

__all__ = ["COMPILED", "CYTHON", "MYPYC", "PURE_ENV", "load", "load_source", "load_sources", "pure_requested",
           "source_hash", "status", "twin"]

# The modules setup.py compiles (it reads these tuples): with Cython, and with mypyc (together, one build).
CYTHON = ("dtensor_np.plan_core",)
MYPYC = ("dtensor_np.plan_graph", "dtensor_np.plan_problem", "dtensor_np.plan_rewrites", "dtensor_np.plan_search")
# All of them, each before the modules that import it (the order load() runs in).
COMPILED = ("dtensor_np.plan_graph", "dtensor_np.plan_core", "dtensor_np.plan_problem", "dtensor_np.plan_rewrites",
            "dtensor_np.plan_search")
# Set to 1: always the source, even where a fresh build exists.
PURE_ENV = "DTENSOR_NP_PURE"

_status: dict[str, str] = {}


def pure_requested() -> bool:
    """Whether :data:`PURE_ENV` asks for the sources (set, and not ``0``)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_hash(name: str) -> str:
    """The SHA-256 of module ``name``'s source, as setup.py appends it to the module it compiles: the bytes
    of its ``.py`` and of the ``.pxd`` beside it, if any (its C types); for a module of :data:`MYPYC`,
    those of every module of :data:`MYPYC`, in order (one build: a stale one runs all from source).

    Example:
        >>> len(source_hash("dtensor_np.plan_core")), source_hash("dtensor_np.plan_graph") == source_hash(MYPYC[-1])
        (64, True)
    """
    parts = []
    for member in MYPYC if name in MYPYC else (name,):
        path = Path(__file__).parent / (member.rpartition(".")[2] + ".py")
        parts += [path, path.with_suffix(".pxd")]
    return hashlib.sha256(b"".join(path.read_bytes() for path in parts if path.exists())).hexdigest()


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


def load_sources(names: tuple[str, ...]) -> dict[str, ModuleType]:
    """The modules ``names`` (in the order they import each other) run from their ``.py`` files, each
    importing the others' sources, not their builds: a second copy of them, beside the modules the
    package runs, which sys.modules and the package keep (for comparing builds with their sources).

    Example:
        >>> import dtensor_np
        >>> copies = load_sources(("dtensor_np.plan_graph", "dtensor_np.plan_search"))
        >>> copies["dtensor_np.plan_search"].search_state.__module__, copies["dtensor_np.plan_graph"].__file__[-3:]
        ('dtensor_np.plan_graph', '.py')
    """
    kept = {name: (sys.modules.get(name), getattr(sys.modules[name.rpartition(".")[0]], name.rpartition(".")[2], None))
            for name in names}
    copies = {}
    try:
        for name in names:
            source = _located(name)[1]
            sys.modules.pop(name, None)
            copies[name] = _exec_source(name, source)
    finally:
        for name, (module, attribute) in kept.items():
            package, _, base = name.rpartition(".")
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
            if attribute is None:
                sys.modules[package].__dict__.pop(base, None)
            else:
                setattr(sys.modules[package], base, attribute)
    return copies


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
    module = _fresh_build(name)
    if module is not None:
        _status[name] = "compiled"
        return module
    sys.modules.pop(name, None)
    _status[name] = "source (stale build)"
    _warn_stale(name, origin, source)
    return _exec_source(name, source)


def _fresh_build(name: str) -> ModuleType | None:
    """The build of ``name`` if it imports and was built from the sources beside it (its ``SOURCE_SHA256``),
    else None."""
    try:
        module = importlib.import_module(name)
        return module if getattr(module, "SOURCE_SHA256", None) == source_hash(name) else None
    except Exception:  # a stale build may not even import against today's sources
        return None


def _warn_stale(name: str, origin: str, source: Path) -> None:
    warnings.warn(f"{name}: the compiled build ({Path(origin).name}) was not built from this {source.name} "
                  f"(or does not import); running the source, slower, until it is rebuilt (pip install -e .)",
                  RuntimeWarning, stacklevel=3)


def twin(name: str) -> ModuleType:
    """Module ``name`` (of :data:`COMPILED`) run from its source beside its build, as
    ``<package>._<module>_source``, loaded once; ``name`` itself where that runs from its source.  The
    same text as the build, for what the build cannot hold (plan_core's fixed sizes).

    Example:
        >>> import dtensor_np
        >>> twin("dtensor_np.plan_core").__file__.endswith("plan_core.py")
        True
    """
    module = importlib.import_module(name)
    if getattr(module, "__file__", "").endswith(".py"):
        return module
    package, _, base = name.rpartition(".")
    as_name = f"{package}._{base}_source"
    return sys.modules.get(as_name) or load_source(name, as_name)


def status() -> dict[str, str]:
    """For each module of :data:`COMPILED`: ``"compiled"``, ``"source"`` (no build),
    ``"source (stale build)"`` or ``"source (DTENSOR_NP_PURE)"``.

    Example:
        >>> import dtensor_np
        >>> sorted(status())
        ['dtensor_np.plan_core', 'dtensor_np.plan_graph', 'dtensor_np.plan_problem', 'dtensor_np.plan_rewrites', 'dtensor_np.plan_search']
    """
    return {name: _status.get(name, "not imported") for name in COMPILED}
