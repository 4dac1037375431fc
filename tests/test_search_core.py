"""The planner's searches in C (dtensor_np/_search_core.pyx): the same results as the Python searches.

plan_search runs its ``FULL`` and ``LANDING`` A* and its probes in the C core
where the install built it (setup.py, Cython), else in Python.  Ranks with and
without a build must plan the same steps, so the core must return what the
Python search returns: the path, its cost, whether the search finished and
the work it counted, on every pair and budget.  Here both run on the same
``_Problem`` (``plan_search.USE_CORE`` off for the Python one): on the
benchmark's seeded and ``--mixed`` pairs, on hypothesis pairs of up to 6 mesh
dims, at several budgets.  The pairs the seventh version (without the core)
left above the optimum are exact at today's budgets.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np import native, plan_search, planner
from dtensor_np.mesh import DeviceMesh
from dtensor_np.placements import Partial, Replicate, Shard
from dtensor_np.spec import DTensorSpec, TensorMeta

from strategies import planner_benchmark, spec_pairs

CORE = "dtensor_np._search_core"
STATE = native.status()[CORE]
built = pytest.mark.skipif(STATE != "compiled", reason=f"{CORE} is {STATE}")
R = Replicate()


def problem(src, dst, model=None):
    """plan_search's _Problem for a spec pair as the planner builds it (with its cap), and its greedy cost."""
    start, goal = plan_search.search_state(src), plan_search.search_state(dst)
    bound = greedy_cost = None
    if planner._greedy_applies(src, dst):
        bound = planner.greedy_collectives(src, dst)
        greedy = plan_search.greedy_path(start, goal, src.mesh.shape, planner.plan_greedy(src, dst))
        greedy_cost = plan_search.path_cost(greedy, start, planner._nbytes(src), src.mesh.shape, model or dt.CostModel())
    return (lambda: plan_search._Problem(start, goal, src.mesh.shape, src.ndim, planner._nbytes(src),
                                         model or dt.CostModel(), bound)), greedy_cost


def outcome(out):
    return out.imoves, out.cost, out.complete, out.work, out.superseded


def searched(make, run, monkeypatch):
    """``run(pb)`` on a fresh problem with the core, then on one without it."""
    results = []
    for use in (True, False):
        monkeypatch.setattr(plan_search, "USE_CORE", use)
        pb = make()
        if pb is not None:
            assert (pb.core is not None) == use
        results.append(run(pb))
    monkeypatch.setattr(plan_search, "USE_CORE", True)
    return results


def search(src, dst):
    """plan_search.search_path as the planner calls it: (path, cost, method, work) or the error."""
    try:
        result = planner.search_result(src, dst)
    except ValueError as error:
        return str(error)
    return result.path, result.cost, result.method, result.work


def benchmark_pairs(seeds, mixed):
    bench = planner_benchmark()
    pairs, mixed_pairs = bench.pairs, bench.mixed_pairs
    for seed in seeds:
        for mesh in [(2, 2, 2), (2, 2, 2, 2), (4, 4, 4, 4), (2, 2, 2, 2, 2), (8, 8, 4, 2, 2), (2,) * 6]:
            yield from pairs(mesh, 30, seed)
        yield from mixed_pairs(mixed, seed)


@built
def test_the_core_plans_as_python_on_the_benchmark_pairs(monkeypatch):
    checked = in_core = 0
    for src, dst in benchmark_pairs((0, 1), 150):
        core, python = searched(lambda: None, lambda _: search(src, dst), monkeypatch)
        assert core == python, (str(src), str(dst))
        checked += 1
        in_core += problem(src, dst)[0]().core is not None
    assert checked == 2 * (6 * 30 + 150)
    assert in_core == checked  # every one of them within the core's limits: the core planned it


@built
@pytest.mark.parametrize("budget", [0, 1, 37, 400, 3000])
def test_the_full_and_landing_searches_and_the_probes_match_at_any_budget(monkeypatch, budget):
    """Each search alone from the start, stopped at ``budget`` (mid-expansion too) or finished: the same
    outcome, the work counted alike."""
    for src, dst in list(benchmark_pairs((2,), 20))[::4]:
        make, greedy_cost = problem(src, dst)
        upper = math.inf if greedy_cost is None else greedy_cost
        for family in (plan_search.FULL, plan_search.LANDING):
            for ties in (False, True):
                core, python = searched(make, lambda pb: outcome(plan_search._astar(pb, family, budget, upper, ties)),
                                        monkeypatch)
                assert core == python, (str(src), str(dst), family, ties)
        core, python = searched(make, lambda pb: outcome(plan_search._probes(pb, budget, upper)), monkeypatch)
        assert core == python, (str(src), str(dst))


def full_twice(budget, upper):
    """The full search twice on one problem (the second reads the bounds the first kept) and the probes."""
    def run(pb):
        first = outcome(plan_search._astar(pb, plan_search.FULL, budget, upper, True))
        return first, outcome(plan_search._astar(pb, plan_search.FULL, 2 * budget, upper, False)), \
            outcome(plan_search._probes(pb, budget, upper))
    return run


@built
@settings(max_examples=150, deadline=None)
@given(spec_pairs(max_ndim=9, max_live=8, max_ranks=512, sizes=(2, 3, 4), max_tensor_ndim=8),
       st.sampled_from([50, 700, 6000]))
def test_the_core_matches_python_on_any_pair(monkeypatch_session, pair, budget):
    """Meshes of up to 8 mesh dims of size > 1 (the core's most) and arrays of up to 8 dims."""
    src, dst = pair
    make, greedy_cost = problem(src, dst)
    upper = math.inf if greedy_cost is None else greedy_cost
    core, python = searched(make, full_twice(budget, upper), monkeypatch_session)
    assert core == python, (str(src), str(dst))
    core, python = searched(make, lambda pb: outcome(plan_search._probes(pb, budget, upper)), monkeypatch_session)
    assert core == python, (str(src), str(dst))
    core, python = searched(lambda: None, lambda _: search(src, dst), monkeypatch_session)
    assert core == python, (str(src), str(dst))


@pytest.fixture(scope="module")
def monkeypatch_session():
    """A monkeypatch for hypothesis tests (function-scoped fixtures are not reset between examples)."""
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


class SteepCostModel(dt.CostModel):
    """A model the lower bound does not hold for: no core (it prices CostModel's linear costs only)."""

    __slots__ = ()

    def collective(self, group_size: int, bytes_moved: float) -> float:
        return 3.0 + (bytes_moved / 4000.0) ** 1.2


def test_a_problem_beyond_the_core_searches_in_python():
    """Another cost model than CostModel's, or more mesh dims of size > 1 than the core holds: the
    Python search plans it, and the plan keeps the value."""
    mesh = DeviceMesh((2, 2, 2))
    src = DTensorSpec(mesh, (Shard(0), Shard(1), Partial()), TensorMeta((16, 16), "float32"))
    dst = src.with_placements((R, Shard(0), Shard(1)))
    make, _ = problem(src, dst, SteepCostModel())
    assert make().core is None
    make, _ = problem(src, dst)
    assert (make().core is not None) == (STATE == "compiled")
    plan = dt.plan_redistribute(src, dst)
    assert plan.method == "exact"
    wide = DeviceMesh((2,) * 9)  # 9 mesh dims of size > 1: one more than the core's MAX_LIVE
    src = DTensorSpec(wide, (Shard(0), R, R, R, R, R, R, R, Shard(1)), TensorMeta((4, 6), "float32"))
    dst = src.with_placements((R, R, R, R, R, R, R, Shard(0), R))
    make, _ = problem(src, dst)
    assert make().core is None
    full = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    x = dt.distribute_tensor(full, wide, list(src.placements)).redistribute(list(dst.placements))
    assert x.spec.placements == dst.placements and np.array_equal(x.full_tensor(), full)


def seventh_version_pairs():
    """Pairs that the seventh version (before the core) did not prove optimal: two that its probes and
    rewrites planned (tests/test_planner_search.py keeps them at its budgets) and the --mixed pair of 4
    mesh dims whose full search stopped at its budget (no greedy plan, so no cap)."""
    meta = TensorMeta((64, 64, 64), "float32")
    src = DTensorSpec(DeviceMesh((2, 2, 2, 2, 2)), (Shard(0), Shard(2), Shard(0), R, Partial()), meta)
    yield src, src.with_placements((Shard(2), R, Shard(1), Shard(0), R))
    src = DTensorSpec(DeviceMesh((8, 8, 4, 2, 2)), (Shard(0), Shard(2), Partial(), Shard(2), Shard(0)), meta)
    yield src, src.with_placements((R, Shard(0), R, Shard(0), Shard(2)))
    mesh, meta = DeviceMesh((2, 4, 2, 3)), TensorMeta((54, 40, 52), "float32")
    yield (DTensorSpec(mesh, (R, Shard(1), Shard(1), Shard(1)), meta, ((1, (1, 2, 3)),)),
           DTensorSpec(mesh, (Shard(1), Shard(1), Shard(1), Shard(0)), meta, ((0, (3,)), (1, (2, 1, 0)))))


@pytest.mark.parametrize("src, dst", list(seventh_version_pairs()))
def test_pairs_the_seventh_version_did_not_prove_are_exact(src, dst):
    path, cost, method, work = search(src, dst)
    assert method == "exact"
    start, goal = plan_search.search_state(src), plan_search.search_state(dst)
    nbytes = planner._nbytes(src)
    bound = planner.greedy_collectives(src, dst) if planner._greedy_applies(src, dst) else None
    exact = plan_search.search_path(start, goal, src.mesh.shape, src.ndim, nbytes, dt.CostModel(), bound,
                                    budget=math.inf)
    assert exact.method == "exact" and math.isclose(cost, exact.cost, rel_tol=1e-9)


@pytest.mark.skipif(not os.environ.get("DTENSOR_NP_EXPECT_BUILD"), reason="DTENSOR_NP_EXPECT_BUILD is not set")
def test_the_install_built_the_core():
    assert STATE == "compiled", f"expected {CORE} built by `pip install -e .` (setup.py, Cython), got {STATE}"


@built
def test_the_core_doctests_pass():
    import doctest

    from dtensor_np import _search_core

    results = doctest.testmod(_search_core, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0 and results.attempted >= 4
