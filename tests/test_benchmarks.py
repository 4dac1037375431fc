"""The benchmarks run end to end under ``mpiexec -n 2`` and write the rows API.md promises.

No timing is asserted (timings belong in the benchmarks themselves): these runs
are tiny, and what they check is that the scripts still work, that every row
carries the contract's fields with consistent values, and that each benchmark's
own check of the DTensor result against the hand-written result passed (it
exits non-zero when they differ).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from launching import MPIEXEC, clean_mpi_env

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed next to this Python")


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    command = [str(MPIEXEC), "-n", "2", sys.executable, str(ROOT / "benchmarks" / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=clean_mpi_env(), cwd=ROOT)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def test_redistribute_benchmark_writes_the_api_rows(tmp_path: Path):
    out = tmp_path / "rows.json"
    done = _run(
        "redistribute.py", "--sizes", "1KiB,64KiB", "--budget", "0.01", "--min-iters", "3", "--rounds", "2",
        "--control", "--profile", str(tmp_path / "prof"), "--json", str(out),
    )
    rows = json.loads(out.read_text())
    names = ["S(0)->R", "P->R", "P->S(0)", "S(0)->S(1)", "R->S(0)"]
    assert [(r["transition"], r["bytes"]) for r in rows] == [(n, b) for n in names for b in (1024, 65536)]
    for r in rows:
        assert r["ranks"] == 2
        assert r["dtensor_us"] > 0 and r["raw_mpi_us"] > 0 and r["control_us"] > 0
        # times are rounded to 0.001 us in the JSON: sub-microsecond rows carry that much error in their ratio
        slack = 0.0011 / r["raw_mpi_us"]
        assert r["ratio"] == pytest.approx(r["dtensor_us"] / r["raw_mpi_us"], rel=1e-3 + slack)
        assert r["control_ratio"] == pytest.approx(r["control_us"] / r["raw_mpi_us"], rel=1e-3 + slack)
        assert 0 < r["plan_us"] < 1000 and r["iters"] >= 3
    assert len(list((tmp_path / "prof").glob("*.txt"))) == len(rows)
    assert "cached plan lookup" in done.stdout


def test_redistribute_benchmark_rejects_an_unknown_transition():
    command = [str(MPIEXEC), "-n", "2", sys.executable, str(ROOT / "benchmarks" / "redistribute.py"),
               "--transitions", "S(0)->S(7)"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=clean_mpi_env(), cwd=ROOT)
    assert done.returncode != 0
    assert "unknown transitions ['S(0)->S(7)']" in done.stdout + done.stderr


def test_bucketing_benchmark_runs_and_checks_its_variants(tmp_path: Path):
    out = tmp_path / "rows.json"
    _run("bucketing.py", "--params", "4", "--kib", "4", "--iters", "3", "--warmup", "1", "--json", str(out))
    rows = json.loads(out.read_text())
    assert [r["kind"] for r in rows] == ["all_gather", "reduce_scatter", "all_reduce"]
    for r in rows:
        assert r["ranks"] == 2 and r["params"] == 4
        assert r["collectives"]["redistribute"] == 4 and r["collectives"]["bucketed"] == 1


def test_train_step_benchmark_checks_losses_and_counts_collectives(tmp_path: Path):
    out = tmp_path / "rows.json"
    _run("train_step.py", "--quick", "--json", str(out))
    rows = json.loads(out.read_text())
    assert [r["mesh"] for r in rows] == ["2x1", "1x2"]
    assert rows[0]["collectives"] == {"all_gather": rows[0]["buckets"], "reduce_scatter": rows[0]["buckets"],
                                      "all_reduce": 1}
    assert rows[1]["collectives"] == {"all_reduce": 4}  # one layer: Megatron's two forward and two backward
    assert all(r["single_ms"] > 0 and r["fsdp_ms"] > 0 for r in rows)


def test_dispatch_benchmark_writes_a_row_per_op(tmp_path: Path):
    out = tmp_path / "rows.json"
    done = _run("dispatch.py", "--iters", "5", "--repeats", "1", "--json", str(out))
    rows = json.loads(out.read_text())
    assert [r["op"] for r in rows][:7] == ["x + x", "x * 2.0", "np.maximum(x, 0)", "np.exp(x)", "x @ w",
                                           "np.sum(x, axis=1)", "x.T"]
    assert "x[0] = 1" in [r["op"] for r in rows]
    for r in rows:
        assert r["backend"] == "mpi" and r["ranks"] == 2 and r["iters"] == 5
        assert r["dtensor_us"] > 0 and r["local_us"] > 0
        assert r["overhead_us"] == pytest.approx(r["dtensor_us"] - r["local_us"], abs=0.002)
    assert "overhead us" in done.stdout


def test_dispatch_benchmark_runs_simulated(tmp_path: Path):
    out = tmp_path / "rows.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "dispatch.py"), "--ranks", "4", "--iters", "3",
               "--repeats", "1", "--ops", "x + x,x[0] = 1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=clean_mpi_env(), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())
    assert [(r["op"], r["backend"], r["ranks"]) for r in rows] == [("x + x", "simulated", 4), ("x[0] = 1", "simulated", 4)]
