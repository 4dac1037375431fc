"""The collective watchdog: a rank stuck in a collective ends the job with a report, instead of hanging forever.

Under MPI one daemon thread per process looks, every ``POLL_S`` seconds, at
where the main thread is (``sys._current_frames``), so the collectives pay
nothing for it.  When the main thread sits in the same collective call of
:mod:`collectives` (blocked in MPI) it reports and aborts the job:

* after ``DTENSOR_NP_COLLECTIVE_TIMEOUT`` seconds (``DEFAULT_TIMEOUT_S``, 600 s
  as NCCL's watchdog, when unset; ``0`` turns it off): every rank
  still able to print names the collective it waits in and the user's line
  that issued it, then the job is aborted (``MPI_Abort``);
* ``GRACE_S`` seconds after a rank of its group has left the program: at exit
  (``sys.exit`` with any code, or the end of the script) every rank tells the
  others (a small message on a communicator of its own), because ranks left
  waiting for it would otherwise hang in ``MPI_Finalize`` or their collective
  forever (a ``SystemExit`` never reaches ``sys.excepthook``, see
  :mod:`collectives.abort`).

``DTENSOR_NP_ABORT_ON_ERROR=0`` turns the watchdog off with the except-hook;
it also stays off when MPI was not initialised with thread support
``MPI_THREAD_MULTIPLE`` (mpi4py's default) or for worlds above
``NOTICE_LIMIT`` ranks (the exit notices; the timeout still applies there).

Example:
    >>> timeout_from({"DTENSOR_NP_COLLECTIVE_TIMEOUT": "30"}), timeout_from({}), timeout_from({TIMEOUT_ENV: "0"})
    (30.0, 600.0, None)
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Optional

import numpy as np

from .abort import write_report

__all__ = ["DEFAULT_TIMEOUT_S", "GRACE_S", "POLL_S", "TIMEOUT_ENV", "Watchdog", "start_watchdog", "timeout_from"]

TIMEOUT_ENV = "DTENSOR_NP_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
"""The collective timeout when ``DTENSOR_NP_COLLECTIVE_TIMEOUT`` is unset (NCCL's watchdog default)."""
POLL_S = 0.1
GRACE_S = 1.0
NOTICE_LIMIT = 1024
EXIT_TAG = 31_337
_INTERNAL = ("collectives", "dtensor_np", "numpy")


def timeout_from(environ: Mapping[str, str] = os.environ) -> Optional[float]:
    """The collective timeout in seconds from ``DTENSOR_NP_COLLECTIVE_TIMEOUT`` (unset: 600 s; 0 or None: no timeout)."""
    value = environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, got {value!r}") from None
    return seconds if seconds > 0 else None


def _user_site(frame: Optional[FrameType]) -> str:
    while frame is not None:
        if not frame.f_globals.get("__name__", "").startswith(_INTERNAL):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown call site>"


Waiting = tuple[FrameType, Callable[[], str], Optional[tuple[int, ...]], tuple[int, int]]


def _waiting_in(frame: Optional[FrameType]) -> Optional[Waiting]:
    """(frame, what, group, key) when the thread whose innermost frame is ``frame`` is inside a collective.

    ``what()`` names the collective; it is called only for a report, never while
    polling: it formats the main thread's objects, which may be half made.
    ``key`` is the same for as long as the thread waits in one call: where a
    frame stops (a rank blocked in MPI), or the round of the agreement's
    shared-memory handshake (:mod:`collectives.handshake`), which spins.
    """
    if frame is None or not frame.f_globals.get("__name__", "").startswith("collectives"):
        return None
    key = (id(frame), frame.f_lasti)
    if frame.f_globals.get("__name__") == "collectives.handshake":
        round_ = None
        while frame is not None and frame.f_globals.get("__name__") == "collectives.handshake":
            round_ = frame.f_locals.get("round_", round_)
            frame = frame.f_back
        if frame is None:
            return None
        key = (id(frame), -1 if round_ is None else int(round_))
    local = frame.f_locals
    runner = getattr(local.get("execute"), "__self__", None) or local.get("self")
    op = getattr(runner, "op", None)
    team = getattr(runner, "team", None)
    if op is not None:
        return frame, lambda: op.name, getattr(team, "group", None), key
    name, describe = frame.f_code.co_name, local.get("describe")

    def what() -> str:
        call = describe() if callable(describe) else "a collective"
        if name == "agree":
            return call + " (its agreement)"
        if name == "check_spmd_call":
            return "the SPMD check before " + call
        if name == "wait":
            return "the wait of a non-blocking collective"
        return f"collectives ({name})"

    return frame, what, None, key


class Watchdog:
    """One process's watchdog thread (see the module doc); ``start_watchdog`` makes and starts it once."""

    def __init__(self, world: Any, notices: Any, timeout: Optional[float]) -> None:
        self.world = world
        self.notices = notices  # a communicator of its own for the exit notices
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        self.timeout = timeout
        self.exited: dict[int, float] = {}
        self.stop = threading.Event()
        self.main = threading.main_thread().ident
        self.thread = threading.Thread(target=self._loop, name="dtensor_np collective watchdog", daemon=True)
        self.sends: list[Any] = []
        self.seen: Optional[tuple[int, int]] = None  # the key of the main thread's current wait (see _waiting_in)
        self.since = 0.0  # when the poll first saw it

    def start(self) -> None:
        self.thread.start()
        atexit.register(self.leave)

    def leave(self) -> None:
        """At exit: stop the thread and tell every other rank that this one has left."""
        self.stop.set()
        self.thread.join(timeout=2 * POLL_S + 1)
        if self.size <= NOTICE_LIMIT:
            note = np.array([self.rank], np.int64)
            self.sends = [self.notices.Isend(note, r, EXIT_TAG) for r in range(self.size) if r != self.rank]
            self.sends.append(note)  # kept alive until the process ends

    def _receive_notices(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self.notices.Iprobe(MPI.ANY_SOURCE, EXIT_TAG, status):
            note = np.empty(1, np.int64)
            self.notices.Recv(note, status.Get_source(), EXIT_TAG)
            self.exited.setdefault(int(note[0]), time.monotonic())

    def _loop(self) -> None:
        told = False
        while not self.stop.wait(POLL_S):
            try:
                self._poll()
            except Exception as exc:  # noqa: BLE001 - looking at the main thread must never end the job by itself
                self.seen = None
                if not told:  # once: the watchdog goes on, and the job with it
                    told = True
                    write_report(f"[rank {self.rank}] dtensor_np watchdog: one look at the main thread failed "
                                 f"({type(exc).__name__}: {exc}); the watchdog goes on\n")

    def _poll(self) -> None:
        """One look at the main thread: abort when it has waited too long in one collective (see the module doc)."""
        if self.size <= NOTICE_LIMIT:
            self._receive_notices()
        waiting = _waiting_in(sys._current_frames().get(self.main))  # type: ignore[arg-type]
        if waiting is None:
            self.seen = None
            return
        frame, what, group, key = waiting
        now = time.monotonic()
        if key != self.seen:
            self.seen, self.since = key, now
            return
        waited = now - self.since
        left = sorted(r for r, t in self.exited.items() if group is None or r in group)
        if left and now - max(self.since, min(self.exited[r] for r in left)) >= GRACE_S:
            self._abort(f"rank(s) {left} left the program (sys.exit, an exception caught and ended, or the end of "
                        "the script) while this rank waits for them", what, frame)
        if self.timeout is not None and waited >= self.timeout:
            self._abort(f"waited {waited:.1f} s ({TIMEOUT_ENV}={self.timeout:g})", what, frame)

    def _abort(self, why: str, what: Callable[[], str], frame: FrameType) -> None:
        """Report ``why`` "in" the collective ``what()`` names and the user's line, then abort the job."""
        try:
            call, site = what(), _user_site(frame)
        except Exception as exc:  # noqa: BLE001 - the report names what it can; the job ends regardless
            call, site = f"a collective (not named: {type(exc).__name__}: {exc})", "<unknown call site>"
        write_report(f"[rank {self.rank}] dtensor_np watchdog: {why} in {call}, issued at {site}; aborting the job\n")
        time.sleep(0.5)  # the other ranks' watchdogs print theirs; the launcher forwards the lines
        self.world.Abort(1)


_started: list[Watchdog] = []


def start_watchdog(world: Any, notices: Any) -> Optional[Watchdog]:
    """Start this process's watchdog once (None when MPI lacks thread support or it is switched off)."""
    from mpi4py import MPI

    from .abort import abort_on_error_enabled

    if _started:
        return _started[0]
    if not abort_on_error_enabled() or MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        return None
    dog = Watchdog(world, notices, timeout_from())
    dog.start()
    _started.append(dog)
    return dog
