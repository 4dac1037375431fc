"""Long random chains keep every value and leak nothing; a failing rank brings the job down fast."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from launching import MPIEXEC, clean_mpi_env

SOAK_STEPS = int(os.environ.get("DTENSOR_NP_SOAK_STEPS", "1000"))
DTYPES = ("float64", "float32", "int64", "bool")


def _random_placements(rng, ndim):
    options = [Replicate()] + [Shard(d) for d in range(ndim)]
    return [options[rng.integers(len(options))] for _ in range(2)]


def _current_rss_mib() -> float:
    """The resident set size now (not the process's peak, which earlier tests may already have set)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _assert_chain_value(got, full, partial_round_trips, ranks):
    """Exact unless a Partial round trip rounded: then within ``round trips * ranks * eps * max|full|``."""
    if full.dtype.kind != "f" or partial_round_trips == 0:
        np.testing.assert_array_equal(got, full)
        return
    scale = float(np.max(np.abs(full))) if full.size else 0.0
    atol = partial_round_trips * ranks * np.finfo(full.dtype).eps * scale
    np.testing.assert_allclose(got, full, rtol=0, atol=atol)


def _apply_op(rng, x, full):
    """One NumPy op on the DTensor and on the full array; returns both results."""
    kind = full.dtype.kind
    choice = rng.integers(6)
    if choice == 0 and kind != "b":
        return x + x, full + full
    if choice == 1:
        return np.negative(x) if kind not in "b" else np.logical_not(x), np.negative(full) if kind not in "b" else np.logical_not(full)
    if choice == 2 and full.ndim == 2:
        return x.T, full.T
    if choice == 3 and kind in "f":
        return np.abs(x) * 0.5, np.abs(full) * 0.5
    if choice == 4 and full.ndim >= 1 and full.shape[0] > 0 and kind in "fi":
        return np.max(x, axis=0, keepdims=True), np.max(full, axis=0, keepdims=True)
    return x, full


@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_soak_random_chain_of_redistributes_and_ops(world):
    """A seeded random chain of redistributes and NumPy ops on a 2x2 mesh, checked at every step."""
    steps = SOAK_STEPS
    rng = np.random.default_rng(2026)  # the same on every rank
    mesh = dt.DeviceMesh((2, 2), backend=world.kind)
    done = 0
    checked = 0
    rss_start = None
    ranks = mesh.size()
    start = time.perf_counter()
    while done < steps:
        dtype = DTYPES[rng.integers(len(DTYPES))]
        shape = tuple(int(s) for s in rng.integers(0, 9, size=rng.integers(1, 3)))
        full = (rng.standard_normal(shape) * 10).astype(dtype)
        x = dt.distribute_tensor(full, mesh, _random_placements(rng, len(shape)))
        partial_round_trips = 0  # Partial(sum) divides and re-adds: the only step that may round
        for _ in range(20):
            if rng.random() < 0.3:
                x, full = _apply_op(rng, x, full)
            target = _random_placements(rng, full.ndim)
            if rng.random() < 0.15 and full.dtype.kind == "f":
                target[rng.integers(2)] = Partial("sum")
                partial_round_trips += 1
                if any(not isinstance(p, Replicate) for p in x.placements):
                    x = x.redistribute([Replicate(), Replicate()])
                    done += 1
            x = x.redistribute(target)
            done += 1
            _assert_chain_value(x.full_tensor(), full, partial_round_trips, ranks)  # full: NumPy's value
            checked += 1
        if rss_start is None and done >= steps // 5:
            rss_start = _current_rss_mib()  # after warm-up: plans, sub-communicators and caches exist
    rss_end = _current_rss_mib()
    elapsed = time.perf_counter() - start
    print(
        f"soak[{world}]: {done} redistributes and ops, {checked} full checks, "
        f"current RSS {rss_start:.1f} MiB after warm-up -> {rss_end:.1f} MiB at the end, {elapsed:.1f} s"
    )
    assert rss_end - rss_start < 64, (rss_start, rss_end)


FAULT_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import dtensor_np as dt

    mesh = dt.init_device_mesh((4,))
    rank = next(iter(dt.distribute_tensor(np.zeros(4), mesh, [dt.Shard(0)]).local_shards()))
    x = dt.distribute_tensor(np.arange(64.0).reshape(8, 8), mesh, [dt.Shard(0)])
    for step in range(10_000):
        x = x.redistribute([dt.Shard(1)]).redistribute([dt.Shard(0)])
        if step == 50 and rank == 2:
            raise RuntimeError("rank two failed on purpose at step 50")
    """
)


def test_a_failing_rank_ends_the_whole_job_quickly(tmp_path: Path):
    """One rank of four raises inside a collective-heavy loop: non-zero exit within 10 s, message shown."""
    script = tmp_path / "fault.py"
    script.write_text(FAULT_SCRIPT)
    start = time.perf_counter()
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "4", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_mpi_env(),
    )
    elapsed = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    print(f"fault job: exit code {proc.returncode} after {elapsed:.1f} s")
    assert proc.returncode != 0, output
    assert "rank two failed on purpose" in output, f"exit code {proc.returncode} after {elapsed:.1f} s: {output!r}"
    assert "rank 2" in output, output
    assert elapsed < 10, f"the job took {elapsed:.1f} s to end"
