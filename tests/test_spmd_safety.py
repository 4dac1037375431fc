"""SPMD safety under MPI: ranks on different paths get an error instead of a hang, a stuck job ends with a report.

Every case is a real ``mpiexec`` job (the failure involves ranks that disagree,
so it cannot run inside one test process), with the SPMD check on
(``DTENSOR_NP_CHECK_SPMD=1``).  Each rank writes what it raised to its own
file; the test checks that every rank raised the expected error, naming the
call sites, and how long the job took (the bound is generous for a loaded CI
machine; a hang would be killed at the job limit and fail).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import collectives
import dtensor_np as dt
from launching import MPIEXEC, clean_mpi_env

JOB_LIMIT_S = 60

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    import dtensor_np as dt
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    case, out = sys.argv[1], sys.argv[2]
    R, S = dt.Replicate(), dt.Shard
    TARGETS = [[R, R], [R, S(0)], [S(1), R]]

    def report(kind, message):
        with open(os.path.join(out, f"{rank}.json"), "w") as f:
            json.dump([kind, message], f)

    mesh = dt.init_device_mesh((n,))
    x = dt.distribute_tensor(np.arange(8.0 * n).reshape(2 * n, 4), mesh, [S(0)])
    try:
        if case == "targets":
            x.redistribute([R] if rank == 0 else [S(1)])
        elif case == "loop_skip":
            for i in range(3):
                if not (rank == 1 and i == 1):
                    y = x.redistribute([R])
            x.redistribute([S(1)])
        elif case == "print_on_one_rank":
            if rank == 0:
                print(x.full_tensor())
            x.redistribute([S(1)])
        elif case == "from_local_placements":
            dt.DTensor.from_local(np.arange(2.0), mesh, [S(0)] if rank == 0 else [R])
        elif case.startswith("rows_"):
            a, b = (TARGETS[int(c)] for c in case[5:])
            mesh2 = dt.init_device_mesh((2, n // 2))
            z = dt.distribute_tensor(np.arange(64.0).reshape(8, 8), mesh2, [S(0), S(1)])
            z.redistribute(a if rank < n // 2 else b)
        elif case.startswith("exit_"):
            if rank == 2:
                sys.exit(int(case[5:]))
            x.full_tensor()
        elif case == "stuck":
            if rank == 0:
                time.sleep(JOB_S)
            x.full_tensor()
        else:
            raise SystemExit("unknown case " + case)
        report("", "")
    except Exception as e:
        report(type(e).__name__, str(e))
    """
).replace("JOB_S", str(JOB_LIMIT_S))


def _run(tmp_path: Path, case: str, ranks: int, env: dict[str, str] | None = None) -> tuple[dict[int, list[str]], str, float, int]:
    out = tmp_path / case
    out.mkdir()
    script = tmp_path / "spmd_case.py"
    script.write_text(SCRIPT)
    environ = clean_mpi_env()
    environ["DTENSOR_NP_CHECK_SPMD"] = "1"
    environ.update(env or {})
    start = time.perf_counter()
    proc = subprocess.run(
        [str(MPIEXEC), "-n", str(ranks), sys.executable, str(script), case, str(out)],
        capture_output=True, text=True, timeout=JOB_LIMIT_S + 30, env=environ,
    )
    elapsed = time.perf_counter() - start
    outcomes = {int(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}
    return outcomes, proc.stdout + proc.stderr, elapsed, proc.returncode


def line_of(code: str, after: str = "") -> str:
    """``spmd_case.py:N``, N the script's line holding ``code`` (the first after the line holding ``after``)."""
    lines = SCRIPT.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return f"spmd_case.py:{1 + next(i for i in range(start, len(lines)) if code in lines[i])}"


DIVERGENT = {
    # case: (ranks, error every rank raises, fragments its message names)
    "targets": (2, "SpmdError", ["all_gather", "all_to_all", line_of("[R] if rank == 0 else [S(1)]")]),
    "loop_skip": (2, "SpmdError", [line_of("y = x.redistribute([R])"), line_of("x.redistribute([S(1)])", "loop_skip")]),
    "print_on_one_rank": (2, "SpmdError", [line_of("print(x.full_tensor())"),
                                           line_of("x.redistribute([S(1)])", "print_on_one_rank")]),
    "from_local_placements": (4, "ShardingError", ["same placements", "ranks [1, 2, 3]"]),
}
DIVERGENT.update(
    {f"rows_{a}{b}": (4, "SpmdError", ["SPMD check", "rank 0", "rank 3"]) for a in range(3) for b in range(3) if a != b}
)


@pytest.mark.parametrize("case", sorted(DIVERGENT))
def test_ranks_on_different_paths_all_raise_instead_of_hanging(tmp_path: Path, case: str):
    ranks, error, fragments = DIVERGENT[case]
    outcomes, output, elapsed, code = _run(tmp_path, case, ranks)
    print(f"{case}: {elapsed:.1f} s, exit code {code}")
    assert sorted(outcomes) == list(range(ranks)), f"ranks {sorted(outcomes)} reported; output:\n{output}"
    for rank, (kind, message) in outcomes.items():
        assert kind == error, f"rank {rank} raised {kind or 'nothing'}: {message}\n{output}"
        for fragment in fragments:
            assert fragment in message, f"rank {rank}: {fragment!r} not in {message!r}"
    assert len({m for _, m in outcomes.values()}) == 1, "every rank must raise the same message"
    assert elapsed < 30, f"{case} took {elapsed:.1f} s"


@pytest.mark.parametrize("code", [1, 0])
def test_sys_exit_on_one_rank_ends_the_job(tmp_path: Path, code: int):
    """Rank 2 of 4 calls sys.exit while the others wait for it in a collective: the job ends, saying why."""
    outcomes, output, elapsed, returncode = _run(tmp_path, f"exit_{code}", 4)
    print(f"sys.exit({code}) on rank 2 of 4: job ended after {elapsed:.1f} s, exit code {returncode}")
    assert returncode != 0, output
    assert "rank(s) [2] left the program" in output and "all_gather" in output and "spmd_case.py:" in output, output
    assert not outcomes, f"no rank should have finished: {outcomes}"
    assert elapsed < 20, f"the job took {elapsed:.1f} s to end"


def test_watchdog_aborts_a_stuck_job_with_a_report(tmp_path: Path):
    """Rank 0 never arrives: after DTENSOR_NP_COLLECTIVE_TIMEOUT the waiting ranks report and the job is aborted."""
    env = {"DTENSOR_NP_COLLECTIVE_TIMEOUT": "2", "DTENSOR_NP_CHECK_SPMD": "0"}  # waiting in the all_gather itself
    outcomes, output, elapsed, returncode = _run(tmp_path, "stuck", 4, env)
    print(f"stuck job aborted after {elapsed:.1f} s, exit code {returncode}")
    assert returncode != 0, output
    for rank in (1, 2, 3):
        assert f"[rank {rank}] dtensor_np watchdog: waited" in output, output
    assert "in all_gather" in output and ", issued at" in output and "spmd_case.py:" in output, output
    assert elapsed < JOB_LIMIT_S, f"the stuck job was not aborted by the watchdog ({elapsed:.1f} s)"


def test_a_failed_look_at_the_main_thread_never_ends_the_job(monkeypatch, capsys):
    """An error inside the watchdog's own poll (here: reading the main thread's frame) is reported once, and the
    watchdog goes on; it aborts nothing (an escaped thread error would have aborted the job, see collectives.abort)."""
    from collectives import watchdog

    looks, aborted = [], []

    def broken_look(frame):
        looks.append(frame)
        raise RuntimeError("frame went away")

    class World:
        def Get_rank(self) -> int:
            return 0

        def Get_size(self) -> int:
            return watchdog.NOTICE_LIMIT + 1  # no exit notices: nothing of MPI is touched

        def Abort(self, code: int) -> None:
            aborted.append(code)

    monkeypatch.setattr(watchdog, "_waiting_in", broken_look)
    dog = watchdog.Watchdog(World(), None, timeout=0.01)
    dog.thread.start()
    deadline = time.monotonic() + 30
    while len(looks) < 3 and time.monotonic() < deadline:
        time.sleep(watchdog.POLL_S)
    dog.stop.set()
    dog.thread.join()
    assert len(looks) >= 3, f"the watchdog stopped looking after its error: {len(looks)} look(s)"
    assert not aborted, f"the watchdog aborted the job: {aborted}"
    assert capsys.readouterr().err.count(
        "[rank 0] dtensor_np watchdog: one look at the main thread failed (RuntimeError: frame went away); "
        "the watchdog goes on") == 1


def test_check_spmd_switches_and_call_sites():
    """The check is on in this suite (conftest), off inside check_spmd(False), and names the user's line."""
    assert collectives.checking_spmd()
    with dt.check_spmd(False):
        assert not collectives.checking_spmd()
        with dt.check_spmd():
            assert collectives.checking_spmd()
        assert not collectives.checking_spmd()
    assert collectives.checking_spmd()
    from collectives.spmd import call_site

    assert call_site().startswith(f"{__file__}:")


@pytest.mark.worlds(simulated=(), mpi=(2, 4))
def test_distribute_tensor_sends_each_rank_only_its_block(world):
    """Only the source rank's data is read (the others pass a zero-strided stand-in); every rank receives its block,
    allocating about its shard (numpy allocations traced by tracemalloc), never the whole array."""
    import tracemalloc

    rank = world.ranks[0]
    n = world.size
    mesh = dt.DeviceMesh((n,), backend="mpi") if n != 4 else dt.DeviceMesh((2, 2), backend="mpi")
    shape = (64 * n, 96)
    full = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    for placements in ([dt.Shard(0)] * mesh.ndim, [dt.Shard(1)] + [dt.Replicate()] * (mesh.ndim - 1),
                       [dt.Replicate()] * (mesh.ndim - 1) + [dt.Shard(0)]):
        source = 1
        array = full if rank == source else np.broadcast_to(np.zeros((), np.float64), shape)
        tracemalloc.start()
        with dt.comm_counter() as counter:
            x = dt.distribute_tensor(array, mesh, placements, src_data_rank=source)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        block = x.to_local()
        np.testing.assert_array_equal(block, full[x.spec.local_index(rank)])
        assert counter.counts["scatter"] == 1 and counter.total == 1, counter
        if rank != source:
            assert peak <= 1.5 * block.nbytes + 64 * 1024, (placements, peak, block.nbytes)
