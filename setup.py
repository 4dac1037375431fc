"""Builds dtensor_np (its metadata is in setup.cfg), compiling the planner where it can: dtensor_np.native.CYTHON
with Cython, dtensor_np.native.MYPYC with mypyc.

The compiled modules are optional: without a C compiler, with ``DTENSOR_NP_PURE=1``,
with a type error mypyc refuses, or without Cython or mypy (build requirements in
pyproject.toml: only a ``--no-build-isolation`` install can lack them), the
install is pure Python (that compiler's modules, or all) and plans the same
steps, more slowly (dtensor_np/native.py), and a build that an earlier install
left in the tree is removed.  Each module is compiled from a staged copy of its
``.py`` (plan_core's ``.pxd``, its C types, beside it) with ``SOURCE_SHA256``
(dtensor_np.native.source_hash) appended, which dtensor_np.native checks at
import.  Only commands that build run the compilers, not pip's metadata steps.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
# relative paths: setuptools wants an extension's sources relative to setup.py's directory
STAGE = Path("build", "planner_src")
TARGET = Path("build", "mypyc")
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install", "bdist_egg"}
# The compiled search must do each float operation as Python does, one rounding each: no fused
# multiply-add (GCC and clang contract a * b + c into one where the target has FMA: aarch64, or
# -march=native on x86), else a bound differs in its last bit, and with it the plan a rank finds.
EXACT_FLOATS = [] if sys.platform == "win32" else ["-ffp-contract=off"]
# plan_core's C types are in its .pxd, never inferred from its annotations (Cython would check an
# ``int`` argument's exact type, and make a ``float`` a C double).
CYTHON_DIRECTIVES = {"language_level": 3, "annotation_typing": False}
# The name of mypyc's shared library of MYPYC (dtensor_np/planner__mypyc.*.so, the modules' own builds
# beside it importing it).
GROUP = "dtensor_np.planner"


def listed(name: str) -> tuple[str, ...]:
    """dtensor_np.native's tuple ``name`` (CYTHON, MYPYC), read from its source (the package is not
    importable at build time)."""
    tree = ast.parse((HERE / "dtensor_np" / "native.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError(f"expected {name} = (...) in dtensor_np/native.py, got none")


def source(name: str) -> Path:
    return Path(*name.split(".")).with_suffix(".py")


def staged_sources(modules: tuple[str, ...], group: tuple[str, ...] = ()) -> list[str]:
    """Each module's ``.py`` in STAGE (where the packages are copied: mypy reads what they import, Cython
    the ``.pxd`` beside a ``.py``) with its source hash appended (dtensor_np.native.source_hash: its
    ``.py``'s bytes, then its ``.pxd``'s; with ``group``, those of every module of the group); the paths
    of the copies."""
    paths = []
    for name in modules:
        hashed = []
        for member in group or (name,):
            hashed += [HERE / source(member), (HERE / source(member)).with_suffix(".pxd")]
        digest = hashlib.sha256(b"".join(path.read_bytes() for path in hashed if path.exists())).hexdigest()
        (STAGE / source(name)).write_bytes((HERE / source(name)).read_bytes() + (
            f'\n\nSOURCE_SHA256 = "{digest}"  # appended by setup.py: the source this build compiled\n'.encode()))
        paths.append(str(STAGE / source(name)))
    return paths


def remove_builds(modules: tuple[str, ...]) -> None:
    """Deletes the in-tree builds of ``modules`` (an editable install's), so the sources run."""
    for name in modules + ((f"{GROUP}__mypyc",) if set(modules) & set(listed("MYPYC")) else ()):
        package, _, base = name.rpartition(".")
        folder = HERE / Path(*package.split("."))
        for pattern in (f"{base}.*.so", f"{base}.*.pyd"):
            for built in folder.glob(pattern):
                print(f"dtensor_np: removing {built.name}, built before", file=sys.stderr)
                built.unlink()


def pure(modules: tuple[str, ...], why: str) -> list:
    print(f"dtensor_np: {why}; building pure Python", file=sys.stderr)
    remove_builds(modules)
    return []


def cython_extensions(modules: tuple[str, ...]) -> list:
    """The Cython extensions of dtensor_np.native.CYTHON, or none, with the reason on stderr."""
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError:
        return pure(modules, "Cython is not installed")
    try:
        paths = staged_sources(modules)
        return cythonize([Extension(name, [path]) for name, path in zip(modules, paths)],
                         compiler_directives=CYTHON_DIRECTIVES, quiet=True)
    except (Exception, SystemExit) as exc:
        return pure(modules, f"Cython failed ({exc!r})")


def mypyc_extensions(modules: tuple[str, ...]) -> list:
    """The mypyc extensions of dtensor_np.native.MYPYC (one build: they call each other's compiled code), or
    none, with the reason on stderr."""
    try:
        from mypyc.build import mypycify
    except ImportError:
        return pure(modules, "mypy is not installed")
    try:
        # the modules it does not compile are read for their types only (their errors are not this build's)
        options = ["--follow-imports=silent", "--ignore-missing-imports"]
        return mypycify(options + staged_sources(modules, modules), opt_level="3", target_dir=str(TARGET),
                        group_name=GROUP)
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error it cannot compile
        return pure(modules, f"mypyc failed ({exc!r})")


def native_extensions() -> list:
    """The compiled modules (optional: no C compiler, no extension, that module runs from its source), or
    none, with the reason on stderr."""
    if not BUILDS & set(sys.argv[1:]):  # metadata only (pip's egg_info, dist_info)
        return []
    os.chdir(HERE)
    cython, mypyc = listed("CYTHON"), listed("MYPYC")
    if os.environ.get("DTENSOR_NP_PURE", "") not in ("", "0"):  # dtensor_np.native.PURE_ENV
        return pure(cython + mypyc, "DTENSOR_NP_PURE is set")
    shutil.rmtree(STAGE, ignore_errors=True)
    for package in ("dtensor_np", "collectives"):
        shutil.copytree(HERE / package, STAGE / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.pyc", "*.c"))
    extensions = cython_extensions(cython) + mypyc_extensions(mypyc)
    for extension in extensions:
        extension.optional = True
        extension.extra_compile_args += EXACT_FLOATS
    return extensions


setup(ext_modules=native_extensions())
