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

``--dt-mpi-jobs=module`` runs every MPI item (``@pytest.mark.mpi``, ours
and any other) of a test module and world size in ONE ``mpiexec`` job
instead of one job per item: the ranks start Python, pytest and the module
once.  Each rank writes each item's reports as it finishes it, so a
failure is reported per item and per rank as before; an item that crashes
its job or runs past its timeout (its ``mpi(timeout=...)``, else
``--mpi-default-test-timeout``, else ``--dt-timeout``: every rank prints its
stacks and exits) fails alone, with the job's output, and the module's
items after it run on in a new job.

Example:
    >>> case_id("mpi", (2, 2)), case_id("simulated", (4,))
    ('mpi2x2', 'sim4')
"""
from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["MPI_ENV", "TIMEOUT_OPTION_ENV", "case_id", "mesh_cases", "module_jobs"]

MPI_ENV = "DTENSOR_NP_PYTEST_MPI"  # carried to the MPI jobs (pytest-isolate-mpi does not pass on our options)
TIMEOUT_OPTION_ENV = "DTENSOR_NP_PYTEST_TIMEOUT"
FORKED_ENV = "PYTEST_ISOLATE_MPI_IS_FORKED"  # set by pytest-isolate-mpi in the ranks of its jobs
BATCH_ENV = "DTENSOR_NP_PYTEST_MODULE_JOB"  # in the ranks of a --dt-mpi-jobs=module job: the items' timeout
REPORTS_ENV = "PYTEST_MPI_REPORTS_PATH"  # where the ranks of a job write their reports (pytest-isolate-mpi's name)
REPORT_FD_ENV = "DTENSOR_NP_ABORT_REPORT_FD"  # collectives.abort: where a rank's abort report goes ("<pid>:<fd>")
DEFAULT_TIMEOUT_S = 300.0
_MARKERS = ("world_sizes", "mesh_shapes")
_PATH_BYTES = 4096

if os.environ.get(FORKED_ENV) and REPORT_FD_ENV not in os.environ:
    # A rank of an MPI job: pytest is about to capture its stderr (file descriptor 2) into a temporary file, which
    # dies unread when a rank aborts the job (the except-hook and the collective watchdog of collectives.abort).
    # This plugin is imported before the capture starts, so a copy of the real stderr made now takes their
    # reports to the job's output.
    with contextlib.suppress(OSError):
        os.environ[REPORT_FD_ENV] = f"{os.getpid()}:{os.dup(2)}"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dtensor_np")
    group.addoption("--dt-mpi", action="store_true", default=False,
                    help="also run tests marked world_sizes/mesh_shapes under mpiexec, one job per mesh shape")
    group.addoption("--dt-timeout", type=float, default=None,
                    help=f"seconds before an MPI test aborts its job with every rank's stack (default {DEFAULT_TIMEOUT_S:g})")
    group.addoption("--dt-mpi-jobs", choices=("test", "module"), default="test",
                    help="MPI items (@pytest.mark.mpi): one mpiexec job per test (pytest-isolate-mpi's way, the "
                         "default) or one per test module and world size")


@pytest.hookimpl(trylast=True)  # after pytest-isolate-mpi's: the module jobs' hooks then run before its own
def pytest_configure(config: pytest.Config) -> None:
    if (config.getoption("dt_mpi_jobs", "test") == "module" or os.environ.get(BATCH_ENV)) and \
            config.pluginmanager.has_plugin("pytest_isolate_mpi"):
        config.pluginmanager.register(ModuleJobs(config), "dtensor_np_module_jobs")
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


def _abort_after(config: pytest.Config, timeout: float, rank: int, limit: str = "--dt-timeout") -> threading.Timer:
    """A timer that, ``timeout`` seconds on, prints every thread's stack of this rank (past pytest's capture) and ends it."""

    def fire() -> None:
        capture = config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            sys.stderr.write(f"[rank {rank}] dtensor_np: the test ran past {limit}={timeout:g} s; its stacks:\n")
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


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}  # pytest-isolate-mpi's timeout units
_STALL_S = 30.0  # past an item's timeout (when its ranks abort), the job is killed from outside
_OUTPUT_CHARS = 20_000  # the tail of a broken job's output kept in its failure report


def module_jobs(items: list[tuple[str, int]]) -> dict[tuple[str, int], list[str]]:
    """MPI items ``(node id, ranks)`` grouped into jobs: one per test module and world size, in the items' order.

    Example:
        >>> module_jobs([("t.py::a[mpi2]", 2), ("t.py::b[mpi4]", 4), ("t.py::c[mpi2]", 2), ("u.py::d", 2)])
        {('t.py', 2): ['t.py::a[mpi2]', 't.py::c[mpi2]'], ('t.py', 4): ['t.py::b[mpi4]'], ('u.py', 2): ['u.py::d']}
    """
    jobs: dict[tuple[str, int], list[str]] = {}
    for nodeid, ranks in items:
        jobs.setdefault((_module(nodeid), ranks), []).append(nodeid)
    return jobs


def _module(nodeid: str) -> str:
    """The test module of a node id (``tests/test_x.py`` of ``tests/test_x.py::test_y[mpi2]``)."""
    return nodeid.split("::")[0]


def _ranks(item: pytest.Item) -> int:
    """The world size of an MPI item (its ``mpi_ranks`` parameter, as pytest-isolate-mpi reads it)."""
    callspec = getattr(item, "callspec", None)
    return int(callspec.params.get("mpi_ranks", 1)) if callspec is not None else 1


def _timeout(item: pytest.Item, config: pytest.Config) -> float:
    """An MPI item's time limit in seconds: its ``mpi(timeout=...)``, else pytest-isolate-mpi's default, else ours."""
    mark = item.get_closest_marker("mpi")
    timeout = mark.kwargs.get("timeout") if mark is not None else None
    unit = mark.kwargs.get("unit") if mark is not None else None
    if timeout is None:
        timeout = config.getoption("mpi_default_test_timeout", None)
    if timeout is None:
        return config.getoption("dt_timeout", None) or DEFAULT_TIMEOUT_S
    return float(timeout) * _UNITS[unit or config.getoption("mpi_default_test_timeout_unit", None) or "s"]


def _report_file(directory: str, nodeid: str, rank: int) -> Path:
    """Where rank ``rank`` of a module job writes the reports of item ``nodeid``."""
    return Path(directory) / f"{hashlib.sha1(nodeid.encode()).hexdigest()[:20]}.{rank}"


class ModuleJobs:
    """``--dt-mpi-jobs=module``: in pytest's process, one ``mpiexec`` job per test module and world size; in
    the ranks of such a job, each item's reports written to their own file as soon as the item ends."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.jobs: dict[tuple[str, int], list[pytest.Item]] = {}
        self.reports: dict[str, list[Any]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        items = {item.nodeid: item for item in session.items if item.get_closest_marker("mpi")}
        for key, nodeids in module_jobs([(nodeid, _ranks(item)) for nodeid, item in items.items()]).items():
            self.jobs[key] = [items[nodeid] for nodeid in nodeids]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if os.environ.get(FORKED_ENV):
            return self._run_in_rank(item, nextitem) if os.environ.get(BATCH_ENV) else None
        if item.get_closest_marker("mpi") is None or self.config.getoption("no_mpi_isolation", False):
            return None
        if item.nodeid not in self.reports:
            self._run_from(item)
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in self.reports.pop(item.nodeid):
            ihook.pytest_runtest_logreport(report=report)
        # the item ran in the job: tear down here what the next item does not share (as pytest-isolate-mpi does)
        setupstate = item.session._setupstate
        call = pytest.CallInfo.from_call(lambda: setupstate.teardown_exact(nextitem), when="teardown")
        ihook.pytest_runtest_logreport(report=pytest.TestReport.from_item_and_call(item, call))
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _run_from(self, item: pytest.Item) -> None:
        """Run ``item`` and the items after it in its module job; an item that breaks its job fails, the rest
        run on in a new job."""
        job = self.jobs[(_module(item.nodeid), _ranks(item))]
        pending = job[job.index(item):]
        while pending:
            finished, broken = self._job(pending)
            self.reports.update(finished)
            if broken is None:
                return
            index, reports = broken
            self.reports[pending[index].nodeid] = reports
            pending = pending[index + 1:]

    def _job(self, items: list[pytest.Item]) -> tuple[dict[str, list[Any]], tuple[int, list[Any]] | None]:
        """One ``mpiexec`` job of ``items``: the reports of the items every rank finished, and the first item
        that some rank did not finish (its index, and its failure report after any rank's reports)."""
        from pytest_isolate_mpi._plugin import MPIConfiguration
        from pytest_isolate_mpi._subsession import assemble_sub_pytest_cmd

        config, ranks = self.config, _ranks(items[0])
        timeout = max(_timeout(item, config) for item in items)
        launcher = MPIConfiguration(config.getini("mpi_executable"), config.getini("mpi_option_for_processes"),
                                    config.getini("mpi_command_line_args"))
        command = launcher.extend_command_for_parallel_execution(
            assemble_sub_pytest_cmd(config.option, items[0].nodeid) + [item.nodeid for item in items[1:]], ranks)
        captured = config.option.capture != "no"
        with tempfile.TemporaryDirectory() as directory, tempfile.TemporaryFile("w+") as output:
            env = dict(os.environ, **{FORKED_ENV: "1", REPORTS_ENV: directory, BATCH_ENV: f"{timeout:g}"})
            process = subprocess.Popen(command, env=env, cwd=config.rootpath, text=True, start_new_session=True,
                                       stdout=output if captured else None, stderr=subprocess.STDOUT if captured else None)
            stalled = _wait_for(process, directory, timeout + _STALL_S)
            output.seek(0)
            text = output.read()[-_OUTPUT_CHARS:]
            finished: dict[str, list[Any]] = {}
            for index, item in enumerate(items):
                reports: list[Any] = []
                for rank in range(ranks):
                    path = _report_file(directory, item.nodeid, rank)
                    if path.exists():
                        reports += pickle.loads(path.read_bytes())
                done = {report.rank for report in reports}
                if len(done) == ranks:
                    finished[item.nodeid] = reports
                    continue
                why = (f"no test of the job finished for {timeout + _STALL_S:g} s, the job was stopped" if stalled
                       else f"the job ended (exit status {process.returncode}) in this test")
                failure = pytest.TestReport(
                    nodeid=item.nodeid, location=item.location, keywords={}, outcome="failed", when="call",
                    longrepr=(f"MPI job of {len(items)} tests of {_module(item.nodeid)} on {ranks} ranks: {why}; "
                              f"ranks {sorted(set(range(ranks)) - done)} did not finish it. The tests after it run on "
                              "in a new job."),
                    sections=[("Captured output of the MPI job", text)] if captured else [])
                return finished, (index, reports + [failure])
        return finished, None

    def _run_in_rank(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        """Run ``item`` in this rank of a module job, under its time limit, and write its reports."""
        from _pytest import runner
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.rank
        timeout = float(os.environ[BATCH_ENV])
        timer = _abort_after(self.config, timeout, rank, limit="the MPI test's timeout")
        try:
            reports = runner.runtestprotocol(item, log=False, nextitem=nextitem)
        finally:
            timer.cancel()
        path = _report_file(os.environ[REPORTS_ENV], item.nodeid, rank)
        for report in reports:  # named per rank, as pytest-isolate-mpi names them
            if report.location is not None:
                fspath, lineno, domain = report.location
                report.location = fspath, lineno, f"{domain}[rank={rank}]"
            report.nodeid = f"{report.nodeid}[rank={rank}]"
            report.rank = rank
        partial = path.with_name(path.name + ".part")
        partial.write_bytes(pickle.dumps(reports))
        os.replace(partial, path)  # whole or absent: the job's launcher reads it while the job runs
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in reports:
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


def _wait_for(process: subprocess.Popen, directory: str, stall_s: float) -> bool:
    """Wait for a module job to end; kill it (its whole process group) when no report file has appeared in
    ``directory`` for ``stall_s`` seconds.  True when it was killed."""
    seen, last = -1, time.monotonic()
    try:
        while True:
            try:
                process.wait(timeout=0.5)
                return False
            except subprocess.TimeoutExpired:
                count, now = len(os.listdir(directory)), time.monotonic()
                if count != seen:
                    seen, last = count, now
                elif now - last > stall_s:
                    return True
    finally:  # stalled, or Ctrl-C: the job is in its own session, out of the terminal's reach: end it
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
