"""Builds dtensor_np (its metadata is in setup.cfg), compiling dtensor_np.native.COMPILED with mypyc where it can.

The compiled modules are optional: without mypy or a C compiler, with a type
error mypyc refuses, or with ``DTENSOR_NP_PURE=1``, the install is pure
Python and plans the same steps, more slowly (dtensor_np/native.py).  Each
module is compiled from a staged copy of the sources with ``SOURCE_SHA256``
(the hash of its ``.py``) appended, which dtensor_np.native checks at import.
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
STAGE = Path("build", "mypyc_src")  # relative: setuptools runs this from HERE and wants relative sources


def compiled_modules() -> tuple[str, ...]:
    """dtensor_np.native.COMPILED, read from its source (the package is not importable at build time)."""
    tree = ast.parse((HERE / "dtensor_np" / "native.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMPILED" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("expected COMPILED = (...) in dtensor_np/native.py, got none")


def staged_sources(modules: tuple[str, ...]) -> list[str]:
    """The packages copied to STAGE (mypy reads the modules they import), each compiled module with
    its source hash appended; the paths of the compiled modules' copies."""
    os.chdir(HERE)
    shutil.rmtree(STAGE, ignore_errors=True)
    for package in ("dtensor_np", "collectives"):
        shutil.copytree(HERE / package, STAGE / package, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    paths = []
    for name in modules:
        relative = Path(*name.split(".")).with_suffix(".py")
        source = (HERE / relative).read_bytes()
        digest = hashlib.sha256(source).hexdigest()
        (STAGE / relative).write_bytes(
            source + f'\n\nSOURCE_SHA256 = "{digest}"  # appended by setup.py: the source this build compiled\n'.encode())
        paths.append(str(STAGE / relative))
    return paths


def native_extensions() -> list:
    if os.environ.get("DTENSOR_NP_PURE", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("dtensor_np: mypy is not installed; building pure Python", file=sys.stderr)
        return []
    try:
        # the modules it does not compile are read for their types only (their errors are not this build's)
        options = ["--follow-imports=silent", "--ignore-missing-imports"]
        extensions = mypycify(options + staged_sources(compiled_modules()), opt_level="3",
                              target_dir=str(Path("build", "mypyc")))
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error it cannot compile
        print(f"dtensor_np: not compiled ({exc!r}); building pure Python", file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # no C compiler: pure Python
    return extensions


setup(ext_modules=native_extensions())
