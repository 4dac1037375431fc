"""Builds dtensor_np (its metadata is in setup.cfg), compiling dtensor_np.native.COMPILED with mypyc and
dtensor_np.native.CORES with Cython where it can.

The compiled modules are optional: without a C compiler, with a type error
mypyc refuses, with ``DTENSOR_NP_PURE=1``, or without mypy (a build
requirement in pyproject.toml: only a ``--no-build-isolation`` install can
lack it; Cython likewise, for the cores), the install is pure Python and plans the same steps, more slowly
(dtensor_np/native.py), and a build that an earlier install left in the tree
is removed.  Each module is compiled from a staged copy of the sources with
``SOURCE_SHA256`` (the hash of its ``.py``) appended, which dtensor_np.native
checks at import.  Only commands that build run mypyc, not pip's metadata
steps.
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
STAGE = Path("build", "mypyc_src")
TARGET = Path("build", "mypyc")
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install", "bdist_egg"}
# The compiled searches must do each float operation as Python does, one rounding each: no fused
# multiply-add (GCC and clang contract a * b + c into one where the target has FMA: aarch64, or
# -march=native on x86), else a bound differs in its last bit, and with it the plan a rank finds.
EXACT_FLOATS = [] if sys.platform == "win32" else ["-ffp-contract=off"]


def compiled_modules(name: str = "COMPILED") -> tuple[str, ...]:
    """dtensor_np.native.COMPILED (or CORES), read from its source (the package is not importable at
    build time)."""
    tree = ast.parse((HERE / "dtensor_np" / "native.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError(f"expected {name} = (...) in dtensor_np/native.py, got none")


def staged_sources(modules: tuple[str, ...], suffix: str = ".py") -> list[str]:
    """The packages copied to STAGE (mypy reads the modules they import), each compiled module with
    its source hash appended; the paths of the compiled modules' copies (``suffix``: ``.pyx`` for
    the Cython cores)."""
    if suffix == ".py":
        shutil.rmtree(STAGE, ignore_errors=True)
        for package in ("dtensor_np", "collectives"):
            shutil.copytree(HERE / package, STAGE / package,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "*.c"))
    paths = []
    for name in modules:
        relative = Path(*name.split(".")).with_suffix(suffix)
        source = (HERE / relative).read_bytes()
        digest = hashlib.sha256(source).hexdigest()
        (STAGE / relative).parent.mkdir(parents=True, exist_ok=True)
        (STAGE / relative).write_bytes(
            source + f'\n\nSOURCE_SHA256 = "{digest}"  # appended by setup.py: the source this build compiled\n'.encode())
        paths.append(str(STAGE / relative))
    return paths


def core_extensions(modules: tuple[str, ...]) -> list:
    """The Cython extensions of dtensor_np.native.CORES (optional: no C compiler, no extension; their
    users then search in Python), or none, with the reason on stderr."""
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError:
        return pure(modules, "Cython is not installed")
    try:
        paths = staged_sources(modules, ".pyx")
        extensions = cythonize([Extension(name, [path]) for name, path in zip(modules, paths)],
                               compiler_directives={"language_level": 3}, quiet=True)
    except (Exception, SystemExit) as exc:
        return pure(modules, f"Cython failed ({exc!r})")
    return optional(extensions)


def remove_builds(modules: tuple[str, ...]) -> None:
    """Deletes the in-tree builds of ``modules`` (an editable install's), so the source runs."""
    for name in modules:
        package, _, base = name.rpartition(".")
        folder = HERE / Path(*package.split("."))
        for pattern in (f"{base}.*.so", f"{base}__mypyc.*.so", f"{base}.*.pyd", f"{base}__mypyc.*.pyd"):
            for built in folder.glob(pattern):
                print(f"dtensor_np: removing {built.name}, built before", file=sys.stderr)
                built.unlink()


def pure(modules: tuple[str, ...], why: str) -> list:
    print(f"dtensor_np: {why}; building pure Python", file=sys.stderr)
    remove_builds(modules)
    return []


def native_extensions() -> list:
    """The mypyc extensions of dtensor_np.native.COMPILED (optional: no C compiler, no extension),
    or none, with the reason on stderr."""
    if not BUILDS & set(sys.argv[1:]):  # metadata only (pip's egg_info, dist_info)
        return []
    os.chdir(HERE)
    modules, cores = compiled_modules(), compiled_modules("CORES")
    if os.environ.get("DTENSOR_NP_PURE", "") not in ("", "0"):  # dtensor_np.native.PURE_ENV
        return pure(modules + cores, "DTENSOR_NP_PURE is set")
    return mypyc_extensions(modules) + core_extensions(cores)


def mypyc_extensions(modules: tuple[str, ...]) -> list:
    """The mypyc extensions of dtensor_np.native.COMPILED, or none, with the reason on stderr."""
    try:
        from mypyc.build import mypycify
    except ImportError:
        return pure(modules, "mypy is not installed")
    try:
        # the modules it does not compile are read for their types only (their errors are not this build's)
        options = ["--follow-imports=silent", "--ignore-missing-imports"]
        extensions = mypycify(options + staged_sources(modules), opt_level="3", target_dir=str(TARGET))
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error it cannot compile
        return pure(modules, f"mypyc failed ({exc!r})")
    return optional(extensions)


def optional(extensions: list) -> list:
    """``extensions`` made optional (no C compiler: pure Python) and compiled with EXACT_FLOATS."""
    for extension in extensions:
        extension.optional = True
        extension.extra_compile_args += EXACT_FLOATS
    return extensions


setup(ext_modules=native_extensions())
