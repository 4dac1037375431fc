"""Test set-up shared by every test: the ``world`` fixture and MPI-safe hypothesis.

A test that takes the ``world`` fixture runs once per simulated world size
(every rank inside this process) and once per MPI world size under
``mpiexec -n N`` (pytest-isolate-mpi starts the jobs; ``--dt-mpi-jobs=module``
in setup.cfg makes it one job for the MPI cases of a module and world size,
see dtensor_np_pytest), so one ``pytest`` command covers both.  Narrow the sizes with
``@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))``.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The suite starts about 500 Pythons (the ranks of 148 MPI jobs and the example
# scripts), and each imports the package, the test module and hypothesis, which
# pytest rewrites for its asserts.  Where writing bytecode is turned off
# (PYTHONDONTWRITEBYTECODE), every one of them compiled and rewrote all of that
# again: a 4-rank test took 5.4 s instead of 2.9 s on the 2-core CI machine.  So
# the suite keeps its bytecode under .pytest_cache/pycache instead, never in the
# source tree, for this process and, through the environment, the jobs it starts.
if sys.dont_write_bytecode:
    _PYCACHE = str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "pycache")
    os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = _PYCACHE
    sys.dont_write_bytecode = False

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# MPI jobs started by the tests run up to 4 ranks on a 2-core CI machine: one
# BLAS thread per rank, and MPICH ranks that yield the core while they wait
# (busy-polling oversubscribed ranks slows 4-rank tests about 2.5 times).
# Every test runs with the SPMD check on (collectives.spmd): ranks that take different
# paths raise instead of hanging.
for _name, _value in (
    ("DTENSOR_NP_CHECK_SPMD", "1"),
    ("OMP_NUM_THREADS", "1"),
    ("OPENBLAS_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
    ("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1"),
    # SciPy reads this once, when it is first imported: its array-API paths (and
    # scikit-learn's array_api_dispatch, which needs them) for tests/test_array_api_consumers.py.
    ("SCIPY_ARRAY_API", "1"),
):
    os.environ.setdefault(_name, _value)

SIMULATED_SIZES = (1, 2, 3, 4, 8)
MPI_SIZES = (2,)
"""MPI world sizes of a test without ``worlds(mpi=...)``.  A 4-rank job costs about 4.5 s on the 2-core CI
machine (four oversubscribed Pythons starting pytest), a 2-rank job about 1 s: 4 ranks run where a test asks for
them (2-D meshes, sub-groups: ``worlds(mpi=(2, 4))``) and for the collectives layer, every size of every test
runs simulated."""
MPI_SIZES_COLLECTIVES = (2, 4)
UNDER_MPI = bool(os.environ.get("PYTEST_ISOLATE_MPI_IS_FORKED"))

# Every rank of an MPI job must draw the same examples in the same order, and
# never replay a saved failure that only one rank has seen.
settings.register_profile(
    "mpi",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
)
settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("mpi" if UNDER_MPI else "default")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "worlds(simulated=..., mpi=...): world sizes for a test using the `world` fixture",
    )
    # pytest-isolate-mpi forwards the verbosity as "-<v * count>", which is a
    # bare "-" for `pytest -q`; keep the sub-sessions at normal verbosity.
    if config.option.verbose < 0 and not UNDER_MPI:
        config.option.verbose = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", default=False, help="run the long soak tests"
    )


@dataclass(frozen=True)
class World:
    """The ranks a test runs on: a collectives backend and its world size."""

    kind: str
    size: int
    backend: Any

    @property
    def ranks(self) -> tuple[int, ...]:
        """The world ranks whose arrays this process holds."""
        return self.backend.ranks

    def __str__(self) -> str:
        return f"{self.kind}{self.size}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "world" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("worlds")
    sims = marker.kwargs.get("simulated", SIMULATED_SIZES) if marker else SIMULATED_SIZES
    default = MPI_SIZES_COLLECTIVES if "collectives" in Path(str(metafunc.definition.fspath)).parts else MPI_SIZES
    mpis = marker.kwargs.get("mpi", default) if marker else default
    params = [pytest.param("simulated", n, id=f"sim{n}") for n in sims]
    params += [
        pytest.param("mpi", n, id=f"mpi{n}", marks=pytest.mark.mpi(timeout=240))
        for n in mpis
    ]
    metafunc.parametrize(("world_kind", "mpi_ranks"), params)


@pytest.fixture
def world(world_kind: str, mpi_ranks: int) -> World:
    """The backend for this test case: simulated in-process, or real MPI."""
    import collectives

    if world_kind == "simulated":
        return World("simulated", mpi_ranks, collectives.SimulatedBackend(mpi_ranks))
    backend = collectives.MpiBackend()
    assert backend.world_size == mpi_ranks, (
        f"expected an MPI world of {mpi_ranks} ranks, got {backend.world_size}"
    )
    return World("mpi", mpi_ranks, backend)


@pytest.fixture
def cupy() -> Any:
    """The ``cupy`` module, for the tests marked ``gpu``: skipped cleanly without CuPy or a CUDA device (as in CI)."""
    module = pytest.importorskip("cupy")
    try:
        devices = module.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver, no runtime: no device
        devices = 0
    if devices == 0:
        pytest.skip("no CUDA device")
    return module
