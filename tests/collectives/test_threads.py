"""BLAS threads per MPI rank: each rank gets its share of the node's cores unless the user chose.

The decision is a pure function (tested directly); one test starts a real
``mpiexec -n 2`` job with the thread variables removed and checks that every
rank's BLAS pool was cut to ``cores // 2``.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from launching import MPIEXEC, clean_mpi_env

from collectives.threads import USER_THREAD_VARIABLES, _local_ranks, threads_per_rank


@pytest.mark.parametrize(
    "cores, local_ranks, environ, expected",
    [
        (16, 4, {}, 4),
        (16, 3, {}, 5),
        (2, 4, {}, 1),
        (1, 1, {}, 1),
        (16, 4, {"DTENSOR_NP_THREADS": "3"}, 3),
        (16, 4, {"DTENSOR_NP_THREADS": "0"}, None),
        (16, 4, {"DTENSOR_NP_THREADS": "2", "OMP_NUM_THREADS": "8"}, 2),  # ours is the more specific
        *[(16, 4, {name: "2"}, None) for name in USER_THREAD_VARIABLES],
    ],
)
def test_threads_per_rank(cores, local_ranks, environ, expected):
    assert threads_per_rank(cores, local_ranks, environ) == expected
    assert threads_per_rank(cores, local_ranks, environ, node_cores=cores) == expected  # not pinned


def test_a_rank_pinned_by_the_launcher_keeps_its_cores():
    assert threads_per_rank(4, 4, {}, node_cores=16) == 4  # -bind-to core:4: already its share
    assert threads_per_rank(1, 4, {}, node_cores=16) == 1
    assert threads_per_rank(4, 4, {"DTENSOR_NP_THREADS": "2"}, node_cores=16) == 2


def test_a_bad_thread_setting_says_what_it_wanted():
    with pytest.raises(ValueError, match=r"DTENSOR_NP_THREADS must be a whole number of threads per rank, got 'four'"):
        threads_per_rank(8, 2, {"DTENSOR_NP_THREADS": "four"})


def test_local_ranks_come_from_the_launcher(monkeypatch):
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE", "PALS_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert _local_ranks(8) == 8  # no word from the launcher: the whole world on one node
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    assert _local_ranks(8) == 2
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")
    assert _local_ranks(8) == 4


SCRIPT = """
import json, os, sys
import numpy as np, threadpoolctl
import dtensor_np as dt
mesh = dt.init_device_mesh((2,))
backend = dt.runtime.backend_for(mesh)
x = dt.distribute_tensor(np.ones((64, 64)), mesh, [dt.Shard(1)])
(x @ x.T).full_tensor()  # BLAS work under the limit
pools = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
report = {"rank": backend.rank, "limit": backend.blas_threads, "pools": pools,
          "cores": len(os.sched_getaffinity(0)), "node_cores": os.cpu_count()}
with open(os.path.join(sys.argv[1], f"rank{backend.rank}.json"), "w") as f:  # one file per rank: no interleaving
    json.dump(report, f)
"""


def test_every_rank_of_an_mpi_job_gets_its_share_of_the_cores(tmp_path):
    env = {k: v for k, v in clean_mpi_env().items() if k not in USER_THREAD_VARIABLES and k != "DTENSOR_NP_THREADS"}
    done = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(reports):
        assert report["rank"] == rank
        pinned = report["cores"] < report["node_cores"]
        share = report["cores"] if pinned else max(1, report["cores"] // 2)
        assert report["limit"] == share
        assert report["pools"] and all(n == share for n in report["pools"]), report
