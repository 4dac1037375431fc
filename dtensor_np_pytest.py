"""dtensor_np's pytest plugin (module ``dtensor_np_pytest``): one test body on simulated meshes and, with ``--dt-mpi``, on real MPI ranks.

Loaded by pytest through the ``pytest11`` entry point; it does nothing for a
test that uses none of its markers (the only cost: two options and two
marker names).  It is a top-level module, not ``dtensor_np.pytest_plugin``,
and imports neither NumPy nor dtensor_np until a test asks for its fixtures:
pytest loads entry-point plugins before any ``conftest.py``, which may set
the environment (BLAS threads, bytecode paths) that those imports read.  A test that takes the ``mesh`` fixture and carries

* ``@pytest.mark.world_sizes(1, 2, 4)`` runs on 1-d meshes of those sizes,
* ``@pytest.mark.mesh_shapes((2, 2), (4,))`` runs on meshes of those shapes,

as parametrized items ``[sim2x2]``, ``[sim4]``, ...: every rank simulated in
this process.  With ``pytest --dt-mpi`` each shape of more than one rank
also runs as an item ``[mpi2x2]`` in its own ``mpiexec -n 4`` job, through
pytest-isolate-mpi, with per-rank reports.  Under MPI a test that runs past
``--dt-timeout`` seconds (default 300) aborts its job: every rank prints the
stack of each of its threads (``faulthandler``, past pytest's capture) and
exits, which ends the job; the collective watchdog
(``DTENSOR_NP_COLLECTIVE_TIMEOUT``, one second later unless already set)
is the backstop that aborts a rank stuck in a collective.  The
``shared_tmp_path`` fixture is one directory that every rank sees (rank 0
makes it and broadcasts its name).

Example:
    >>> case_id("mpi", (2, 2)), case_id("simulated", (4,))
    ('mpi2x2', 'sim4')
"""
from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["MPI_ENV", "TIMEOUT_OPTION_ENV", "case_id", "mesh_cases"]

MPI_ENV = "DTENSOR_NP_PYTEST_MPI"  # carried to the MPI jobs (pytest-isolate-mpi does not pass on our options)
TIMEOUT_OPTION_ENV = "DTENSOR_NP_PYTEST_TIMEOUT"
FORKED_ENV = "PYTEST_ISOLATE_MPI_IS_FORKED"  # set by pytest-isolate-mpi in the ranks of its jobs
DEFAULT_TIMEOUT_S = 300.0
_MARKERS = ("world_sizes", "mesh_shapes")
_PATH_BYTES = 4096


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dtensor_np")
    group.addoption("--dt-mpi", action="store_true", default=False,
                    help="also run tests marked world_sizes/mesh_shapes under mpiexec, one job per mesh shape")
    group.addoption("--dt-timeout", type=float, default=None,
                    help=f"seconds before an MPI test aborts its job with every rank's stack (default {DEFAULT_TIMEOUT_S:g})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "world_sizes(*sizes): run a test taking `mesh` on 1-d meshes of these sizes")
    config.addinivalue_line("markers", "mesh_shapes(*shapes): run a test taking `mesh` on meshes of these shapes")
    if config.getoption("dt_mpi", False) and not os.environ.get(FORKED_ENV):
        if not config.pluginmanager.has_plugin("pytest_isolate_mpi"):
            raise pytest.UsageError("--dt-mpi runs its MPI items through pytest-isolate-mpi: pip install pytest-isolate-mpi")
        timeout = config.getoption("dt_timeout", None) or DEFAULT_TIMEOUT_S
        # pytest-isolate-mpi passes the verbosity on as "-" + "v" * count: a bare "-" for `pytest -q`
        if config.option.verbose < 0:
            config.option.verbose = 0
        os.environ[MPI_ENV] = "1"
        os.environ[TIMEOUT_OPTION_ENV] = f"{timeout:g}"
        # the ranks' collective watchdog: a backstop, one second after the stacks (collectives.watchdog)
        os.environ.setdefault("DTENSOR_NP_COLLECTIVE_TIMEOUT", f"{timeout + 1:g}")


def case_id(kind: str, shape: tuple[int, ...]) -> str:
    """The id of a parametrized item: ``sim`` or ``mpi`` and the mesh shape."""
    return ("sim" if kind == "simulated" else "mpi") + "x".join(map(str, shape))


def _shapes(item: Any) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    for name in _MARKERS:
        for marker in item.iter_markers(name):
            for value in marker.args:
                shape = (value,) if name == "world_sizes" else value
                if not (isinstance(shape, tuple) and shape and all(isinstance(n, int) and n > 0 for n in shape)):
                    raise pytest.UsageError(
                        f"@pytest.mark.{name}: expected {'positive ints' if name == 'world_sizes' else 'tuples of positive ints'}, "
                        f"got {value!r}"
                    )
                if shape not in shapes:
                    shapes.append(shape)
    return shapes


def mesh_cases(shapes: list[tuple[int, ...]], mpi: bool, timeout: float) -> list[Any]:
    """The ``pytest.param`` of each (kind, shape, ranks) case: simulated, and under MPI for shapes of 2+ ranks.

    Example:
        >>> [p.id for p in mesh_cases([(1,), (2, 2)], mpi=True, timeout=60)]
        ['sim1', 'sim2x2', 'mpi2x2']
    """
    params = [pytest.param(("simulated", s), math.prod(s), id=case_id("simulated", s)) for s in shapes]
    if mpi:
        params += [
            pytest.param(("mpi", s), math.prod(s), id=case_id("mpi", s),
                         marks=pytest.mark.mpi(timeout=2 * timeout + 30))  # the outer bound; ranks abort at `timeout`
            for s in shapes if math.prod(s) > 1
        ]
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mesh" not in metafunc.fixturenames or not any(
        metafunc.definition.get_closest_marker(name) for name in _MARKERS
    ):
        return
    timeout = float(os.environ.get(TIMEOUT_OPTION_ENV) or DEFAULT_TIMEOUT_S)
    mpi = bool(os.environ.get(MPI_ENV))
    metafunc.parametrize(("dt_mesh_case", "mpi_ranks"), mesh_cases(_shapes(metafunc.definition), mpi, timeout))


@pytest.fixture
def dt_mesh_case() -> tuple[str, tuple[int, ...]]:
    """Replaced by the markers' parametrization; without a marker the ``mesh`` fixture is a usage error."""
    raise pytest.UsageError(
        "the `mesh` fixture needs @pytest.mark.world_sizes(...) or @pytest.mark.mesh_shapes(...) on the test"
    )


def _abort_after(config: pytest.Config, timeout: float, rank: int) -> threading.Timer:
    """A timer that, ``timeout`` seconds on, prints every thread's stack of this rank (past pytest's capture) and ends it."""

    def fire() -> None:
        capture = config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            sys.stderr.write(f"[rank {rank}] dtensor_np: the test ran past --dt-timeout={timeout:g} s; its stacks:\n")
            sys.stderr.flush()
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.flush()
        time.sleep(1.0)  # the other ranks print theirs before the launcher ends the job
        os._exit(1)

    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    return timer


@pytest.fixture
def mesh(request: pytest.FixtureRequest, dt_mesh_case: tuple[str, tuple[int, ...]], mpi_ranks: int) -> Iterator[Any]:
    """The mesh of this item: simulated in this process, or over the ranks of this MPI job."""
    import dtensor_np as dt

    kind, shape = dt_mesh_case
    if kind == "simulated":
        yield dt.DeviceMesh(shape)
        return
    mesh = dt.init_device_mesh(shape, backend="mpi")
    import collectives

    timeout = float(os.environ.get(TIMEOUT_OPTION_ENV) or DEFAULT_TIMEOUT_S)
    timer = _abort_after(request.config, timeout, collectives.get_backend("mpi").rank)
    try:
        yield mesh
    finally:
        timer.cancel()


@pytest.fixture
def shared_tmp_path(tmp_path: Path, mesh: Any) -> Path:
    """A temporary directory that is the same on every rank of ``mesh`` (rank 0 makes it, then shares its name)."""
    if mesh.backend != "mpi":
        return tmp_path
    import collectives
    import numpy as np

    backend = collectives.get_backend("mpi")
    name = np.zeros(_PATH_BYTES, np.uint8)
    if backend.rank == 0:
        made = os.fsencode(tempfile.mkdtemp(prefix="shared-", dir=tmp_path))
        if len(made) >= _PATH_BYTES:
            raise ValueError(f"shared_tmp_path: expected a path under {_PATH_BYTES} bytes, got {len(made)}")
        name[: len(made)] = np.frombuffer(made, np.uint8)
    group = (tuple(range(backend.world_size)),)
    shared = backend.broadcast({backend.rank: name}, group, root=0)[backend.rank]
    return Path(os.fsdecode(bytes(np.asarray(shared)).rstrip(b"\0")))
