"""``MpiBackend``: one process per rank; collectives through mpi4py's buffer interface.

Design choices:

* Sub-communicators.  Each groups partition gets one communicator per
  process, made once with ``Comm.Split`` (colour = group index, key = position,
  so a member's rank in it is its position in the group) and cached at module
  level per parent communicator; ``MpiBackend`` objects are cheap to make.
  Datatypes and user-defined ops are cached too (``dtypes``, ``reduce_ops``).
* One body per collective.  ``prepare`` asks the collective's op (see
  :mod:`collectives.ops`) for this rank's :class:`~collectives.ops.MpiCall`:
  the MPI function, counts, displacements, datatype, the packing before and the
  unpacking after.  :class:`_Runner` turns that one description into every way
  of running it: the blocking call on a C-contiguous NumPy array of the
  prepared shape (the hot path: a few attribute reads, then one mpi4py call
  into a recycled output buffer), the same call on anything else (a strided
  view, another byte order, a CuPy array), and the non-blocking call.  The
  general methods are "check, prepare (cached), run".
* Data path.  Only the uppercase buffer methods; nothing is pickled.  Results
  are received straight into new output arrays.
* Uneven pieces.  When every piece has the same length the plain collectives
  are used (``Allgather``, ``Reduce_scatter_block``, ``Alltoall``, ``Scatter``).
  Uneven pieces (from ``in_sizes``/``out_sizes``, or ``torch.chunk`` tails such
  as 2,2,1,0) use the v-variants (``Allgatherv``, ``Reduce_scatter``,
  ``Alltoallv``, ``Scatterv``) with counts and displacements computed from the
  sizes.  We do not pad pieces to a common length: padding sends and allocates
  bytes that carry nothing (up to a whole piece per rank for 0-length pieces),
  needs a second copy on each side to add and strip it, and gives no fewer
  messages, while the v-variants move exactly the data.  The even/uneven
  choice depends only on group-wide sizes, so every member calls the same
  MPI function.
* Checks.  ``check=True`` costs ONE ``Allgather`` of a fixed-size int64
  descriptor over the group (``agreement``); afterwards every member raises
  the same error or none does, so no rank enters the data collective while
  another has raised.  A rank whose own validation failed still takes part in
  that ``Allgather`` and raises afterwards.  ``check=False`` sends nothing extra.
* Devices.  CuPy arrays go through ``device.stage_for_mpi``: straight to MPI
  when it is CUDA-aware (a device copy of the plan allocates with CuPy),
  through host memory otherwise.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import numpy as np

from . import counting
import zlib

from .abort import install_abort_on_error
from .agreement import DESCRIPTOR_LENGTH, MemberInfo, call_fingerprint, decode, encode, status_of, verify
from .arguments import describe_keys, group_layout
from .backend import MAX_DESCRIPTOR_LENGTH, Backend, Prepared
from .keys import frozen
from .device import is_device_array, stage_for_mpi
from .dtypes import dtype_code, validate_dtype
from .errors import CollectiveError
from .handles import Handle
from .handshake import NodeHandshake, node_handshake
from .ops import OPS, CollectiveOp, MpiCall
from .packing import new_array
from .reduce_ops import raise_fp_events, take_fp_events
from .spmd import AGREE_BY_ALLGATHER, SpmdError, agreeing, call_site, checking, local_calls, pending
from .threads import share_cores_among_ranks
from .watchdog import start_watchdog
from .types import Array, Groups, Shards

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["MpiBackend"]

_ALL_TRUE = call_fingerprint("all_true")
_GATHER_DESCRIPTORS = call_fingerprint("gather_descriptors")


def layout_groups(groups: Groups, world_size: int) -> Groups:
    """``groups`` as validated tuples (the form every rank fingerprints)."""
    return group_layout(groups, world_size).groups


class _Team(NamedTuple):
    """This process's view of its group: the group's communicator and its place in it."""

    comm: MPI.Intracomm
    group: tuple[int, ...]
    position: int
    size: int
    fingerprint: int
    all_groups: Groups


# parent communicator handle -> groups -> team (one Comm.Split per partition and process)
_TEAMS: dict[int, dict[Any, _Team]] = {}
# parent communicator handle -> a duplicate for the SPMD check and the watchdog's exit notices, and the default
# agreement's shared-memory handshake over it (None: an Allgather on it)
_SERVICE: dict[int, tuple[MPI.Intracomm, Optional[NodeHandshake]]] = {}
_ROW_BYTES = 32  # the default agreement's row: four int64
_SPMD_TEXT = 240  # bytes of each rank's description of its collective when the SPMD check fails
_LOCAL_CALLS_DIFFER = ("the ranks made different local calls since their previous collective (other arguments or "
                       "indices: each rank computed on its own, so their results no longer belong to one array)")


class MpiBackend(Backend):
    """The ``Backend`` protocol over MPI: this process holds exactly one rank.

    ``comm`` defaults to ``MPI.COMM_WORLD``; world ranks are its ranks.  The
    group communicators are cached per parent communicator (by its handle) and
    groups partition, so making a backend is cheap and every backend over the
    same communicator shares them.  Float sums follow MPI's reduction order,
    which may differ in the last bits from the simulated backend's group order.

    Example (under ``mpiexec -n 2``):
        >>> backend = MpiBackend()  # doctest: +SKIP
        >>> x = np.full(2, float(backend.rank))  # doctest: +SKIP
        >>> backend.all_reduce({backend.rank: x}, ((0, 1),))[backend.rank]  # doctest: +SKIP
        array([1., 1.])
    """

    name = "mpi"

    def __init__(self, comm: MPI.Intracomm | None = None) -> None:
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank: int = self.comm.Get_rank()
        self.world_size: int = self.comm.Get_size()
        self.ranks: tuple[int, ...] = (self.rank,)
        self._teams = _TEAMS.setdefault(self.comm.handle, {})
        if self.comm.handle not in _SERVICE:  # collective, like the backend itself: every rank makes its backend together
            service = self.comm.Dup()
            _SERVICE[self.comm.handle] = service, None if AGREE_BY_ALLGATHER else node_handshake(service, _ROW_BYTES)
        self._service, self._handshake = _SERVICE[self.comm.handle]
        self._checked_calls = 0
        self._agreed = np.empty((self.world_size, 4), np.int64)  # the default agreement's buffer (one call at a time)
        self._byte = MPI.BYTE
        install_abort_on_error(MPI.COMM_WORLD)
        if comm is None:
            start_watchdog(self.comm, self._service)
        # BLAS threads: this rank's share of the node's cores (see ``threads``); once per process
        self.blas_threads: int | None = share_cores_among_ranks(self.world_size) if comm is None else None

    def __repr__(self) -> str:
        return f"MpiBackend(rank={self.rank}, world_size={self.world_size})"

    # -- the one path ------------------------------------------------------------------

    def _prepare(self, kind: str, groups: Groups, shapes: dict[int, tuple[int, ...]], dtype: np.dtype,
                 arguments: Mapping[str, Any]) -> Prepared:
        cls = OPS.get(kind)
        if cls is None:
            raise CollectiveError(f"unknown collective {kind!r}: expected one of {tuple(OPS)}")
        fingerprint = call_fingerprint(kind, layout_groups(groups, self.world_size), frozen(arguments), dtype.str)
        team = self._team(groups, lambda: f"{kind} {dict(arguments)} on groups {groups}")
        if len(shapes) != 1 or self.rank not in shapes:
            raise self._keys_error(kind, shapes)
        shape = tuple(int(n) for n in shapes[self.rank])
        validate_dtype(dtype, kind)
        op = cls.parse(len(shape), team.group, **arguments)
        op.check_local(self.rank, team.position, shape, dtype)
        runner = _Runner(self, team, op, shape, dtype, fingerprint)
        out_shape = op.out_shape(shape, team.position, team.size)
        return Prepared(kind, dtype, {self.rank: shape}, {self.rank: out_shape}, runner.host.call.name,
                        runner.run, runner.start)

    def _checked(self, kind: str, shards: Shards, groups: Groups, check: bool,
                 arguments: Mapping[str, Any]) -> tuple[Prepared, dict[int, Array]]:
        """This rank's array and its prepared call; with ``check`` the group agrees first (see the module doc)."""
        describe = lambda: f"{kind} {dict(arguments)} on groups {groups}"  # noqa: E731
        if checking:
            self.check_spmd_call(call_fingerprint(kind, layout_groups(groups, self.world_size), frozen(arguments)),
                                 describe)
        team = self._team(groups, describe)  # invalid groups raise here, on every rank alike
        x, op, error = None, None, None
        try:
            if len(shards) != 1 or self.rank not in shards:
                raise self._keys_error(kind, shards)
            x = shards[self.rank]
            if type(x) is not np.ndarray and not is_device_array(x):
                x = np.asarray(x)
            validate_dtype(x.dtype, kind)
            cls = OPS.get(kind)
            if cls is None:
                raise CollectiveError(f"unknown collective {kind!r}: expected one of {tuple(OPS)}")
            op = cls.parse(x.ndim, team.group, **arguments)
            op.check_local(self.rank, team.position, tuple(x.shape), x.dtype)
        except (TypeError, ValueError) as exc:
            if not check:
                raise
            error = exc
        if check:
            if not checking:  # every collective starts with the same small call (see ``agree``)
                self.agree_on(call_fingerprint(kind, team.all_groups, frozen(arguments)), describe)
            self._agree(team, kind, x, error, op)
        return self.prepare(kind, groups, {self.rank: x.shape}, x.dtype, **arguments), {self.rank: x}

    def barrier(self) -> None:
        """``Barrier`` over the whole world."""
        self.comm.Barrier()

    def check_spmd_call(self, fingerprint: int, describe: Callable[[], str]) -> None:
        """The SPMD check (see :mod:`collectives.spmd`): every rank issues this call from the same line, or all raise.

        One ``Allgather`` over the world of (call fingerprint, call site, count,
        the local calls since the previous collective: what the default
        agreement compares too); on a mismatch a second one shares every rank's
        ``describe()`` and call site, and every rank raises
        :class:`~collectives.spmd.SpmdError` with all of them.
        """
        site = call_site(2)
        self._checked_calls += 1
        local = local_calls[0]
        mine = np.array([fingerprint, zlib.crc32(site.encode()), self._checked_calls, local - (local >> 63 << 64),
                         1 if pending else 0], np.int64)
        local_calls[0] = 0
        pending.clear()
        rows = np.empty((self.world_size, 5), np.int64)
        self._service.Allgather(mine, rows)
        same_call = bool((rows[:, :2] == mine[:2]).all())
        raised = rows[:, 4].nonzero()[0].tolist()
        # as the default agreement: the local calls are compared unless the ranks raised since the last collective
        # (ranks that all raised may have stopped at other calls: NumPy's own code may try them in another order)
        if same_call and (len(raised) == self.world_size or (not raised and (rows[:, 3] == mine[3]).all())):
            return
        if not same_call:
            headline = ("SPMD check: the ranks do not issue the same collective from the same line (they took "
                        "different paths through the program; without the check they would hang or pair the wrong calls)")
        elif raised:
            headline = (f"SPMD check: rank(s) {raised} raised an error since the previous collective that the other "
                        "ranks did not have (their input differed)")
        else:
            headline = "SPMD check: " + _LOCAL_CALLS_DIFFER
        self._raise_spmd(f"{describe()} at {site} (collective #{self._checked_calls} of this rank)", headline)

    def agree(self, mine: bytes, everyone: bytes, group: tuple[int, ...], describe: Callable[[], str]) -> None:
        """The default agreement (see :mod:`collectives.spmd`): the world makes the same call, or all raise.

        ``mine`` is the bytes of (the call's fingerprint, its shape's, 0, 0) as
        four int64, and ``everyone`` the bytes of ``world_size`` copies of it:
        one ``Allgather`` over the world (about half the time of a small
        ``Allreduce`` here), then one bytes compare.  The third int64 carries
        "this rank raised in its previous call" (``spmd.note_local_error``), the
        fourth the running fingerprint of the local calls since the last
        agreement (``spmd.note_local_call``; the row is then built anew, as
        bytes: a NumPy row costs twice as much).  When the bytes differ, the
        call fingerprints must still be equal world-wide, the shape fingerprints
        within this rank's ``group`` (other groups may hold other shapes) and
        the local calls' world-wide.  On a mismatch every rank raises
        :class:`~collectives.spmd.SpmdError` naming each rank's ``describe()``
        and call site (a second, rare ``Allgather``).
        """
        local = local_calls[0]
        if pending or local:
            local_calls[0] = 0
            mine = mine[:24] + local.to_bytes(8, _ORDER)  # unsigned: a sum modulo 2**64
            everyone = mine * self.world_size
            if pending:  # this rank raised in its previous call: the others learn it here
                pending.clear()
                mine = mine[:16] + _RAISED + mine[24:]
        shake = self._handshake
        if shake is not None:
            rows = bytes(shake.exchange(mine))  # (a bytes compare is faster than a memoryview's)
            if rows == everyone:
                return
            out = np.frombuffer(rows, np.int64).reshape(self.world_size, 4)
        else:
            out = self._agreed
            self._service.Allgather([mine, self._byte], [out, self._byte])
            if out.tobytes() == everyone:
                return
        row = np.frombuffer(mine, np.int64)
        same = bool((out[:, 0] == row[0]).all() and (out[list(group), 1] == row[1]).all())
        raised = out[:, 2].nonzero()[0].tolist()
        if raised and len(raised) < self.world_size:
            if row[2] and not same:  # the others are still in the call that raised here: they raise, this rank retries
                again = mine[:16] + bytes(8) + mine[24:]  # its local calls since the error: the others' next ones
                return self.agree(again, again * self.world_size, group, describe)
            raise SpmdError(
                f"rank(s) {raised} raised an error in their previous call that the other ranks did not have (their "
                f"input differed); every rank raises {'here, at the next collective' if same else 'in that call'}, "
                f"and the ranks stay in step (this rank: {describe()} at {call_site(2)})")
        if not same:
            self._raise_spmd(
                f"{describe()} at {call_site(2)}",
                "the ranks issue different collectives (or pass inputs that do not fit each other): every rank "
                "raises here, before any data moves, and the ranks stay in step",
            )
        if not raised and (out[:, 3] != row[3]).any():
            self._raise_spmd(
                f"{describe()} at {call_site(2)}",
                _LOCAL_CALLS_DIFFER + "; every rank raises here, at the next collective, and the ranks stay in step",
            )

    def agree_on(self, fingerprint: int, describe: Callable[[], str]) -> None:
        """``agree`` on ``fingerprint`` while the default agreement is on and the full check is off."""
        if agreeing and not checking:
            mine = np.array([fingerprint, 0, 0, 0], np.int64).tobytes()
            self.agree(mine, mine * self.world_size, (), describe)

    def _raise_spmd(self, mine: str, headline: str) -> None:
        """Share every rank's description of its call (one ``Allgather``) and raise ``SpmdError`` with them all."""
        text = mine.encode()[:_SPMD_TEXT]
        texts = np.zeros((self.world_size, _SPMD_TEXT), np.uint8)
        self._service.Allgather(np.frombuffer(text.ljust(_SPMD_TEXT, b"\0"), np.uint8), texts)
        lines = [f"  rank {r}: {bytes(texts[r]).rstrip(bytes(1)).decode(errors='replace')}" for r in range(self.world_size)]
        raise SpmdError(headline + ":\n" + "\n".join(lines))

    # -- helpers for the higher layer -----------------------------------------

    def all_true(self, flag_per_rank: Mapping[int, bool]) -> bool:
        """Logical AND of every rank's flag (one ``Allreduce``), the same on every rank.

        A rank that passes the wrong keys counts as False and raises afterwards.
        """
        keys_ok = len(flag_per_rank) == 1 and self.rank in flag_per_rank
        mine = np.array([1 if keys_ok and bool(flag_per_rank[self.rank]) else 0], np.int32)
        everyone = np.empty(1, np.int32)
        if checking:
            self.check_spmd_call(_ALL_TRUE, lambda: "all_true")
        self.agree_on(_ALL_TRUE, lambda: "all_true")
        self._world_comm().Allreduce(mine, everyone, _mpi().MIN)
        if not keys_ok:
            raise self._keys_error("all_true", flag_per_rank)
        return bool(everyone[0])

    def gather_descriptors(
        self, desc_per_rank: Mapping[int, Sequence[int]]
    ) -> dict[int, tuple[int, ...]]:
        """Every rank's short int descriptor (at most 16 ints), via one ``Allgather``."""
        row = np.zeros(1 + MAX_DESCRIPTOR_LENGTH, np.int64)
        error: Exception | None = None
        try:
            if len(desc_per_rank) != 1 or self.rank not in desc_per_rank:
                raise self._keys_error("gather_descriptors", desc_per_rank)
            descriptor = [int(v) for v in desc_per_rank[self.rank]]
            if len(descriptor) > MAX_DESCRIPTOR_LENGTH:
                raise CollectiveError(
                    f"gather_descriptors: expected at most {MAX_DESCRIPTOR_LENGTH} ints per rank, "
                    f"got {len(descriptor)} from rank {self.rank}"
                )
            row[0] = len(descriptor)
            row[1:1 + len(descriptor)] = descriptor
        except (TypeError, ValueError, OverflowError) as exc:
            error = exc
            row[0] = -1
        rows = np.empty((self.world_size, 1 + MAX_DESCRIPTOR_LENGTH), np.int64)
        if checking:
            self.check_spmd_call(_GATHER_DESCRIPTORS, lambda: "gather_descriptors")
        self.agree_on(_GATHER_DESCRIPTORS, lambda: "gather_descriptors")
        self._world_comm().Allgather(row, rows)
        if error is not None:
            raise error
        failed = [rank for rank in range(self.world_size) if rows[rank, 0] < 0]
        if failed:
            raise CollectiveError(
                f"gather_descriptors: ranks {failed} passed invalid descriptors "
                f"(expected at most {MAX_DESCRIPTOR_LENGTH} ints each)"
            )
        return {
            rank: tuple(int(v) for v in rows[rank, 1:1 + rows[rank, 0]])
            for rank in range(self.world_size)
        }

    # -- plumbing -------------------------------------------------------------

    def _keys_error(self, kind: str, per_rank: Mapping[Any, Any]) -> CollectiveError:
        return CollectiveError(
            f"{kind}: expected shards for ranks [{self.rank}] (this MPI process's rank), "
            f"got ranks {describe_keys(per_rank)}"
        )

    def _agree(
        self, team: _Team, kind: str, x: Optional[Array], error: Optional[Exception], op: Optional[CollectiveOp]
    ) -> None:
        """``check=True``: one ``Allgather`` of descriptors, then everyone raises together."""
        info = MemberInfo(
            self.rank,
            dtype_code(x.dtype) if x is not None and hasattr(x, "dtype") else 0,
            tuple(x.shape) if x is not None and hasattr(x, "shape") else (),
            status_of(error),
            call_fingerprint(kind, team.all_groups, op),
        )
        rows = np.empty((team.size, DESCRIPTOR_LENGTH), np.int64)
        team.comm.Allgather(encode(info), rows)
        if error is not None:
            raise error
        infos = [decode(rows[i], team.group[i]) for i in range(team.size)]
        verify(kind, team.group, infos, op)

    def _team(self, groups: Groups, describe: Callable[[], str] = lambda: "a collective") -> _Team:
        """This rank's group communicator for ``groups`` (made on first use, then cached).

        Making one is a collective on the whole world (``Comm.Split``), the
        first time each rank uses these groups; under the SPMD check the ranks
        first agree on it (``describe()`` says for what).
        """
        try:
            team = self._teams.get(groups)
        except TypeError:  # unhashable groups (lists): normalised below
            team = None
        return team if team is not None else self._new_team(groups, describe)

    def _new_team(self, groups: Groups, describe: Callable[[], str]) -> _Team:
        layout = group_layout(groups, self.world_size)
        team = self._teams.get(layout.groups)
        if team is None:
            if checking:
                self.check_spmd_call(call_fingerprint("groups", layout.groups), lambda: f"new groups for {describe()}")
            self.agree_on(call_fingerprint("groups", layout.groups), lambda: f"new groups for {describe()}")
            rank = self.rank
            group = layout.group_of(rank)
            comm = self.comm.Split(layout.group_index[rank], layout.position[rank])
            # Once per partition: did every member of the new communicator pass these groups?
            mine = np.array([rank, layout.fingerprint], np.int64)
            members = np.empty((comm.Get_size(), 2), np.int64)
            comm.Allgather(mine, members)
            if tuple(members[:, 0].tolist()) != group or (members[:, 1] != layout.fingerprint).any():
                comm.Free()
                raise CollectiveError(
                    f"every rank must pass the same groups: rank {rank} passed {layout.groups}, "
                    f"but its group's communicator holds ranks {members[:, 0].tolist()} "
                    "with different groups"
                )
            team = _Team(
                comm, group, layout.position[rank], len(group), layout.fingerprint, layout.groups
            )
            self._teams[layout.groups] = team
        try:
            self._teams[groups] = team
        except TypeError:
            pass
        return team

    def _world_comm(self) -> MPI.Intracomm:
        """The communicator of the helpers: one group holding the whole world."""
        return self._team((tuple(range(self.world_size)),)).comm


class _Plan:
    """One rank's :class:`~collectives.ops.MpiCall` bound to its communicator and an array library."""

    __slots__ = ("call", "blocking", "nonblocking", "new")

    def __init__(self, call: MpiCall, comm: MPI.Intracomm, dtype: np.dtype, xp: Any) -> None:
        self.call = call
        self.blocking = getattr(comm, call.name)
        self.nonblocking = getattr(comm, "I" + call.name[0].lower() + call.name[1:])  # Allgatherv -> Iallgatherv
        self.new = new_array(call.recv_shape, dtype, xp)

    def arguments(self, x: Array) -> tuple[tuple[Any, ...], Array]:
        """The MPI call's arguments for input ``x``, and the buffer it receives into (see ``MpiCall``)."""
        call = self.call
        if call.in_place:
            recv = call.pack(x) if call.pack is not None else self.new()
            return ([recv, *call.recv_spec], *call.extra), recv
        recv = self.new()
        if call.send_spec is None:
            return (None, [recv, *call.recv_spec], *call.extra), recv
        send = x if call.pack is None else call.pack(x)
        return ([send, *call.send_spec], [recv, *call.recv_spec], *call.extra), recv

    def result(self, recv: Array) -> Array:
        finish = self.call.finish
        return recv if finish is None else finish(recv)


class _Runner:
    """Every way to run one prepared collective on this rank, all from the op's one ``MpiCall``.

    ``run`` is the hot path for a C-contiguous NumPy input of the prepared shape
    and (native) dtype; ``execute`` takes anything else (a strided view, another
    byte order, a CuPy array, a non-blocking start) through the same call.
    """

    __slots__ = ("backend", "rank", "team", "op", "shape", "dtype", "nbytes", "fingerprint", "agreed", "everyone", "host",
                 "device", "run")

    def __init__(self, backend: MpiBackend, team: _Team, op: CollectiveOp, shape: tuple[int, ...], dtype: np.dtype,
                 fingerprint: int) -> None:
        native = _native(dtype)
        self.backend, self.rank, self.team, self.op, self.shape, self.dtype = backend, backend.rank, team, op, shape, native
        self.fingerprint = fingerprint  # what every rank must issue too, under the SPMD check
        # ... and by default: the call world-wide, the shape within the group
        self.agreed = np.array([fingerprint, call_fingerprint(len(shape), op.agreed_shape(shape)), 0, 0],
                               np.int64).tobytes()
        self.everyone = self.agreed * backend.world_size
        self.nbytes = math.prod(shape) * native.itemsize
        self.host = _Plan(op.mpi_call(team.position, team.size, shape, native, np), team.comm, native, np)
        self.device: Optional[_Plan] = None
        self.run = self._hot_path()

    def _hot_path(self) -> Callable[[Shards], dict[int, Array]]:
        rank, shape, dtype, nbytes, kind = self.rank, self.shape, self.dtype, self.nbytes, self.op.counted_as
        plan, execute = self.host, self.execute
        call = plan.call
        if call.send_spec is None or call.in_place or call.numpy_op:
            return lambda shards: execute(shards[rank], True)
        mpi_fn, new, pack, finish = plan.blocking, plan.new, call.pack, call.finish
        send_spec, recv_spec, extra = call.send_spec, call.recv_spec, call.extra
        ndarray, counters, record, spmd = np.ndarray, counting.active, counting.record, checking
        agree, on, mine, everyone, describe = self.backend.agree, agreeing, self.agreed, self.everyone, self.describe
        group = self.team.group

        # One closure per number of trailing arguments: a call with ``*extra`` costs ~50 ns more.
        if not extra:
            def run(shards: Shards) -> dict[int, Array]:
                x = shards[rank]
                if (spmd or x.__class__ is not ndarray or x.shape != shape or x.dtype != dtype
                        or not x.flags.c_contiguous):
                    return execute(x, True)
                if on:
                    agree(mine, everyone, group, describe)
                if counters:
                    record(kind, nbytes)
                send = x if pack is None else pack(x)
                recv = new()
                mpi_fn([send, *send_spec], [recv, *recv_spec])
                return {rank: recv if finish is None else finish(recv)}

            return run
        if len(extra) == 1:
            (last,) = extra

            def run_one(shards: Shards) -> dict[int, Array]:
                x = shards[rank]
                if (spmd or x.__class__ is not ndarray or x.shape != shape or x.dtype != dtype
                        or not x.flags.c_contiguous):
                    return execute(x, True)
                if on:
                    agree(mine, everyone, group, describe)
                if counters:
                    record(kind, nbytes)
                send = x if pack is None else pack(x)
                recv = new()
                mpi_fn([send, *send_spec], [recv, *recv_spec], last)
                return {rank: recv if finish is None else finish(recv)}

            return run_one

        def run_many(shards: Shards) -> dict[int, Array]:
            x = shards[rank]
            if spmd or x.__class__ is not ndarray or x.shape != shape or x.dtype != dtype or not x.flags.c_contiguous:
                return execute(x, True)
            if on:
                agree(mine, everyone, group, describe)
            if counters:
                record(kind, nbytes)
            send = x if pack is None else pack(x)
            recv = new()
            mpi_fn([send, *send_spec], [recv, *recv_spec], *extra)
            return {rank: recv if finish is None else finish(recv)}

        return run_many

    def start(self, shards: Shards) -> Handle:
        """Start the collective on this rank's array; the handle's ``wait()`` returns ``{rank: result}``."""
        return self.execute(shards[self.rank], False)

    def execute(self, x: Any, blocking: bool) -> Any:
        """Run (``blocking``) or start the collective on any input of the prepared shape."""
        restore = sync = None
        plan = self.host
        reads = plan.call.reads_input  # False: a non-root member, whose data is never read (no staging, no copy)
        if is_device_array(x):
            staged = stage_for_mpi(x, host_only=plan.call.host_only, transfer=reads)
            if staged.xp is np:  # through host memory
                x, restore = staged.buffer, staged.restore
            else:  # CUDA-aware MPI: device buffers straight to MPI
                plan, sync = self._device_plan(staged.xp), staged.sync
                x = staged.xp.ascontiguousarray(x) if reads else x
        elif not hasattr(x, "shape") or not hasattr(x, "dtype"):
            x = np.asarray(x)
        if plan is self.host and reads:
            x = _c_contiguous(x if type(x) is np.ndarray else np.asarray(x))
        x_shape, x_dtype = tuple(x.shape), _native(x.dtype)
        if x_shape != self.shape or x_dtype != self.dtype:
            raise CollectiveError(
                f"{self.op.name}: prepared for rank {self.rank}'s input of shape {self.shape} and dtype "
                f"{self.dtype}, got shape {x_shape} and dtype {x_dtype}"
            )
        if checking:
            self.backend.check_spmd_call(self.fingerprint, self.describe)
        elif agreeing:
            self.backend.agree(self.agreed, self.everyone, self.team.group, self.describe)
        if counting.active:
            counting.record(self.op.counted_as, self.nbytes)
        args, recv = plan.arguments(x)
        if sync is not None:
            sync()
        rank = self.rank
        numpy_op = plan.call.numpy_op
        if numpy_op:
            take_fp_events()
        if blocking:
            plan.blocking(*args)
            if numpy_op:
                self._fp_events()
            out = plan.result(recv)
            return {rank: out if restore is None else restore(out)}
        request = plan.nonblocking(*args)

        def complete() -> dict[int, Array]:
            if numpy_op:
                self._fp_events()
            out = plan.result(recv)
            return {rank: out if restore is None else restore(out)}

        return Handle(complete, request, (args, x))

    def _fp_events(self) -> None:
        """After a reduction that ran NumPy inside MPI: its floating-point errors, as ``np.geterr()`` says.

        The op ran on some members only, so when an error must raise, the group
        first ORs every member's events (one small ``Allreduce``): every member
        raises the same ``FloatingPointError``, after the collective, never inside MPI.
        """
        mask = take_fp_events()
        if "raise" in np.geterr().values():  # the same on every member (SPMD): all make the extra call
            mine = np.array([mask], np.int64)
            everyone = np.empty(1, np.int64)
            self.team.comm.Allreduce(mine, everyone, _mpi().BOR)
            mask = int(everyone[0])
        if mask:
            raise_fp_events(mask, f"{self.op.name} of {self.dtype} (op {getattr(self.op, 'op', '?')})")

    def describe(self) -> str:
        """What this rank's call is, for the SPMD check's message."""
        return f"{self.op.name} {self.op!r} of {self.dtype} {self.shape} on groups {self.team.all_groups}"

    def _device_plan(self, xp: Any) -> _Plan:
        if self.device is None:
            team = self.team
            call = self.op.mpi_call(team.position, team.size, self.shape, self.dtype, xp)
            self.device = _Plan(call, team.comm, self.dtype, xp)
        return self.device


_ORDER = sys.byteorder  # an int64 row's byte order (NumPy's native)
_RAISED = (1).to_bytes(8, _ORDER)


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


def _native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _c_contiguous(x: Array) -> Array:
    """``x`` as a C-contiguous array in native byte order (copied only if it is not)."""
    if not x.dtype.isnative:
        return x.astype(_native(x.dtype), order="C")
    return x if x.flags.c_contiguous else x.copy()
