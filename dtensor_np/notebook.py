"""Jupyter on real MPI ranks: ``%load_ext dtensor_np.notebook``, then ``%dt_cluster N`` and ``%%dt`` cells.

``%dt_cluster 2`` starts 2 ipyparallel engines under the ``mpiexec`` next to
this Python (the ``mpich`` wheel's), bounded by a start-up timeout (60 s a
try, 2 tries), and stops them at kernel exit or on ``%dt_cluster stop``.
From then on every cell runs on every rank (``%dt_cluster 2 --explicit``:
only ``%%dt`` cells do; a cell that starts with a magic runs in the kernel);
rank 0's output shows (its prints, its
``dt.visualize_sharding`` views, its plots), or every rank's with
``%%dt --all``; an error on any rank is shown with its rank and raised as
:class:`RankError`, and so is a rank still running after ``%%dt --timeout S``. In those cells ``dt.init_device_mesh`` picks the MPI
backend by itself, so a notebook written for simulated ranks runs on real
ranks by adding the two lines::

    %load_ext dtensor_np.notebook
    %dt_cluster 2

Example:
    >>> STARTUP_TIMEOUT, STARTUP_TRIES
    (60.0, 2)
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

__all__ = [
    "STARTUP_TIMEOUT",
    "STARTUP_TRIES",
    "ClusterStartError",
    "RankError",
    "start_cluster",
    "stop_cluster",
    "run_cell",
    "load_ipython_extension",
    "unload_ipython_extension",
]

STARTUP_TIMEOUT = 60.0
"""Seconds one try may take for every engine to register with the controller."""
STARTUP_TRIES = 2
"""Tries before :func:`start_cluster` gives up (engine start-up is ipyparallel's fragile point)."""

# Launcher variables that would make mpiexec think it runs inside another MPI job (see collectives.launch).
_LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "MPI_LOCAL", "HYDRA_", "MV2_", "ALPS_", "PALS_")
_POLL = 0.5  # seconds between checks that the engines still run, while a cell runs
_OUTPUT_WAIT = 30.0  # seconds to wait for a finished cell's outputs
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ENGINE_SETUP = """\
def _dt_setup():
    import tempfile
    from mpi4py import MPI
    shell = get_ipython()
    try:  # one name per cell on every rank (ipykernel puts its pid in it), for the SPMD check's call sites
        from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86
        cells = tempfile.gettempdir() + "/dtensor_np_cells/"
        shell.compile.get_code_name = lambda raw, code, number: f"{cells}{murmur2_x86(raw, get_tmp_hash_seed())}.py"
    except (ImportError, AttributeError):
        pass
    try:  # plots come back as PNG display data, as in a kernel
        shell.run_line_magic("matplotlib", "inline")
    except Exception:
        pass
    return MPI.COMM_WORLD.rank
_dt_rank = _dt_setup()
del _dt_setup
"""


class ClusterStartError(RuntimeError):
    """The MPI engines did not come up within the bound: says what was tried and what to check.

    Example:
        >>> try:
        ...     start_cluster(2, mpiexec="/nonexistent/mpiexec", tries=1)
        ... except ClusterStartError as e:
        ...     print(str(e).splitlines()[0])
        expected 2 MPI engines within 60 s (1 try), got none: mpiexec '/nonexistent/mpiexec' does not exist
    """


class RankError(RuntimeError):
    """A ``%%dt`` cell raised on one rank or more: the message names each rank and its error.

    Example:
        >>> RankError("rank 1: ValueError: boom")
        RankError('rank 1: ValueError: boom')
    """

    def _render_traceback_(self) -> list[str]:
        """What IPython shows: the ranks' tracebacks are printed above, the magic's own frames would be noise."""
        return [f"RankError: {self}"]


class _Ranks:
    """A running ipyparallel cluster of MPI engines and its client, engines listed by MPI rank."""

    def __init__(self, cluster: Any, client: Any, engine_of_rank: list[int]) -> None:
        self.cluster = cluster
        self.client = client
        self.engine_of_rank = engine_of_rank

    def stop(self) -> None:
        try:
            self.client.close()
        finally:
            self.cluster.stop_cluster_sync()


_RUNNING: Optional[_Ranks] = None
_EVERY_CELL = False  # %dt_cluster without --explicit: every plain cell runs on the ranks


def _find_mpiexec(mpiexec: Optional[str]) -> str:
    if mpiexec is not None:
        return mpiexec
    beside = Path(sys.executable).with_name("mpiexec")  # the mpich wheel's, next to this venv's Python
    return str(beside) if beside.exists() else (shutil.which("mpiexec") or str(beside))


def _mpi_cmd(mpiexec: str) -> list[str]:
    """mpiexec without the launcher variables of an MPI job this kernel may itself run in."""
    inherited = sorted(k for k in os.environ if k.startswith(_LAUNCHER_PREFIXES))
    unset = [arg for name in inherited for arg in ("-u", name)]
    return (["env", *unset] if unset else []) + [mpiexec]


def _engine_log(cluster: Any) -> str:
    lines = []
    for engine_set in list(cluster.engines.values()):
        try:
            lines += engine_set.get_output().splitlines()[-15:]
        except Exception:  # the log is a courtesy in an error message
            pass
    return "\n".join("    " + line for line in lines) or "    (empty)"


def _try_start(n: int, timeout: float, mpiexec: str) -> _Ranks:
    import ipyparallel as ipp

    cluster = ipp.Cluster(engines="mpi", n=n, delay=0, log_level=40)
    cluster.config.MPIEngineSetLauncher.mpi_cmd = _mpi_cmd(mpiexec)
    try:
        cluster.start_cluster_sync()
        client = cluster.connect_client_sync()
        client.wait_for_engines(n, timeout=timeout, block=True, interactive=False)
        view = client[:]
        view.execute(_ENGINE_SETUP, block=True)
        ranks = view.pull("_dt_rank", block=True)
        view.execute("del _dt_rank", block=True)
    except BaseException as e:
        log = _engine_log(cluster)
        try:
            cluster.stop_cluster_sync()
        except Exception:
            pass
        raise _StartFailure(f"{type(e).__name__}: {e}", log) from e
    return _Ranks(cluster, client, [engine for _, engine in sorted(zip(ranks, client.ids))])


class _StartFailure(Exception):
    def __init__(self, why: str, log: str) -> None:
        super().__init__(why)
        self.why, self.log = why, log


def start_cluster(n: int, *, timeout: float = STARTUP_TIMEOUT, tries: int = STARTUP_TRIES,
                  mpiexec: Optional[str] = None) -> list[int]:
    """Start ``n`` MPI engines (``%dt_cluster n``), stopping any running ones first; the engine id of each rank.

    Each try may take ``timeout`` seconds for every engine to register; after
    ``tries`` failed tries it raises :class:`ClusterStartError` naming the
    ``mpiexec`` used, what to check and the tail of the engine logs.

    Example:
        >>> start_cluster(0)
        Traceback (most recent call last):
        ValueError: %dt_cluster expected a number of ranks >= 1, got 0
    """
    global _RUNNING
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"%dt_cluster expected a number of ranks >= 1, got {n!r}")
    if not timeout > 0 or isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise ValueError(f"expected timeout > 0 and tries >= 1, got timeout={timeout!r}, tries={tries!r}")
    stop_cluster()
    mpiexec = _find_mpiexec(mpiexec)
    bound = f"expected {n} MPI engines within {timeout:g} s ({tries} {'try' if tries == 1 else 'tries'}), got none"
    if not Path(mpiexec).exists() and shutil.which(mpiexec) is None:
        raise ClusterStartError(f"{bound}: mpiexec {mpiexec!r} does not exist\n"
                                "install an MPI (pip install 'dtensor_np[notebook]' brings the mpich wheel)")
    failures = []
    for _ in range(tries):
        started = time.perf_counter()
        try:
            _RUNNING = _try_start(n, timeout, mpiexec)
            return list(_RUNNING.engine_of_rank)
        except _StartFailure as failure:
            failures.append(f"  try {len(failures) + 1} ({time.perf_counter() - started:.1f} s): {failure.why}\n"
                            f"  engine log:\n{failure.log}")
    check = f"{shlex.quote(mpiexec)} -n {n} {shlex.quote(sys.executable)} -c 'from mpi4py import MPI; print(MPI.COMM_WORLD.rank)'"
    raise ClusterStartError(
        f"{bound}\n" + "\n".join(failures) + "\n"
        f"check that mpiexec runs and mpi4py imports on every rank: {check}\n"
        "then retry with a longer bound: %dt_cluster N --timeout SECONDS"
    )


def stop_cluster() -> None:
    """Stop the running engines and their controller (``%dt_cluster stop``; also at kernel exit); none: nothing.

    Example:
        >>> stop_cluster()
    """
    global _RUNNING
    running, _RUNNING = _RUNNING, None
    if running is not None:
        running.stop()


atexit.register(stop_cluster)


def _show(content: dict, shell: Any) -> None:
    """Republish one display output (or execute result) of an engine in this kernel."""
    data, metadata = content.get("data", {}), content.get("metadata") or {}
    if shell is None:
        print(data.get("text/plain", ""))
    else:
        shell.display_pub.publish(data=data, metadata=metadata)


def _stream(text: str, rank: int, every_rank: bool, file: Any) -> None:
    if text:
        if every_rank:
            text = "".join(f"[rank {rank}] {line}" for line in text.splitlines(True))
        print(text, end="" if text.endswith("\n") else "\n", file=file)


def _wait(result: Any, ranks: _Ranks, timeout: Optional[float]) -> None:
    """Wait for every rank to finish the cell: while the engines live, and at most ``timeout`` seconds when given."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not result.wait(_POLL):
        if not all(engines.running for engines in ranks.cluster.engines.values()):
            log = _engine_log(ranks.cluster)
            stop_cluster()
            raise RankError(f"the MPI engines exited while the cell ran; %dt_cluster N starts new ones. Engine log:\n{log}")
        if deadline is not None and time.monotonic() > deadline:
            waiting = [rank for rank, msg_id in enumerate(result.msg_ids) if msg_id in ranks.client.outstanding]
            stop_cluster()
            raise RankError(
                f"expected every rank to finish the cell within {timeout:g} s, got ranks {waiting} still running "
                "(a collective that another rank skipped waits forever): stopped the engines, "
                "%dt_cluster N starts new ones"
            )


def run_cell(code: str, *, all_ranks: bool = False, timeout: Optional[float] = None) -> None:
    """Run ``code`` on every rank (a ``%%dt`` cell); show rank 0's output, or every rank's, and raise any rank's error.

    Outputs are shown once the cell has finished on every rank. When a rank
    raises, its traceback is printed under ``[rank r]`` and :class:`RankError`
    names every rank that raised. With a ``timeout`` (``%%dt --timeout S``),
    ranks still running after it are named in a :class:`RankError` and the
    engines are stopped (stuck in a collective, they would run nothing else).

    Example:
        >>> run_cell("print(1)")
        Traceback (most recent call last):
        RuntimeError: %%dt expected a running cluster, got none: run %dt_cluster N first
    """
    if _RUNNING is None:
        raise RuntimeError("%%dt expected a running cluster, got none: run %dt_cluster N first")
    from IPython import get_ipython

    shell = get_ipython()
    ranks = _RUNNING
    view = ranks.client[ranks.engine_of_rank]
    result = view.execute(code, silent=False, block=False)
    _wait(result, ranks, timeout)
    result.wait_for_output(_OUTPUT_WAIT)  # the outputs travel apart from the replies and may come after them
    failed = []
    for rank in range(len(ranks.engine_of_rank) if all_ranks else 1):  # the view lists the engines by rank
        _stream(result.stdout[rank], rank, all_ranks, sys.stdout)
        _stream(result.stderr[rank], rank, all_ranks, sys.stderr)
        for output in result.outputs[rank]:
            _show(output, shell)
        if result.execute_result[rank] is not None:
            if all_ranks:
                print(f"[rank {rank}] result:")
            _show(result.execute_result[rank], shell)
    for rank, metadata in enumerate(result.metadata):
        error = metadata.get("error")
        if error is not None:
            print(f"[rank {rank}] {error.ename}: {error.evalue}", file=sys.stderr)
            print(_ANSI.sub("", error.traceback or ""), file=sys.stderr)
            failed.append(f"rank {rank}: {error.ename}: {error.evalue}")
    if failed:
        raise RankError("; ".join(failed))


def _cluster_magic(line: str) -> None:
    """``%dt_cluster N [--timeout SECONDS] [--tries K] [--explicit]`` starts N MPI ranks; ``%dt_cluster stop`` stops them.

    From then on every cell runs on the ranks (one that starts with a magic, ``%`` or ``!`` runs in the kernel);
    with ``--explicit`` only ``%%dt`` cells do.
    """
    global _EVERY_CELL
    words = line.split()
    if words == ["stop"]:
        stop_cluster()
        print("dt_cluster: stopped")
        return
    explicit = "--explicit" in words
    words = [w for w in words if w != "--explicit"]
    options = {"--timeout": STARTUP_TIMEOUT, "--tries": STARTUP_TRIES}
    try:
        n = int(words[0])
        for flag, value in zip(words[1::2], words[2::2], strict=True):
            options[flag] = type(options[flag])(value) if flag in options else _bad_flag(flag)
    except (IndexError, ValueError) as e:
        raise ValueError(f"expected `%dt_cluster N [--timeout SECONDS] [--tries K] [--explicit]` or `%dt_cluster stop`, "
                         f"got `%dt_cluster {line}`") from e
    started = time.perf_counter()
    _EVERY_CELL = False
    start_cluster(n, timeout=options["--timeout"], tries=options["--tries"])
    _EVERY_CELL = not explicit
    cells = "%%dt cells run" if explicit else "every cell runs (one starting with % runs here)"
    print(f"dt_cluster: {n} MPI ranks up in {time.perf_counter() - started:.1f} s; {cells} on every rank")


def _every_cell_on_ranks(lines: list[str]) -> list[str]:
    """IPython's cleanup input transformer: while the ranks run every cell, a plain cell becomes a ``%%dt`` cell."""
    first = next((line.lstrip() for line in lines if line.strip()), "")
    if _RUNNING is None or not _EVERY_CELL or not first or first.startswith(("%", "!", "?")):
        return lines
    return ["%%dt\n", *lines]


def _bad_flag(flag: str) -> Any:
    raise ValueError(f"unknown option {flag}")


def _dt_magic(line: str, cell: str) -> None:
    """``%%dt [--all] [--timeout SECONDS]`` runs the cell on every rank; rank 0's output, every rank's with ``--all``."""
    words = line.split()
    all_ranks = "--all" in words
    words = [w for w in words if w != "--all"]
    try:
        [flag, value] = words or ["--timeout", "inf"]
        timeout = float(value) if flag == "--timeout" and float(value) > 0 else _bad_flag(flag)
    except ValueError as e:
        raise ValueError(f"expected `%%dt [--all] [--timeout SECONDS]`, got `%%dt {line}`") from e
    run_cell(cell, all_ranks=all_ranks, timeout=None if timeout == float("inf") else timeout)


def load_ipython_extension(shell: Any) -> None:
    """Register ``%dt_cluster`` and ``%%dt`` (``%load_ext dtensor_np.notebook`` calls this).

    Example:
        >>> class Shell:
        ...     def register_magic_function(self, func, magic_kind, magic_name):
        ...         print(magic_kind, magic_name)
        >>> load_ipython_extension(Shell())
        line dt_cluster
        cell dt
    """
    shell.register_magic_function(_cluster_magic, magic_kind="line", magic_name="dt_cluster")
    shell.register_magic_function(_dt_magic, magic_kind="cell", magic_name="dt")
    transformers = getattr(shell, "input_transformers_cleanup", None)
    if transformers is not None and _every_cell_on_ranks not in transformers:
        transformers.append(_every_cell_on_ranks)


def unload_ipython_extension(shell: Any) -> None:
    """Stop the engines when the extension is unloaded (``%unload_ext dtensor_np.notebook``).

    Example:
        >>> unload_ipython_extension(None)
    """
    stop_cluster()
    transformers = getattr(shell, "input_transformers_cleanup", None)
    if transformers is not None and _every_cell_on_ranks in transformers:
        transformers.remove(_every_cell_on_ranks)
