"""SPMD check mode: before every collective, all ranks agree that they issue the same one, from the same line.

A distributed program hangs when its ranks take different paths: one rank
gathers while another reduces, or one skips a call in a loop and pairs its
next call with the others' previous one.  With the check on
(``DTENSOR_NP_CHECK_SPMD=1`` in the environment, or inside ``with
check_spmd():``), every collective first makes every rank of the world share a
fingerprint of the call (kind, groups, arguments, dtype) and of the user's
line that issued it (:func:`call_site`), with one small ``Allgather`` on a
communicator of its own.  Ranks that disagree all raise :class:`SpmdError`,
naming every rank's collective and call site, instead of waiting forever.  A
rank that never arrives (it left the loop, or the program) is the collective
watchdog's business (:mod:`collectives.watchdog`).  The check costs one small
``Allgather`` and a look at the call stack per collective, so it is off by
default and on in the project's tests.

Without it, a cheaper agreement is on by default (``DTENSOR_NP_AGREE=0`` turns
it off): before every collective under MPI the ranks compare a fingerprint of
the call (kind, groups, arguments, dtype, and the part of the input shape all
members share) by exchanging a row of four int64 a rank (below): through
shared memory when the world's ranks share a node
(:mod:`collectives.handshake`), else with one ``Allgather`` on a communicator
of its own (``DTENSOR_NP_AGREE=mpi`` chooses it on one node too).  Any two
rank-divergent collectives meet in that same small exchange, so they raise :class:`SpmdError` on every rank, naming
each rank's call, before any data moves, and the ranks stay in step (an index
that is valid on some ranks only: see :func:`note_local_error`): a
different redistribute target, shape or dtype on one rank, or a rank that
issues a collective another skips, pairs with the others' agreement, not with
their data (no "Message truncated", no hang).

Local calls take part too.  A call that communicates nothing (``x + 1``, a
row this rank holds, an item assignment) can differ between ranks without any
collective seeing it: each rank would go on with other values, silently.  So
every dispatched call folds the fingerprint of its fast-path key (op, input
specs, static arguments, index) into :data:`local_calls` (a sum modulo 2**64,
in the fast path's entry too: about 0.1 us a call; a sum, not a chained hash,
because the order of some calls is not the program's: NumPy's own code may
compare a DTensor with the members of a set, in an order that follows each
process's string hashes), and the agreement row is four
int64: the call, its shape, "this rank raised since its last collective" and
the local calls since then.  A local call that differs on one rank raises
:class:`SpmdError` on every rank at the next collective; one that raises on
one rank only (its values, or its arguments: any DTensor ufunc, function,
operator or index notes the error, :func:`note_local_error`) makes every rank
raise there too, or in the collective the others were in.

Why an exchange of its own, not a fingerprint inside the collective's data:
the agreement must be over before any data moves.  Ranks that issue an
``Allgather`` and an ``Alltoall`` (or two ``Allgather`` of other sizes) on one
communicator pair those calls inside MPI, which truncates or hangs before a
fingerprint riding in the data could be read; the guarantee (every rank
raises at the same collective and the ranks stay in step) needs an exchange
of the same shape on every rank first.  Within a node the cheapest is the
shared-memory handshake (a row and a round number in a shared window, no MPI
call); across nodes one ``Allgather`` of the 32-byte row on a communicator of
its own, then one bytes compare (``Allreduce(MAX)`` of the row and its
negation costs 1.2-2x that, a ``Barrier`` alone no less).  Measured on a quiet
2-core machine (``benchmarks/redistribute.py --quick --sizes 1KiB,1MiB
--agreement both``, ``mpiexec -n 2``, each row with and without the
agreement in the same run), 1 KiB with / without, handshake then
``DTENSOR_NP_AGREE=mpi``: ``S(0)->R`` 4.4 / 3.4 us against 5.2 / 3.5,
``P->R`` 5.3 / 4.3 against 6.5 / 4.3, ``P->S(0)`` 4.5 / 3.5 against 5.3 / 3.6,
``S(0)->S(1)`` 5.9 / 4.4 against 6.4 / 4.3: 1.0-1.5 us a collective through
shared memory, 1.7-2.2 us with the ``Allgather`` (a bare mpi4py ``Allgather``
of 32 bytes takes 1.7-2.2 us there).

Example:
    >>> with check_spmd():
    ...     checking_spmd()
    True
    >>> with check_spmd(False):
    ...     checking_spmd()
    False
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from .errors import CollectiveError

__all__ = [
    "AGREE_ENV", "CHECK_ENV", "SpmdError", "agreeing", "call_site", "check_spmd", "checking", "checking_spmd",
    "default_agreement", "LOCAL_CALLS_MASK", "local_calls", "note_local_call", "note_local_error", "pending",
]

CHECK_ENV = "DTENSOR_NP_CHECK_SPMD"
"""Set to 1 to check every collective (the ``check_spmd()`` block does the same for its duration)."""

checking: list[bool] = [True] if os.environ.get(CHECK_ENV, "").strip().lower() in ("1", "true", "yes", "on") else []
"""Non-empty while the check is on (a list, so a hot path tests it with one truth test)."""

AGREE_ENV = "DTENSOR_NP_AGREE"
"""Set to 0 to turn off the default agreement (the fingerprint every rank compares before each collective under
MPI), to ``mpi`` to exchange it by ``Allgather`` where the ranks share a node too."""

agreeing: list[bool] = [] if os.environ.get(AGREE_ENV, "").strip().lower() in ("0", "false", "no", "off") else [True]
"""Non-empty while the default agreement is on (the full check, when on, replaces it)."""

AGREE_BY_ALLGATHER = os.environ.get(AGREE_ENV, "").strip().lower() == "mpi"
"""``DTENSOR_NP_AGREE=mpi``: no shared-memory handshake (:mod:`collectives.handshake`), an ``Allgather`` always."""

pending: list[bool] = []
"""Non-empty after this rank raised a local error the other ranks may not have (``note_local_error``)."""

local_calls: list[int] = [0]
"""A running fingerprint of this rank's local calls since its last agreement (see :func:`note_local_call`)."""

LOCAL_CALLS_MASK = (1 << 64) - 1
"""``local_calls`` is a sum modulo 2**64 (an unsigned 64-bit value)."""

_INTERNAL = ("collectives", "dtensor_np", "numpy", "contextlib", "functools", "threading")


class SpmdError(CollectiveError):
    """The ranks issue different collectives (or issue one from different lines): raised on every rank by the SPMD check.

    Example:
        >>> issubclass(SpmdError, RuntimeError) or issubclass(SpmdError, Exception)
        True
    """


@contextlib.contextmanager
def _switched(flag: list[bool], enabled: bool) -> Iterator[None]:
    """``flag`` (a switch list such as ``checking``) on or off inside the block, restored after."""
    saved = flag[:]
    flag[:] = [True] if enabled else []
    try:
        yield
    finally:
        flag[:] = saved


@contextlib.contextmanager
def check_spmd(enabled: bool = True) -> Iterator[None]:
    """Check every collective issued inside the block (see the module doc); ``enabled=False`` turns it off there.

    Every rank must enter and leave the block together (it changes what each
    collective does).

    Example:
        >>> with check_spmd():
        ...     checking_spmd()
        True
    """
    with _switched(checking, enabled):
        yield


@contextlib.contextmanager
def default_agreement(enabled: bool = True) -> Iterator[None]:
    """Turn the default agreement on (or, ``enabled=False``, off) inside the block (benchmarks compare both).

    Every rank must enter and leave the block together.

    Example:
        >>> with default_agreement(False):
        ...     bool(agreeing)
        False
    """
    with _switched(agreeing, enabled):
        yield


def note_local_error(error: BaseException) -> None:
    """A public call raised ``error`` on this rank before any collective: tell the next agreement.

    The other ranks may not have raised (their input differed): they may wait in
    a collective of that call, or go on to the next.  At this rank's next
    agreement every rank learns which ranks raised before it: if the others
    wait in a collective of the call that raised here (another fingerprint),
    they raise :class:`SpmdError` there and this rank tries its agreement again;
    if they are at the same next call, every rank raises there.  Errors every
    rank raises together (a ``CollectiveError``, ``SpmdError`` included) are not
    noted.

    Example:
        >>> with check_spmd(False), default_agreement():
        ...     note_local_error(IndexError("index 9 is out of bounds"))
        >>> bool(pending)
        True
        >>> pending.clear()
    """
    if (agreeing or checking) and not isinstance(error, CollectiveError):
        pending[:] = [True]
        local_calls[0] = 0  # the calls before it were this rank's share of the call the others may still be in


def note_local_call(fingerprint: int) -> None:
    """Fold ``fingerprint`` (of a local call: its op and static arguments) into the next agreement's.

    A call that communicates nothing (``x + 1``, or ``x[i]`` of rows this rank
    holds) can differ between ranks without any collective seeing it: each rank
    then computes on other arguments, silently.  Every dispatched call adds the
    fingerprint of its key here (modulo 2**64: the same multiset of calls in
    any order gives the same value, see the module doc), and the next agreement
    compares the running value with the other ranks' (no extra message), then
    starts it again.  The fast path's entries fold inline (the same expression).

    Example:
        >>> local_calls[0] = 0
        >>> note_local_call(7); first = local_calls[0]
        >>> local_calls[0] = 0
        >>> note_local_call(7); local_calls[0] == first != 0
        True
        >>> local_calls[0] = 0
    """
    local_calls[0] = (local_calls[0] + fingerprint) & LOCAL_CALLS_MASK


def checking_spmd() -> bool:
    """True while collectives are checked.

    Example:
        >>> with check_spmd(False):
        ...     checking_spmd()
        False
    """
    return bool(checking)


def call_site(depth: int = 1) -> str:
    """``file:line in function`` of the first frame outside dtensor_np, collectives and NumPy: the user's call.

    ``depth`` counts the frames to skip first (1: the caller of ``call_site``).
    """
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(_INTERNAL):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown call site>"
