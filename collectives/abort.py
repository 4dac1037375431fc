"""One rank dies, the whole MPI job ends: an excepthook that prints the rank's traceback and aborts.

Without it, an uncaught exception on one rank leaves every other rank waiting
forever inside its next collective.  ``MpiBackend`` installs the hook when it
is first created (the way ``python -m mpi4py script.py`` handles errors).
Set ``DTENSOR_NP_ABORT_ON_ERROR=0`` to leave ``sys.excepthook`` alone; an
interactive interpreter is always left alone.

The report (this hook's and the collective watchdog's) goes to ``sys.stderr``,
or, when ``DTENSOR_NP_ABORT_REPORT_FD`` is ``"<pid>:<fd>"`` and this process is
``<pid>``, straight to file descriptor ``<fd>``: a runner that captures stderr
(pytest does, into a file that dies with the aborted job) sets it to a copy of
the real stderr, so the report reaches the job's output.

Example:
    >>> import os
    >>> abort_on_error_enabled({"DTENSOR_NP_ABORT_ON_ERROR": "0"})
    False
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Mapping, Optional

__all__ = ["install_abort_on_error", "abort_on_error_enabled", "write_report", "ABORT_ENV", "REPORT_FD_ENV"]

ABORT_ENV = "DTENSOR_NP_ABORT_ON_ERROR"
REPORT_FD_ENV = "DTENSOR_NP_ABORT_REPORT_FD"
_FORWARD_PAUSE_S = 0.2
_installed = False


def abort_on_error_enabled(environ: Optional[Mapping[str, str]] = None) -> bool:
    """False when the environment switches the hook off, or the interpreter is interactive."""
    environ = os.environ if environ is None else environ
    if environ.get(ABORT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not (hasattr(sys, "ps1") or sys.flags.interactive)


def _report_fd(environ: Mapping[str, str]) -> Optional[int]:
    """The descriptor ``DTENSOR_NP_ABORT_REPORT_FD`` names for this process (None: unset, malformed or another pid's).

    Example:
        >>> _report_fd({REPORT_FD_ENV: f"{os.getpid()}:7"}), _report_fd({REPORT_FD_ENV: "1:7"}), _report_fd({})
        (7, None, None)
    """
    pid, _, fd = environ.get(REPORT_FD_ENV, "").partition(":")
    if not (pid.isdigit() and fd.isdigit() and int(pid) == os.getpid()):
        return None  # a child process inherits the variable, never the descriptor
    return int(fd)


def write_report(text: str) -> None:
    """Write an abort report where it survives the abort: the descriptor of ``DTENSOR_NP_ABORT_REPORT_FD``, else stderr."""
    fd = _report_fd(os.environ)
    if fd is not None:
        try:
            os.write(fd, text.encode(errors="replace"))
            return
        except OSError:
            pass
    sys.stderr.write(text)
    sys.stderr.flush()


def _report_and_abort(comm: Any, exc_type: type, exc: BaseException, tb: Any) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    lines = [f"dtensor_np: uncaught {exc_type.__name__} on MPI rank {rank} of {size}; aborting the job\n"]
    lines += [f"[rank {rank}] {line}\n" for line in text.rstrip("\n").split("\n")]
    try:
        write_report("".join(lines))
        sys.stdout.flush()
        # MPI_Abort kills every process at once; give the launcher a moment to forward the
        # message (on a loaded machine it was sometimes lost without this pause)
        time.sleep(_FORWARD_PAUSE_S)
    finally:
        comm.Abort(1)


def install_abort_on_error(comm: Any) -> bool:
    """Make an uncaught exception on any rank abort the job (once per process); True if installed."""
    global _installed
    if _installed:
        return True
    if not abort_on_error_enabled():
        return False
    previous = sys.excepthook

    def excepthook(exc_type: type, exc: BaseException, tb: Any) -> None:
        if issubclass(exc_type, KeyboardInterrupt) and comm.Get_size() == 1:
            previous(exc_type, exc, tb)
            return
        _report_and_abort(comm, exc_type, exc, tb)

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        _report_and_abort(comm, args.exc_type, args.exc_value, args.exc_traceback)  # type: ignore[arg-type]

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    _installed = True
    return True
