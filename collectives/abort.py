"""One rank dies, the whole MPI job ends: an excepthook that prints the rank's traceback and aborts.

Without it, an uncaught exception on one rank leaves every other rank waiting
forever inside its next collective.  ``MpiBackend`` installs the hook when it
is first created (the way ``python -m mpi4py script.py`` handles errors).
Set ``DTENSOR_NP_ABORT_ON_ERROR=0`` to leave ``sys.excepthook`` alone; an
interactive interpreter is always left alone.

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

__all__ = ["install_abort_on_error", "abort_on_error_enabled", "ABORT_ENV"]

ABORT_ENV = "DTENSOR_NP_ABORT_ON_ERROR"
_FORWARD_PAUSE_S = 0.2
_installed = False


def abort_on_error_enabled(environ: Optional[Mapping[str, str]] = None) -> bool:
    """False when the environment switches the hook off, or the interpreter is interactive."""
    environ = os.environ if environ is None else environ
    if environ.get(ABORT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not (hasattr(sys, "ps1") or sys.flags.interactive)


def _report_and_abort(comm: Any, exc_type: type, exc: BaseException, tb: Any) -> None:
    rank, size = comm.Get_rank(), comm.Get_size()
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    lines = [f"dtensor_np: uncaught {exc_type.__name__} on MPI rank {rank} of {size}; aborting the job\n"]
    lines += [f"[rank {rank}] {line}\n" for line in text.rstrip("\n").split("\n")]
    try:
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
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
