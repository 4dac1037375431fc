"""Ranks agree by default (issue 40 items 4 and 5): rank-divergent input raises on every rank, no endless hang.

With the DEFAULT settings (no ``DTENSOR_NP_CHECK_SPMD``, no collective timeout
set), one ``mpiexec`` job per world size runs every case below with a bad or
different input on ONE rank only (the last), then one distribute +
``full_tensor`` on every rank: every rank must raise, and that next collective
must work (the ranks are in step again).  The default agreement
(``collectives.spmd``: an exchange of a call fingerprint before every collective, through shared memory within
a node, ``collectives.handshake``, or one ``Allgather`` with ``DTENSOR_NP_AGREE=mpi``: both run here) makes divergent collectives meet in the same small call; it also
carries a running fingerprint of the local calls since the previous collective
(a different valid index or item assignment on one rank) and whether this rank
raised since (a local error on one rank only: its values, or its arguments); a rank
that would wait forever is the default collective timeout's business (600 s,
``collectives.watchdog``), tested here with a low value on a deliberately hung job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launching import MPIEXEC, clean_mpi_env

HANG_S = 20  # a case's own guard in the job: a rank stuck this long reports HUNG and ends the job

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading
    import numpy as np
    import dtensor_np as dt
    from mpi4py import MPI

    rank, n = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    bad = n - 1
    b = rank == bad
    R, S = dt.Replicate(), dt.Shard
    mesh = dt.init_device_mesh((n,))
    full = np.arange(8.0 * n * 3).reshape(4 * n, 6)

    def x0():
        return dt.distribute_tensor(full, mesh, [S(0)])

    def x1():
        return dt.distribute_tensor(full, mesh, [S(1)])

    def case_distribute_tensor():
        dt.distribute_tensor(full, mesh, [S(1)] if b else [S(0)])

    def case_from_local():
        dt.DTensor.from_local(np.ones((4, 5 if b else 6)), mesh, [S(0)])

    def case_redistribute():
        x0().redistribute([S(1)] if b else [R])

    def case_index_value():
        x0()[1 if b else 0].full_tensor()

    def case_index_out_of_range():
        x0()[10 ** 6 if b else 0].full_tensor()

    def case_setitem():
        x = x0()
        x[1 if b else 0] = 5.0  # rows of rank 0's shard: no collective, the ranks' arrays differ from here
        x.full_tensor()

    def case_setitem_list():
        x = x0()
        x[1 if b else 0] = [5.0] * 6  # a list value: the call keeps no fast-path entry, its key still counts
        x.full_tensor()

    def case_local_error():
        with np.errstate(divide="raise"):  # log(0) on the last rank's shard only: a local error on one rank
            np.log(x0() - full[-1, -1]).full_tensor()

    def case_reshape_error():
        x0().reshape((5, -1) if b else (2 * n, 12)).full_tensor()  # refused on one rank only, local on the others

    def case_reduction():
        np.sum(x0(), axis=1 if b else 0).full_tensor()

    def case_matmul():
        (x1() @ dt.distribute_tensor(np.ones((5 if b else 6, 2)), mesh, [S(0)])).full_tensor()

    def case_reshape():
        x0().reshape((6, 4 * n) if b else (2 * n, 12)).full_tensor()  # a gather on one rank, none on the others

    report = open(os.path.join(sys.argv[1], f"{rank}.jsonl"), "w", buffering=1)  # a line per case, as it ends
    for name in sys.argv[2].split(","):
        fn = globals()["case_" + name]
        guard = threading.Timer(HANG_S, lambda: (print("HUNG", rank, name, flush=True), os._exit(3)))
        guard.daemon = True
        guard.start()
        try:
            fn()
            outcome = ""
        except Exception as e:
            outcome = type(e).__name__ + ": " + str(e)
        try:
            got = dt.distribute_tensor(full, mesh, [S(0)]).full_tensor()
            after = "" if np.array_equal(got, full) else "full_tensor gave " + repr(got.tolist())
        except Exception as e:
            after = type(e).__name__ + ": " + str(e)
        guard.cancel()
        report.write(json.dumps([name, outcome, after]) + "\\n")
    """
).replace("HANG_S", str(HANG_S))

CASES = ["distribute_tensor", "from_local", "redistribute", "reduction", "matmul", "reshape", "index_out_of_range",
         "index_value", "setitem", "setitem_list", "local_error", "reshape_error"]


def default_env() -> dict[str, str]:
    env = clean_mpi_env()
    for name in ("DTENSOR_NP_CHECK_SPMD", "DTENSOR_NP_AGREE", "DTENSOR_NP_COLLECTIVE_TIMEOUT"):
        env.pop(name, None)
    return env


_JOBS: dict[tuple[int, str], tuple[dict[int, dict[str, list[str]]], str]] = {}


def _job(tmp_path_factory: pytest.TempPathFactory, ranks: int,
         exchange: str = "shm") -> tuple[dict[int, dict[str, list[str]]], str]:
    """Every case in one job of ``ranks`` ranks (run once per world size and agreement exchange, ``shm`` the
    default or ``mpi``): {rank: {case: [outcome, after]}}, the job's output."""
    if (ranks, exchange) not in _JOBS:
        out = tmp_path_factory.mktemp(f"spmd_default_{ranks}_{exchange}")
        script = out / "one_rank_default.py"
        script.write_text(SCRIPT)
        env = default_env()
        if exchange == "mpi":
            env["DTENSOR_NP_AGREE"] = "mpi"
        proc = subprocess.run([str(MPIEXEC), "-n", str(ranks), sys.executable, str(script), str(out), ",".join(CASES)],
                              capture_output=True, text=True, timeout=HANG_S * len(CASES) + 60, env=env)
        results = {int(p.stem): {name: [outcome, after] for name, outcome, after in map(json.loads, p.read_text().splitlines())}
                   for p in out.glob("*.jsonl")}
        _JOBS[ranks, exchange] = results, proc.stdout + proc.stderr
    return _JOBS[ranks, exchange]


@pytest.mark.parametrize(("ranks", "exchange"), [(2, "shm"), (4, "shm"), (2, "mpi")])
@pytest.mark.parametrize("case", CASES)
def test_one_rank_differs_every_rank_raises_and_the_next_collective_works(tmp_path_factory, ranks: int, exchange: str,
                                                                            case: str):
    results, output = _job(tmp_path_factory, ranks, exchange)
    for rank in range(ranks):
        assert case in results.get(rank, {}), f"rank {rank} never finished the case; the job's output:\n{output}"
        outcome, after = results[rank][case]
        assert outcome, f"rank {rank} raised nothing (rank {ranks - 1} had the other input)"
        assert "Error" in outcome.split(":")[0], f"rank {rank}: {outcome}"
        assert not after, f"rank {rank} raised {outcome!r}, then the next distribute + full_tensor: {after}"


def test_a_collective_disagreement_names_every_rank_call(tmp_path_factory):
    """The SpmdError of a different redistribute target on one rank names each rank's collective, on every rank."""
    results, _ = _job(tmp_path_factory, 2)
    messages = {results[r]["redistribute"][0] for r in range(2)}
    assert len(messages) == 1, messages
    (message,) = messages
    assert message.startswith("SpmdError: the ranks issue different collectives"), message
    assert "rank 0: all_gather" in message and "rank 1: all_to_all" in message, message
    assert "one_rank_default.py:" in message, message


HUNG = textwrap.dedent(
    """
    import numpy as np
    import dtensor_np as dt
    from collectives import MpiBackend
    from mpi4py import MPI

    mesh = dt.init_device_mesh((2,))
    x = dt.distribute_tensor(np.arange(8.0), mesh, [dt.Shard(0)])
    if MPI.COMM_WORLD.Get_rank() == 0:
        x.full_tensor()  # waits for rank 1 in the collective's agreement
    else:
        MpiBackend().barrier()  # waits for rank 0 in a barrier: neither ever returns
    print("RETURNED", flush=True)
    """
)


def test_default_timeout_aborts_a_hung_job_with_each_rank_report(tmp_path: Path):
    """Two ranks wait in different collectives forever: a low timeout aborts the job, each rank saying where it waits."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    env = default_env()
    env["DTENSOR_NP_COLLECTIVE_TIMEOUT"] = "2"
    proc = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "RETURNED" not in output, output
    for rank in (0, 1):
        assert f"[rank {rank}] dtensor_np watchdog: waited" in output, output
    assert "hung.py:10" in output and "hung.py:12" in output, output


def test_a_different_local_call_names_the_collective_where_every_rank_raises(tmp_path_factory):
    """A different valid index on one rank (no collective of its own): every rank raises at the next collective,
    saying the local calls differed."""
    results, _ = _job(tmp_path_factory, 2)
    for rank in range(2):
        for case in ("index_value", "setitem", "setitem_list"):
            outcome = results[rank][case][0]
            assert outcome.startswith("SpmdError: the ranks made different local calls"), (rank, case, outcome)


def test_the_full_check_compares_the_local_calls_too(tmp_path: Path):
    """Under DTENSOR_NP_CHECK_SPMD=1 (the full check, the mode this suite runs in) a different valid index or item
    assignment on one rank raises on every rank as well, and the ranks stay in step."""
    script = tmp_path / "one_rank_default.py"
    script.write_text(SCRIPT)
    env = default_env()
    env["DTENSOR_NP_CHECK_SPMD"] = "1"
    cases = ["index_value", "setitem", "setitem_list"]
    proc = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script), str(tmp_path), ",".join(cases)],
                          capture_output=True, text=True, timeout=HANG_S * len(cases) + 60, env=env)
    results = {int(p.stem): {name: [outcome, after] for name, outcome, after in map(json.loads, p.read_text().splitlines())}
               for p in tmp_path.glob("*.jsonl")}
    for rank in range(2):
        for case in cases:
            assert case in results.get(rank, {}), f"rank {rank} never finished {case}:\n{proc.stdout + proc.stderr}"
            outcome, after = results[rank][case]
            assert outcome.startswith("SpmdError: SPMD check: the ranks made different local calls"), (rank, case, outcome)
            assert not after, (rank, case, after)
