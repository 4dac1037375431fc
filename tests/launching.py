"""Starting a script under ``mpiexec`` from a test: where mpiexec is, and a clean environment.

Example::

    subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "script.py"], env=clean_mpi_env())
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

MPIEXEC = Path(sys.executable).with_name("mpiexec")  # the mpich wheel's, next to this venv's Python


def clean_mpi_env() -> dict[str, str]:
    """This process's environment without the MPI launcher variables (a test may itself run under mpiexec)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HYDRA_"))}
    env.pop("PYTEST_ISOLATE_MPI_IS_FORKED", None)
    return env
