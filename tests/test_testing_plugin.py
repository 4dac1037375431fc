"""The pytest plugin (dtensor_np_pytest), run on a small test file by pytest's ``pytester``.

One run on simulated meshes (in this process) and one with ``--dt-mpi``
(each MPI item in its own ``mpiexec -n 2`` job, through pytest-isolate-mpi):
the items each marker makes, a failing assertion reported from every rank,
the shared temporary directory, and a hang turned into an abort with every
rank's stack by ``--dt-timeout``.
"""
from __future__ import annotations

import doctest
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dtensor_np_pytest
import numpy  # noqa: F401 - before pytester's in-process runs: each restores sys.modules after it, and NumPy's
# C extension cannot be imported a second time (the zarr plugin imports it in every run)
from launching import MPIEXEC, clean_mpi_env

pytest_plugins = ["pytester"]
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "testing"

TESTS = textwrap.dedent(
    """
    import time
    import numpy as np
    import pytest
    import dtensor_np as dt
    from dtensor_np.testing import assert_dtensor_equal

    def rank_of(mesh):
        from mpi4py import MPI
        return MPI.COMM_WORLD.rank if mesh.backend == "mpi" else None

    @pytest.mark.world_sizes(1)
    @pytest.mark.mesh_shapes((2, 1))
    def test_double(mesh):
        a = np.arange(15.0).reshape(5, 3)
        x = dt.distribute_tensor(a, mesh, [dt.Shard(0)] + [dt.Replicate()] * (mesh.ndim - 1))
        assert_dtensor_equal(x * 2, a * 2)

    @pytest.mark.world_sizes(2)
    def test_wrong(mesh):
        a = np.arange(4.0)
        assert_dtensor_equal(dt.distribute_tensor(a, mesh, [dt.Shard(0)]), a + (a >= 3))

    @pytest.mark.world_sizes(2)
    def test_shared(mesh, shared_tmp_path):
        rank = rank_of(mesh) or 0
        (shared_tmp_path / f"from{rank}").write_text("x")
        dt.distribute_tensor(np.ones(2), mesh, [dt.Shard(0)]).full_tensor()  # a collective: both have written
        assert {p.name for p in shared_tmp_path.iterdir()} == ({"from0", "from1"} if rank_of(mesh) is not None else {"from0"})

    @pytest.mark.world_sizes(2)
    def test_hang(mesh):
        if rank_of(mesh) == 1:
            time.sleep(600)  # rank 0 waits for it in the collective below
        dt.distribute_tensor(np.ones(2), mesh, [dt.Shard(0)]).full_tensor()

    def test_plain(tmp_path):
        assert tmp_path.exists()
    """
)


def test_simulated_items_run_in_this_process_and_an_unmarked_test_is_untouched(pytester):
    pytester.makepyfile(test_user=TESTS)
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "*test_double?sim1? PASSED*", "*test_double?sim2x1? PASSED*", "*test_wrong?sim2? FAILED*",
        "*test_shared?sim2? PASSED*", "*test_hang?sim2? PASSED*", "*test_plain PASSED*",
        "E * AssertionError: assert_dtensor_equal: 1 of 2 ranks differ from expected (rtol=1e-07, atol=0.0):",
        "E *   rank 1: block of shape (2,) at global offset (2,): 1 of 2 elements differ, the first at "
        "global index (3,): got 3.0, expected 4.0",
    ])
    result.assert_outcomes(passed=5, failed=1)
    assert "mpi2" not in result.stdout.str()  # no MPI items without --dt-mpi


def test_mesh_fixture_without_a_marker_and_a_bad_marker_are_usage_errors(pytester):
    pytester.makepyfile(test_no_marker="""
        def test_no_marker(mesh):
            pass
    """, test_bad_shape="""
        import pytest
        @pytest.mark.mesh_shapes(4)
        def test_bad_shape(mesh):
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--continue-on-collection-errors")
    result.stdout.fnmatch_lines_random([
        "E * the `mesh` fixture needs @pytest.mark.world_sizes(...) or @pytest.mark.mesh_shapes(...) on the test",
        "E * @pytest.mark.mesh_shapes: expected tuples of positive ints, got 4",
    ])
    result.assert_outcomes(errors=2)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:pytest_isolate_mpi", "--dt-mpi")
    result.stderr.fnmatch_lines(["ERROR: --dt-mpi runs its MPI items through pytest-isolate-mpi: pip install pytest-isolate-mpi"])


def test_the_plugin_names_the_abort_report_variable_collectives_reads():
    """The plugin imports no collectives (nor NumPy) when pytest loads it, so it spells the name out: the same."""
    import collectives.abort

    assert dtensor_np_pytest.REPORT_FD_ENV == collectives.abort.REPORT_FD_ENV


def test_mesh_cases_are_simulated_then_mpi_for_shapes_of_two_ranks_or_more():
    assert doctest.testmod(dtensor_np_pytest).failed == 0  # the module's examples (outside the doctest paths)
    cases = dtensor_np_pytest.mesh_cases([(1,), (2,), (2, 2)], mpi=True, timeout=5)
    assert [c.id for c in cases] == ["sim1", "sim2", "sim2x2", "mpi2", "mpi2x2"]
    assert cases[4].values == (("mpi", (2, 2)), 4) and cases[4].marks[0].kwargs == {"timeout": 40}


def test_dt_mpi_runs_each_shape_under_mpiexec_reports_every_rank_and_aborts_a_hang(pytester):
    pytester.makepyfile(test_user=TESTS)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--dt-mpi", "--dt-timeout", "4", "-k", "mpi",
        "-o", f"mpi_executable={MPIEXEC}", timeout=300,
    )
    out = result.stdout.str()
    result.stdout.fnmatch_lines_random([
        "*test_double?mpi2x1??rank=0? PASSED*", "*test_double?mpi2x1??rank=1? PASSED*",
        "*test_shared?mpi2??rank=0? PASSED*", "*test_shared?mpi2??rank=1? PASSED*",
        "*test_wrong?mpi2??rank=0? FAILED*", "*test_wrong?mpi2??rank=1? FAILED*",
        "*test_hang?mpi2? FAILED*",
    ])
    # the failing assertion: the same message from each rank
    assert out.count("rank 1: block of shape (2,) at global offset (2,): 1 of 2 elements differ") >= 2, out
    # the hang: every rank dumped its stack at the timeout, then the job ended
    hang = out[out.index("test_hang[mpi2] _"):]
    assert hang.count("dtensor_np: the test ran past --dt-timeout=4 s; its stacks:") == 2, hang
    assert "[rank 0] dtensor_np" in hang and "[rank 1] dtensor_np" in hang, hang
    assert hang.count("in test_hang") >= 2, hang


MODULE_JOB_TESTS = textwrap.dedent(
    """
    import os, threading, time
    from pathlib import Path
    import numpy as np
    import pytest
    import dtensor_np as dt

    def record(mesh, name):
        from mpi4py import MPI
        with open(Path(__file__).parent / "pids.txt", "a") as f:
            f.write(f"{name} {MPI.COMM_WORLD.rank} {os.getpid()}\\n")

    @pytest.mark.world_sizes(2)
    def test_a(mesh):
        record(mesh, "a")
        assert dt.distribute_tensor(np.arange(4.0), mesh, [dt.Shard(0)]).full_tensor().sum() == 6.0

    @pytest.mark.world_sizes(2)
    def test_b(mesh):
        record(mesh, "b")
        assert dt.distribute_tensor(np.arange(4.0), mesh, [dt.Shard(0)]).full_tensor().sum() == 7.0

    @pytest.mark.world_sizes(2)
    def test_crash(mesh):
        record(mesh, "crash")
        from mpi4py import MPI
        MPI.COMM_WORLD.Barrier()
        if MPI.COMM_WORLD.rank == 1:  # an error escapes in a thread: collectives.abort reports it and aborts the job
            thread = threading.Thread(target=lambda: 1 / 0)
            thread.start()
            thread.join()
            time.sleep(60)

    @pytest.mark.world_sizes(2)
    def test_c(mesh):
        record(mesh, "c")

    @pytest.mark.world_sizes(2)
    def test_hang(mesh):
        record(mesh, "hang")
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 1:
            time.sleep(600)
        dt.distribute_tensor(np.ones(2), mesh, [dt.Shard(0)]).full_tensor()

    @pytest.mark.world_sizes(2)
    def test_d(mesh):
        record(mesh, "d")
    """
)


def test_module_jobs_run_a_module_in_one_job_and_a_crash_or_hang_fails_alone(pytester):
    """--dt-mpi-jobs=module: one mpiexec job for the module's MPI items; a crashed or hung item fails with the
    job's output and the items after it run on in a new job, each result reported from every rank."""
    pytester.makepyfile(test_module_jobs=MODULE_JOB_TESTS)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--dt-mpi", "--dt-timeout", "4", "--dt-mpi-jobs", "module", "-k", "mpi",
        "-o", f"mpi_executable={MPIEXEC}", timeout=300,
    )
    out = result.stdout.str()
    result.stdout.fnmatch_lines_random([
        "*test_a?mpi2??rank=0? PASSED*", "*test_a?mpi2??rank=1? PASSED*",
        "*test_b?mpi2??rank=0? FAILED*", "*test_b?mpi2??rank=1? FAILED*",
        "*test_crash?mpi2? FAILED*", "*test_c?mpi2??rank=0? PASSED*", "*test_c?mpi2??rank=1? PASSED*",
        "*test_hang?mpi2? FAILED*", "*test_d?mpi2??rank=0? PASSED*", "*test_d?mpi2??rank=1? PASSED*",
    ])
    assert "MPI job of 6 tests of test_module_jobs.py on 2 ranks: the job ended (exit status" in out, out
    assert re.search(r"ranks \[(0, )?1\] did not finish it", out), out  # rank 0 may still be writing its report
    # the abort's report reaches the job's output, past pytest's capture of the rank's stderr (which dies with it)
    assert "dtensor_np: uncaught ZeroDivisionError on MPI rank 1 of 2; aborting the job" in out, out
    assert "MPI job of 3 tests of test_module_jobs.py on 2 ranks" in out, out  # test_c, test_hang, test_d
    hang = out[out.index("test_hang[mpi2] _"):]
    assert hang.count("dtensor_np: the test ran past --dt-timeout=4 s; its stacks:") == 2, hang
    jobs: dict[str, set[int]] = {}
    for line in (pytester.path / "pids.txt").read_text().splitlines():
        name, rank, pid = line.split()
        jobs.setdefault(name, set()).add(int(pid))
    first = jobs["a"]
    assert len(first) == 2 and jobs["b"] == jobs["crash"] == first, jobs  # one job, a process per rank, until the crash
    second = jobs["c"] - first  # (rank 0 of the first job may run on into test_c, test_hang before the job ends)
    assert len(second) == 2 and jobs["hang"] - first == second, jobs  # then a new job from test_c on,
    assert len(jobs["d"]) == 2 and not jobs["d"] & (first | second), jobs  # and one more after the hang


def _run_example(*options: str) -> str:
    """Run pytest on the example project examples/testing (its own pytest.ini) in a fresh process; its output."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *options], cwd=EXAMPLE,
        env=clean_mpi_env(), capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_the_example_project_passes_simulated_and_under_mpiexec():
    assert re.search(r"\b6 passed in ", _run_example())  # 3 + 1 + 1 + 1 simulated meshes
    # --dt-mpi: one test's items, its mpiexec -n 2 job too (reported once per rank: 3 + 2); one job, to save time
    out = _run_example("--dt-mpi", "-o", f"mpi_executable={MPIEXEC}", "-vv", "-k", "rows_sharded and not mpi4")
    assert re.search(r"\b5 passed, 7 deselected in ", out), out
    assert "test_normalize_rows_sharded[mpi2][rank=1] PASSED" in out, out


def test_a_module_job_that_writes_no_report_for_too_long_is_killed(tmp_path):
    """The outer backstop of --dt-mpi-jobs=module (for a rank whose own timer cannot fire): no new report file
    for ``stall_s`` seconds ends the job's whole process group."""
    job = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert dtensor_np_pytest._wait_for(job, str(tmp_path), stall_s=0.5) is True
    assert job.returncode == -9
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    assert dtensor_np_pytest._wait_for(done, str(tmp_path), stall_s=30.0) is False and done.returncode == 0
