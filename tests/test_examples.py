"""The programs in ``examples/``: NumPy code written for one machine, run unchanged on DTensors.

Each example's function is called on NumPy arrays and on arrays of
``dt.array_api.namespace`` placed by ``shard_first`` and ``shard_last``, on
simulated meshes of 2 and 4 ranks and under ``mpiexec -n 2`` (the ``world``
fixture), with shapes that split unevenly (and leave empty shards); the
results are compared whole and on every held local shard.  Each script's
``main()`` runs simulated in this process, and the scripts themselves run
under ``mpiexec -n 2`` as a user would start them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dtensor_np as dt
from collectives import comm_counter
from launching import MPIEXEC, clean_mpi_env
from test_numpy_ops import Checks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import heat_stencil  # noqa: E402
import kmeans  # noqa: E402
import logistic_regression  # noqa: E402
import power_iteration  # noqa: E402

POLICIES = ("shard_first", "shard_last")


def namespaces(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    for policy in POLICIES:
        yield policy, dt.array_api.namespace(mesh, policy)


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_power_iteration_matches_numpy(world):
    rng = np.random.default_rng(1)
    B = rng.normal(size=(9, 9))
    A = B @ B.T
    lam_np, v_np = power_iteration.power_iteration(A, iters=60)
    checks = Checks(world)
    for policy, xp in namespaces(world):
        with comm_counter() as counter:
            lam, v = power_iteration.power_iteration(xp.asarray(A), iters=60)
        checks.same(f"{policy} eigenvalue", lambda: lam_np, lambda: lam, rtol=1e-9)
        checks.same(f"{policy} eigenvector", lambda: v_np, lambda: v, rtol=1e-9, atol=1e-12)
        checks.expect(counter.counts["all_gather"] <= 61, f"{policy}: {counter!r}")  # at most v per step
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_heat_stencil_matches_numpy(world):
    u0 = np.random.default_rng(2).random((13, 6))  # 13 rows over 2 or 4 ranks, 6 columns over 4: uneven
    expected = heat_stencil.heat_steps(u0, steps=7)
    checks = Checks(world)
    for policy, xp in namespaces(world):
        u = xp.asarray(u0)
        with comm_counter() as counter:
            got = heat_stencil.heat_steps(u, steps=1)
        # the grid stays sharded and only halos move: no gather, no reduction
        checks.expect(set(counts := {k: n for k, n in counter.counts.items() if n}) <= {"all_to_all"},
                      f"{policy} one step: {counts}")
        checks.expect(got.placements == u.placements, f"{policy}: {got.placements} != {u.placements}")
        checks.same(f"{policy} heat 7 steps", lambda: expected, lambda: heat_stencil.heat_steps(u, steps=7),
                    exact=True)
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_logistic_regression_matches_numpy(world):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(37, 3))  # 3 columns over 4 ranks: one empty shard with shard_last
    y = (X @ np.array([1.0, -2.0, 0.5]) > 0).astype(np.float64)
    w_np, b_np = logistic_regression.fit_logistic(X, y, iters=50)
    acc_np = logistic_regression.accuracy(X, y, w_np, b_np)
    checks = Checks(world)
    for policy, xp in namespaces(world):
        Xd, yd = xp.asarray(X), xp.asarray(y)
        w, b = logistic_regression.fit_logistic(Xd, yd, iters=50)
        checks.same(f"{policy} weights", lambda: w_np, lambda: w)
        checks.expect(isinstance(b, float) and np.isclose(b, b_np, rtol=1e-10, atol=1e-13), f"{policy}: b {b} {b_np}")
        acc = logistic_regression.accuracy(Xd, yd, w, b)
        checks.expect(acc == acc_np, f"{policy}: accuracy {acc} != {acc_np}")
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_kmeans_matches_numpy(world):
    X = kmeans.blobs(np.random.default_rng(4), per_cluster=7)  # 21 points: 11/10 or 6/5/5/5 rows
    start = [0, 8, 15]
    centers_np, labels_np = kmeans.kmeans(X, X[start], iters=6)
    checks = Checks(world)
    for policy, xp in namespaces(world):
        Xd = xp.asarray(X)
        got = checks.same(f"{policy} kmeans", lambda: (centers_np, labels_np),
                          lambda: kmeans.kmeans(Xd, Xd[start], iters=6), rtol=1e-10)
        if policy == "shard_first" and got is not None:  # the labels stay with their points
            checks.expect(got[1].placements == Xd.placements, f"{policy}: labels {got[1].placements}")
    checks.finish()


@pytest.mark.parametrize("module", [power_iteration, heat_stencil, logistic_regression, kmeans])
@pytest.mark.parametrize("args", [["--ranks", "3"], ["--ranks", "4", "--default", "shard_last"]])
def test_example_main_runs_simulated(module, args, capsys):
    module.main(args)
    out = capsys.readouterr().out
    assert "max |DTensor - NumPy|" in out and "on mesh (" in out  # the sharding, then the comparison


mpiexec_only = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed next to this Python")


def run_under_mpiexec(script: str) -> str:
    result = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, "-W", "ignore::RuntimeWarning", str(EXAMPLES / script)],
        env=clean_mpi_env(), capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@mpiexec_only
@pytest.mark.parametrize("script", ["power_iteration.py", "heat_stencil.py", "logistic_regression.py", "kmeans.py"])
def test_example_script_under_mpiexec(script):
    out = run_under_mpiexec(script)
    assert "backend='mpi'" in out and out.count("max |DTensor - NumPy|") >= 2  # each of the 2 ranks compared


@mpiexec_only
def test_sklearn_pipeline_under_mpiexec():
    pytest.importorskip("sklearn")
    pytest.importorskip("scipy")
    out = run_under_mpiexec("sklearn_pipeline.py")
    scores = re.findall(r"ranks \[(\d)\]: R\^2 = (\S+) \(NumPy: (\S+)\)", out)
    assert sorted(rank for rank, _, _ in scores) == ["0", "1"], out  # every rank printed its score
    for _, score, expected in scores:
        assert np.isclose(float(score), float(expected), rtol=1e-12), out
    assert out.count("Ridge coef_: (Shard(dim=0),)") == 2, out
