"""benchmarks/limits.py: its checks against NumPy catch wrong results, and the script runs under ``mpiexec -n 2``.

No timing is asserted: the ``--quick`` run (about 1 s) checks that every row's DTensor call and its
hand-written floor still agree with NumPy on the full array (the script exits non-zero otherwise)
and that the rows carry their fields.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from launching import MPIEXEC, clean_mpi_env

import dtensor_np as dt

ROOT = Path(__file__).resolve().parents[1]


def _limits() -> Any:
    """benchmarks/limits.py, loaded from the script (the benchmarks folder is no package)."""
    folder = ROOT / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("limits_benchmark", folder / "limits.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


limits = _limits()


def test_the_qr_and_svd_checks_allow_column_signs_and_catch_wrong_factors():
    a = np.random.default_rng(1).standard_normal((12, 3))
    qr, svd = limits.CASES["qr"], limits.CASES["svd"]
    q, r = np.linalg.qr(a)
    flip = np.array([1.0, -1.0, 1.0])  # a column of Q and the matching row of R negated: still a QR of a
    assert limits.mismatch(qr, (q * flip, r * flip[:, None]), (a,)) is None
    assert limits.mismatch(qr, (q * flip, r), (a,)) == "differs from NumPy on the full array"
    assert limits.mismatch(qr, (q, r, r), (a,)) == "expected 2 results, got 3"
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    assert limits.mismatch(svd, (u * flip, s, vt * flip[:, None]), (a,)) is None
    assert limits.mismatch(svd, (u, s[::-1], vt), (a,)) == "differs from NumPy on the full array"
    assert limits.mismatch(svd, (u[:6], s, vt), (a,)) == (
        "expected shapes [(12, 3), (3,), (3, 3)], got [(6, 3), (3,), (3, 3)]")


def test_the_argmax_check_wants_the_exact_indices():
    x = np.random.default_rng(2).standard_normal((5, 4))
    case = limits.CASES["argmax axis=0"]
    assert limits.mismatch(case, (np.argmax(x, axis=0),), (x,)) is None
    assert limits.mismatch(case, (np.argmin(x, axis=0),), (x,)) == "differs from NumPy on the full array"


def test_every_dtensor_call_agrees_with_numpy_on_uneven_and_empty_shards():
    """3 simulated ranks: 7 rows of the tall matrix split 3, 3, 1; 2 rows of the wide one split 1, 1, 0."""
    mesh = dt.DeviceMesh((3,))
    kinds = {"tall": (7, 3), "vector": (7,), "wide": (2, 5), "weight": (5, 4)}
    for case in limits.CASES.values():
        fulls, tensors = limits.make_inputs(case, mesh, kinds)
        assert limits.check_dtensor(case, tensors, fulls) is None, case.op


def test_an_unknown_op_is_refused_before_any_mpi():
    with pytest.raises(SystemExit, match=r"expected ops among \['qr', .*got unknown \['qrr'\]"):
        limits.main(["--ops", "qr,qrr"])


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed next to this Python")
def test_quick_run_under_mpiexec_checks_every_op_and_writes_the_rows(tmp_path: Path):
    out = tmp_path / "rows.json"
    command = [str(MPIEXEC), "-n", "2", sys.executable, str(ROOT / "benchmarks" / "limits.py"), "--quick",
               "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=clean_mpi_env(), cwd=ROOT)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    rows = json.loads(out.read_text())
    assert [r["op"] for r in rows] == list(limits.CASES)
    for r in rows:
        assert r["ranks"] == 2 and r["iters"] >= 3 and r["dtensor_ms"] > 0 and r["floor_ms"] > 0
        assert r["agreement"] is True  # the default SPMD agreement, as a user runs
        assert r["ratio"] == pytest.approx(r["dtensor_ms"] / r["floor_ms"], rel=1e-3)
    by_op = {r["op"]: r for r in rows}
    assert by_op["lstsq"]["shape"] == "512x16" and by_op["lstsq"]["placement"] == "S(0), S(0)"
    assert by_op["x @ w"]["shape"] == "256x64 @ 64x32" and by_op["x @ w"]["out"] == "S(0)"
    assert "DTensor ms" in done.stdout and "floor ms" in done.stdout
