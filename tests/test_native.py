"""The compiled planner (dtensor_np.native): the same plans as its sources, and never a stale build.

setup.py compiles the modules of ``native.COMPILED`` where it can, each from
its own ``.py``: the search (plan_core) with Cython, its C types from
plan_core.pxd; the graph, problem, rewrites and driver with mypyc, as one build
(they call each other's compiled code: an edit to one runs all four from their
sources).  Here: the compiled
modules plan exactly what their sources plan as Python (steps, cost, method and
work, so ranks with and without a build agree), on the benchmark's seeded
pairs, on hypothesis pairs and with Python subclasses of ``CostModel``; a build
that is older than its source (its ``.py`` or its ``.pxd``) is never run; the
modules' doctests run on their sources (pytest's doctest collection cannot
import a module whose build shadows its ``.py``, so setup.cfg leaves them out of
``--doctest-modules``).
"""

from __future__ import annotations

import doctest
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import dtensor_np as dt
from dtensor_np import native, plan_search, planner

from strategies import planner_benchmark, spec_pairs

ROOT = Path(__file__).resolve().parents[1]
NAME = "dtensor_np.plan_search"
CORE = "dtensor_np.plan_core"
EXPECT_BUILD = "DTENSOR_NP_EXPECT_BUILD"
STATE = native.status()[NAME]
compiled = pytest.mark.skipif(STATE != "compiled", reason=f"{NAME} runs from its {STATE}, not a build")


@pytest.fixture(scope="module")
def sources():
    """The compiled modules run from their .py files (importing each other's sources), beside the builds."""
    return native.load_sources(native.COMPILED)


@pytest.fixture(scope="module")
def source(sources):
    """plan_search run from its .py, on the other modules' sources."""
    return sources[NAME]


def search(module, src, dst, model):
    """``module.search_path`` for a spec pair as the planner calls it: (path, cost, method, work) or the error."""
    start, goal = module.search_state(src), module.search_state(dst)
    bound = planner.greedy_collectives(src, dst)
    greedy = None
    if bound is not None:
        greedy = module.greedy_path(start, goal, src.mesh.shape, planner.plan_greedy(src, dst))
    try:
        result = module.search_path(start, goal, src.mesh.shape, src.ndim, planner._nbytes(src), model, bound, greedy)
    except ValueError as error:
        return str(error)
    return result.path, result.cost, result.method, result.work


class SteepCostModel(dt.CostModel):
    """A model the lower bound does not hold for: the search runs without it."""

    __slots__ = ()

    def collective(self, group_size: int, bytes_moved: float) -> float:
        return 3.0 + (bytes_moved / 4000.0) ** 1.2


class Float32CostModel(dt.CostModel):
    """A model in NumPy's float32: the searches add its costs as Python floats, compiled or not."""

    __slots__ = ()

    def collective(self, group_size: int, bytes_moved: float) -> float:
        return np.float32(self.latency_us) + np.float32(bytes_moved) / np.float32(self.bytes_per_us)


@pytest.mark.skipif(not os.environ.get(EXPECT_BUILD), reason=f"{EXPECT_BUILD} is not set (.ci/run sets it)")
def test_the_install_compiled_the_search():
    """Where the install must compile (CI: a C compiler, Python's headers), the package runs the builds:
    a failed build would otherwise leave every test on the sources, unnoticed."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    assert shutil.which(compiler) and Path(sysconfig.get_paths()["include"], "Python.h").exists(), (
        f"expected a C compiler ({compiler}) and Python.h where {EXPECT_BUILD} is set, got none")
    assert not native.pure_requested(), f"expected {native.PURE_ENV} unset where {EXPECT_BUILD} is set"
    assert native.status() == {name: "compiled" for name in native.COMPILED}, (
        f"expected every module compiled by `pip install -e .` (setup.py: Cython, mypyc), got {native.status()}")


@compiled
def test_the_sources_are_python_beside_the_builds(sources):
    for name, module in sources.items():
        assert module.__file__.endswith(".py") and sys.modules[name] is not module
        assert sys.modules[name].__file__.endswith(sysconfig.get_config_var("EXT_SUFFIX"))
    assert sources[NAME].Problem is sources["dtensor_np.plan_problem"].Problem
    assert sources["dtensor_np.plan_problem"].plan_core is sources[CORE]


@compiled
def test_the_build_plans_as_the_source_on_the_benchmark_pairs(source):
    bench = planner_benchmark()
    pairs, mixed_pairs = bench.pairs, bench.mixed_pairs
    model = dt.CostModel()
    checked = 0
    for seed in range(4):
        for mesh in [(2, 2, 2), (4, 4, 4, 4), (2, 2, 2, 2, 2), (8, 8, 4, 2, 2), (2,) * 6]:
            for src, dst in pairs(mesh, 30, seed):
                assert search(plan_search, src, dst, model) == search(source, src, dst, model), (str(src), str(dst))
                checked += 1
        for src, dst in mixed_pairs(100, seed):
            assert search(plan_search, src, dst, model) == search(source, src, dst, model), (str(src), str(dst))
            checked += 1
    assert checked == 1000


@compiled
@settings(max_examples=150, deadline=None)
@given(spec_pairs(max_live=6, max_ranks=256, sizes=(2, 3, 4)))
def test_the_build_plans_as_the_source_on_any_pair(source, pair):
    src, dst = pair
    for model in (dt.CostModel(), SteepCostModel(), Float32CostModel()):
        assert search(plan_search, src, dst, model) == search(source, src, dst, model), (str(src), str(dst))


@compiled
@settings(max_examples=40, deadline=None)
@given(spec_pairs(max_live=3, max_ranks=27))
def test_the_build_finds_the_exhaustive_path_the_source_finds(source, pair):
    src, dst = pair
    for model in (dt.CostModel(), SteepCostModel()):
        runs = []
        for module in (plan_search, source):
            start, goal = module.search_state(src), module.search_state(dst)
            runs.append(module.exhaustive_path(start, goal, src.mesh.shape, src.ndim, planner._nbytes(src), model,
                                               planner.greedy_collectives(src, dst)))
        assert runs[0] == runs[1]


@pytest.mark.parametrize("name", native.COMPILED)
def test_the_compiled_modules_doctests_pass_on_their_sources(sources, name):
    results = doctest.testmod(sources[name], optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0
    assert results.attempted >= 2


def _status_in_copy(tmp_path: Path, edit: str = "", pure: bool = False, broken: bool = False) -> subprocess.CompletedProcess:
    """native.status() (plan_search's, then plan_core's), the file plan_search runs from and a plan, in a
    subprocess importing a copy of the packages (the builds included); ``edit``: a source file of
    dtensor_np edited after the build."""
    for package in ("dtensor_np", "collectives"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)
    if edit:
        with open(tmp_path / "dtensor_np" / edit, "a") as f:
            f.write("\n# an edit after the build\n")
    if broken:  # a build that does not load (here: not a shared library at all)
        for built in (tmp_path / "dtensor_np").glob("plan_search.*.so"):
            built.write_bytes(b"not a shared library")
    script = textwrap.dedent(f"""
        import dtensor_np as dt
        from dtensor_np import native, plan_search
        assert dt.__file__.startswith({str(tmp_path)!r}), dt.__file__
        mesh = dt.DeviceMesh((2, 2))
        src = dt.DTensorSpec(mesh, (dt.Shard(0), dt.Shard(0)), dt.TensorMeta((8, 8), "float32"))
        plan = dt.plan_redistribute(src, src.with_placements((dt.Replicate(), dt.Replicate())))
        print(native.status()[{NAME!r}], "|", plan_search.__file__.rsplit("/", 1)[1], "|", len(plan), "|",
              native.status()[{CORE!r}])
    """)
    # a throwaway copy: no bytecode written for it (under tests/conftest.py's cache it would pile up)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), native.PURE_ENV: "1" if pure else "",
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)


@compiled
def test_a_fresh_build_runs(tmp_path):
    done = _status_in_copy(tmp_path)
    assert done.returncode == 0, done.stderr
    state, file, steps, core = done.stdout.strip().split(" | ")
    assert (state, file.endswith(".so"), steps, core) == ("compiled", True, "1", "compiled")
    assert "RuntimeWarning" not in done.stderr


@compiled
@pytest.mark.parametrize("edit", ["plan_search.py", "plan_rewrites.py"])
def test_a_build_older_than_its_source_runs_the_source_and_says_so(tmp_path, edit):
    """plan_search.py edited, or plan_rewrites.py: plan_search calls plan_rewrites' compiled code directly, so
    its build is stale too (the hash of each build of native.MYPYC covers all of their sources)."""
    done = _status_in_copy(tmp_path, edit=edit)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(" | ") == ["source (stale build)", "plan_search.py", "1", "compiled"]
    assert "RuntimeWarning" in done.stderr and "pip install -e ." in done.stderr and "plan_graph" in done.stderr


@compiled
def test_a_build_older_than_its_c_types_runs_the_source_and_says_so(tmp_path):
    """plan_core.pxd is part of plan_core's source: edited after the build, the build is stale."""
    done = _status_in_copy(tmp_path, edit="plan_core.pxd")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(" | ") == ["compiled", "plan_search" + sysconfig.get_config_var("EXT_SUFFIX"),
                                                "1", "source (stale build)"]
    assert "RuntimeWarning" in done.stderr and "plan_core" in done.stderr and "pip install -e ." in done.stderr


@compiled
def test_dtensor_np_pure_runs_the_source(tmp_path):
    done = _status_in_copy(tmp_path, pure=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(" | ") == [f"source ({native.PURE_ENV})", "plan_search.py", "1",
                                                f"source ({native.PURE_ENV})"]


@compiled
def test_a_build_that_does_not_import_runs_the_source(tmp_path):
    done = _status_in_copy(tmp_path, broken=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(" | ")[:3] == ["source (stale build)", "plan_search.py", "1"]
    assert "RuntimeWarning" in done.stderr


def test_a_pure_install_removes_an_earlier_build(tmp_path):
    """``DTENSOR_NP_PURE=1`` at install deletes the in-tree builds an earlier install left (an editable
    install's), so the sources run; nothing is compiled."""
    pytest.importorskip("setuptools")
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    (tmp_path / "README.md").write_text("dtensor_np\n")
    (tmp_path / "dtensor_np").mkdir()
    shutil.copy(ROOT / "dtensor_np" / "native.py", tmp_path / "dtensor_np" / "native.py")
    tag = sysconfig.get_config_var("EXT_SUFFIX")
    left = [tmp_path / "dtensor_np" / f"{name.rpartition('.')[2]}{tag}" for name in native.COMPILED]
    left.append(tmp_path / "dtensor_np" / f"planner__mypyc{tag}")  # mypyc's library of native.MYPYC
    for path in left:
        path.write_bytes(b"an earlier build")
    env = {**os.environ, native.PURE_ENV: "1"}
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not any(path.exists() for path in left)
    assert "DTENSOR_NP_PURE is set; building pure Python" in done.stderr
    assert not (tmp_path / "build" / "planner_src").exists() and not (tmp_path / "build" / "mypyc").exists()
