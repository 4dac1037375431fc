"""The compiled planner search (dtensor_np.native): the same plans as the source, and never a stale build.

setup.py compiles dtensor_np.plan_search with mypyc where it can.  Here: the
compiled module plans exactly what the source plans (steps, cost, method and
work, so ranks with and without a build agree), on the benchmark's seeded
pairs, on hypothesis pairs and with a Python subclass of ``CostModel``; a
build that is older than its source is never run; plan_search's doctests run
on the source (pytest's doctest collection cannot import a module whose build
shadows its ``.py``, so setup.cfg leaves it out of ``--doctest-modules``).
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

import pytest
from hypothesis import given, settings

import dtensor_np as dt
from dtensor_np import native, plan_search, planner

from strategies import spec_pairs

ROOT = Path(__file__).resolve().parents[1]
NAME = "dtensor_np.plan_search"
STATE = native.status()[NAME]
compiled = pytest.mark.skipif(STATE != "compiled", reason=f"{NAME} runs from its {STATE}, not a build")


@pytest.fixture(scope="module")
def source():
    """plan_search imported from its .py, beside whichever the package runs."""
    module = native.load_source(NAME, "dtensor_np._plan_search_source")
    yield module
    sys.modules.pop("dtensor_np._plan_search_source", None)


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


def test_the_build_is_there_where_a_compiler_is():
    """Where the install could compile (a C compiler, Python's headers), the package runs the build."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    if not (shutil.which(compiler) and headers.exists()):
        pytest.skip(f"no C compiler ({compiler}) or no Python.h: the install is pure Python")
    if os.environ.get(native.PURE_ENV, "") not in ("", "0"):
        pytest.skip(f"{native.PURE_ENV} is set: the source runs")
    assert STATE in ("compiled", "source (stale build)"), (
        f"expected {NAME} compiled by `pip install -e .` (setup.py, mypyc), got {STATE}")
    if STATE != "compiled":
        pytest.skip(f"{NAME} changed since it was built: `pip install -e .` rebuilds it")


@compiled
def test_the_build_plans_as_the_source_on_the_benchmark_pairs(source):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from planner import mixed_pairs, pairs
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    model = dt.CostModel()
    checked = 0
    for mesh in [(2, 2, 2), (4, 4, 4, 4), (2, 2, 2, 2, 2), (8, 8, 4, 2, 2), (2,) * 6]:
        for src, dst in pairs(mesh, 30, 0):
            assert search(plan_search, src, dst, model) == search(source, src, dst, model), (str(src), str(dst))
            checked += 1
    for src, dst in mixed_pairs(300, 1):
        assert search(plan_search, src, dst, model) == search(source, src, dst, model), (str(src), str(dst))
        checked += 1
    assert checked == 450


@compiled
@settings(max_examples=150, deadline=None)
@given(spec_pairs(max_live=6, max_ranks=256, sizes=(2, 3, 4)))
def test_the_build_plans_as_the_source_on_any_pair(source, pair):
    src, dst = pair
    for model in (dt.CostModel(), SteepCostModel()):
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


def test_plan_search_doctests_pass_on_the_source(source):
    results = doctest.testmod(source, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0
    assert results.attempted >= 5


def _status_in_copy(tmp_path: Path, edit: bool, pure: bool = False) -> subprocess.CompletedProcess:
    """native.status() and a plan, in a subprocess importing a copy of the packages (the build included)."""
    for package in ("dtensor_np", "collectives"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)
    if edit:
        with open(tmp_path / "dtensor_np" / "plan_search.py", "a") as f:
            f.write("\n# an edit after the build\n")
    script = textwrap.dedent(f"""
        import dtensor_np as dt
        from dtensor_np import native, plan_search
        assert dt.__file__.startswith({str(tmp_path)!r}), dt.__file__
        mesh = dt.DeviceMesh((2, 2))
        src = dt.DTensorSpec(mesh, (dt.Shard(0), dt.Shard(0)), dt.TensorMeta((8, 8), "float32"))
        plan = dt.plan_redistribute(src, src.with_placements((dt.Replicate(), dt.Replicate())))
        print(native.status()[{NAME!r}], "|", plan_search.__file__.rsplit("/", 1)[1], "|", len(plan))
    """)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), native.PURE_ENV: "1" if pure else ""}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)


@compiled
def test_a_fresh_build_runs(tmp_path):
    done = _status_in_copy(tmp_path, edit=False)
    assert done.returncode == 0, done.stderr
    state, file, steps = done.stdout.strip().split(" | ")
    assert (state, file.endswith(".so"), steps) == ("compiled", True, "1")
    assert "RuntimeWarning" not in done.stderr


@compiled
def test_a_build_older_than_its_source_runs_the_source_and_says_so(tmp_path):
    done = _status_in_copy(tmp_path, edit=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(" | ") == ["source (stale build)", "plan_search.py", "1"]
    assert "RuntimeWarning" in done.stderr and "pip install -e ." in done.stderr


@compiled
def test_dtensor_np_pure_runs_the_source(tmp_path):
    done = _status_in_copy(tmp_path, edit=False, pure=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(" | ") == [f"source ({native.PURE_ENV})", "plan_search.py", "1"]
