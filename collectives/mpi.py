"""``MpiBackend``: one process per rank; collectives through mpi4py's buffer interface.

Design choices:

* Sub-communicators.  Each groups partition gets one communicator per
  process, made once with ``Comm.Split`` (colour = group index, key = position,
  so a member's rank in it is its position in the group) and cached at module
  level per parent communicator; ``MpiBackend`` objects are cheap to make.
  Datatypes and user-defined ops are cached too (``dtypes``, ``reduce_ops``),
  so a call does no setup work beyond computing counts.
* Data path.  Only the uppercase buffer methods; nothing is pickled.  Results
  are received straight into preallocated output arrays.
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
* Axes.  Pieces along a leading axis are already contiguous.  For any other
  axis the sender copies its pieces once into a flat buffer (``packing``) and
  the receiver concatenates the received blocks once.
* Checks.  ``check=True`` costs ONE ``Allgather`` of a fixed-size int64
  descriptor over the group (``agreement``); afterwards every member raises
  the same error or none does, so no rank enters the data collective while
  another has raised.  A rank whose own validation failed still takes part in
  that ``Allgather`` and raises afterwards.  ``check=False`` sends nothing extra.
* Devices.  CuPy arrays go through ``device.stage_for_mpi``.
* Prepared calls.  ``prepare_all_gather`` and friends work out, for one
  rank's input shape and dtype, everything the call needs (communicator, MPI
  function, counts, output shape), so each use is one mpi4py call on plain
  buffers (``prepared``); the redistribute runner uses them.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .abort import install_abort_on_error
from .threads import share_cores_among_ranks
from .agreement import DESCRIPTOR_LENGTH, MemberInfo, call_fingerprint, decode, encode, status_of, verify
from .counting import record
from .device import Staged, is_device_array, stage_for_mpi
from .dtypes import dtype_code, movement_datatype, validate_dtype
from .errors import CollectiveError
from .handles import Handle
from .layout import (
    all_equal,
    all_to_all_arguments,
    axis_and_sizes,
    check_root,
    chunk_sizes,
    describe_keys,
    group_layout,
    is_leading_axis,
    offsets,
    piece_counts,
    with_length,
)
from .packing import concat_blocks, pack_pieces
from .prepared import (
    Prepared,
    prepare_all_gather,
    prepare_all_reduce,
    prepare_all_to_all,
    prepare_reduce_scatter,
)
from .protocol import MAX_DESCRIPTOR_LENGTH, Array, Backend, Groups, ReduceOp, Shards, Sizes
from .reduce_ops import (
    REDUCE_OPS,
    divide_by_group_size,
    mpi_reduction,
    validate_reduce_op,
    validate_reduction,
)

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["MpiBackend"]


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
        install_abort_on_error(MPI.COMM_WORLD)
        # BLAS threads: this rank's share of the node's cores (see ``threads``); once per process
        self.blas_threads: int | None = share_cores_among_ranks(self.world_size) if comm is None else None

    def __repr__(self) -> str:
        return f"MpiBackend(rank={self.rank}, world_size={self.world_size})"

    # -- collectives ---------------------------------------------------------

    def all_gather(
        self, shards: Shards, groups: Groups, *, axis: int = 0,
        in_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Concatenate every member's array along ``axis`` in group order (see ``Backend``)."""
        return self._all_gather(shards, groups, axis, in_sizes, check, True)

    def iall_gather(
        self, shards: Shards, groups: Groups, *, axis: int = 0,
        in_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """Start ``all_gather`` (``Iallgather``/``Iallgatherv``)."""
        return self._all_gather(shards, groups, axis, in_sizes, check, False)

    def all_reduce(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True
    ) -> dict[int, Array]:
        """Give every member the reduction (``op``) of its group's arrays (see ``Backend``)."""
        return self._all_reduce(shards, groups, op, check, True)

    def iall_reduce(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True
    ) -> Handle:
        """Start ``all_reduce`` (``Iallreduce``)."""
        return self._all_reduce(shards, groups, op, check, False)

    def reduce_scatter(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Reduce the group's arrays; member ``i`` gets piece ``i`` along ``axis`` (see ``Backend``)."""
        return self._reduce_scatter(shards, groups, op, axis, out_sizes, check, True)

    def ireduce_scatter(
        self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """Start ``reduce_scatter`` (``Ireduce_scatter_block``/``Ireduce_scatter``)."""
        return self._reduce_scatter(shards, groups, op, axis, out_sizes, check, False)

    def all_to_all(
        self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Split along ``split_axis``, exchange, concatenate along ``concat_axis`` (see ``Backend``)."""
        return self._all_to_all(
            shards, groups, split_axis, concat_axis, in_sizes, out_sizes, check, True
        )

    def iall_to_all(
        self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None, check: bool = True,
    ) -> Handle:
        """Start ``all_to_all`` (``Ialltoall``/``Ialltoallv``)."""
        return self._all_to_all(
            shards, groups, split_axis, concat_axis, in_sizes, out_sizes, check, False
        )

    def broadcast(
        self, shards: Shards, groups: Groups, *, root: int = 0, check: bool = True
    ) -> dict[int, Array]:
        """Copy the array of the member at index ``root`` to every member (``Bcast``).

        Non-root members pass an array of the root's shape and dtype; its data is not read.
        """
        kind = "broadcast"
        team = self._team(groups)
        check_root(kind, root, team.all_groups)
        x, _ = self._own_array(team, kind, shards, check, call=(root,))
        record(kind, x.nbytes)
        is_root = team.position == root
        staged = stage_for_mpi(x, transfer=is_root)
        if is_root:
            out = _c_contiguous(staged.buffer)
            if out is x:
                out = out.copy()
        else:
            out = staged.xp.empty(x.shape, _native(x.dtype))
        args = ([out, out.size, movement_datatype(out.dtype)], root)
        return self._issue(True, staged, team.comm.Bcast, None, args, lambda: out)

    def scatter(
        self, shards: Shards, groups: Groups, *, root: int = 0, axis: int = 0,
        out_sizes: Sizes | None = None, check: bool = True,
    ) -> dict[int, Array]:
        """Split the root's array along ``axis``; member ``i`` gets piece ``i`` (``Scatter``/``Scatterv``).

        Non-root members pass an array of the root's shape and dtype; its data is not read.
        """
        kind = "scatter"
        team = self._team(groups)
        check_root(kind, root, team.all_groups)
        x, (axis, sizes) = self._own_array(
            team, kind, shards, check, axis_and_sizes, axis, out_sizes, "out_sizes",
            names=("axis", "out_sizes"), call=(root,),
        )
        if sizes is None:
            sizes = chunk_sizes(x.shape[axis], team.size)
        record(kind, x.nbytes)
        is_root = team.position == root
        staged = stage_for_mpi(x, transfer=is_root)
        dtype = _native(x.dtype)
        datatype = movement_datatype(dtype)
        recv = staged.xp.empty(with_length(x.shape, axis, sizes[team.position]), dtype)
        send = None
        if is_root:
            send = pack_pieces(_c_contiguous(staged.buffer), axis, sizes, staged.xp)
        comm = team.comm
        if all_equal(sizes):
            send_spec = None if send is None else [send, recv.size, datatype]
            args = (send_spec, [recv, recv.size, datatype], root)
            return self._issue(True, staged, comm.Scatter, None, args, lambda: recv)
        counts = piece_counts(x.shape, axis, sizes)
        send_spec = None if send is None else [send, counts, offsets(counts), datatype]
        args = (send_spec, [recv, recv.size, datatype], root)
        return self._issue(True, staged, comm.Scatterv, None, args, lambda: recv)

    def barrier(self) -> None:
        """``Barrier`` over the whole world."""
        self.comm.Barrier()

    # -- prepared collectives (see ``prepared``) --------------------------------

    def prepare_all_gather(
        self, groups: Groups, shape: Sequence[int], dtype: Any, *, axis: int = 0,
        in_sizes: Sizes | None = None,
    ) -> Prepared:
        """``all_gather`` for this rank's array of ``shape``/``dtype``, worked out once.

        The returned ``Prepared`` ``run(x)`` gives what ``all_gather({rank: x}, groups,
        axis=axis, in_sizes=in_sizes, check=False)[rank]`` gives, with one mpi4py call.
        """
        return prepare_all_gather(self, groups, shape, dtype, axis=axis, in_sizes=in_sizes)

    def prepare_all_reduce(
        self, groups: Groups, shape: Sequence[int], dtype: Any, *, op: ReduceOp = "sum"
    ) -> Prepared:
        """``all_reduce`` for this rank's array of ``shape``/``dtype``, worked out once."""
        return prepare_all_reduce(self, groups, shape, dtype, op=op)

    def prepare_reduce_scatter(
        self, groups: Groups, shape: Sequence[int], dtype: Any, *, op: ReduceOp = "sum",
        axis: int = 0, out_sizes: Sizes | None = None,
    ) -> Prepared:
        """``reduce_scatter`` for this rank's array of ``shape``/``dtype``, worked out once."""
        return prepare_reduce_scatter(self, groups, shape, dtype, op=op, axis=axis, out_sizes=out_sizes)

    def prepare_all_to_all(
        self, groups: Groups, shape: Sequence[int], dtype: Any, *, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None = None, out_sizes: Sizes | None = None,
    ) -> Prepared:
        """``all_to_all`` for this rank's array of ``shape``/``dtype``, worked out once."""
        return prepare_all_to_all(
            self, groups, shape, dtype, split_axis=split_axis, concat_axis=concat_axis,
            in_sizes=in_sizes, out_sizes=out_sizes,
        )

    # -- helpers for the higher layer -----------------------------------------

    def all_true(self, flag_per_rank: Mapping[int, bool]) -> bool:
        """Logical AND of every rank's flag (one ``Allreduce``), the same on every rank.

        A rank that passes the wrong keys counts as False and raises afterwards.
        """
        keys_ok = len(flag_per_rank) == 1 and self.rank in flag_per_rank
        mine = np.array([1 if keys_ok and bool(flag_per_rank[self.rank]) else 0], np.int32)
        everyone = np.empty(1, np.int32)
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

    # -- the collectives' bodies (blocking or not) ------------------------------

    def _all_gather(
        self, shards: Shards, groups: Groups, axis: int, in_sizes: Sizes | None,
        check: bool, blocking: bool,
    ) -> Any:
        kind = "all_gather"
        team = self._team(groups)
        x, (axis, sizes) = self._own_array(
            team, kind, shards, check, axis_and_sizes, axis, in_sizes, "in_sizes",
            names=("axis", "in_sizes"),
        )
        record(kind, x.nbytes)
        staged = stage_for_mpi(x)
        xp = staged.xp
        send = _c_contiguous(staged.buffer)
        shape, dtype, k = send.shape, send.dtype, team.size
        datatype = movement_datatype(dtype)
        comm = team.comm
        leading = is_leading_axis(shape, axis)
        if sizes is None or all_equal(sizes):
            count = send.size
            if leading:
                recv = xp.empty(with_length(shape, axis, shape[axis] * k), dtype)
                finish: Callable[[], Array] = lambda: recv  # noqa: E731
            else:
                recv = xp.empty((k,) + shape, dtype)
                finish = lambda: xp.concatenate(list(recv), axis=axis)  # noqa: E731
            args = ([send, count, datatype], [recv, count, datatype])
            return self._issue(blocking, staged, comm.Allgather, comm.Iallgather, args, finish)
        shapes = [with_length(shape, axis, size) for size in sizes]
        counts = [math.prod(s) for s in shapes]
        if leading:
            recv = xp.empty(with_length(shape, axis, sum(sizes)), dtype)
            finish = lambda: recv  # noqa: E731
        else:
            recv = xp.empty(sum(counts), dtype)
            finish = lambda: concat_blocks(recv, shapes, axis, xp)  # noqa: E731
        args = ([send, send.size, datatype], [recv, counts, offsets(counts), datatype])
        return self._issue(blocking, staged, comm.Allgatherv, comm.Iallgatherv, args, finish)

    def _all_reduce(
        self, shards: Shards, groups: Groups, op: ReduceOp, check: bool, blocking: bool
    ) -> Any:
        kind = "all_reduce"
        validate_reduce_op(op, kind)
        team = self._team(groups)
        x, _ = self._own_array(team, kind, shards, check, op=op)
        record(kind, x.nbytes)
        datatype, mpi_op, runs_numpy = mpi_reduction(_native(x.dtype), op)
        staged = stage_for_mpi(x, host_only=runs_numpy)
        send = _c_contiguous(staged.buffer)
        recv = staged.xp.empty(send.shape, send.dtype)
        args = ([send, send.size, datatype], [recv, send.size, datatype], mpi_op)
        finish = _finisher(recv, op, team.size)
        comm = team.comm
        return self._issue(blocking, staged, comm.Allreduce, comm.Iallreduce, args, finish)

    def _reduce_scatter(
        self, shards: Shards, groups: Groups, op: ReduceOp, axis: int,
        out_sizes: Sizes | None, check: bool, blocking: bool,
    ) -> Any:
        kind = "reduce_scatter"
        validate_reduce_op(op, kind)
        team = self._team(groups)
        x, (axis, sizes) = self._own_array(
            team, kind, shards, check, axis_and_sizes, axis, out_sizes, "out_sizes",
            names=("axis", "out_sizes"), op=op,
        )
        if sizes is None:
            sizes = chunk_sizes(x.shape[axis], team.size)
        record(kind, x.nbytes)
        datatype, mpi_op, runs_numpy = mpi_reduction(_native(x.dtype), op)
        staged = stage_for_mpi(x, host_only=runs_numpy)
        xp = staged.xp
        buffer = _c_contiguous(staged.buffer)
        send = pack_pieces(buffer, axis, sizes, xp)
        recv = xp.empty(with_length(buffer.shape, axis, sizes[team.position]), buffer.dtype)
        finish = _finisher(recv, op, team.size)
        comm = team.comm
        if all_equal(sizes):
            args: tuple[Any, ...] = ([send, datatype], [recv, recv.size, datatype], mpi_op)
            return self._issue(
                blocking, staged, comm.Reduce_scatter_block, comm.Ireduce_scatter_block, args, finish
            )
        counts = piece_counts(buffer.shape, axis, sizes)
        args = ([send, datatype], [recv, recv.size, datatype], counts, mpi_op)
        return self._issue(blocking, staged, comm.Reduce_scatter, comm.Ireduce_scatter, args, finish)

    def _all_to_all(
        self, shards: Shards, groups: Groups, split_axis: int, concat_axis: int,
        in_sizes: Sizes | None, out_sizes: Sizes | None, check: bool, blocking: bool,
    ) -> Any:
        kind = "all_to_all"
        team = self._team(groups)
        x, (split_axis, concat_axis, split_sizes, concat_sizes) = self._own_array(
            team, kind, shards, check, all_to_all_arguments, split_axis, concat_axis, in_sizes, out_sizes,
            names=("split_axis", "concat_axis", "out_sizes", "in_sizes"),
        )
        k = team.size
        shape = tuple(x.shape)
        if split_sizes is None:
            split_sizes = chunk_sizes(shape[split_axis], k)
        if concat_sizes is None:
            concat_sizes = (shape[concat_axis],) * k
        record(kind, x.nbytes)
        staged = stage_for_mpi(x)
        xp = staged.xp
        buffer = _c_contiguous(staged.buffer)
        dtype = buffer.dtype
        datatype = movement_datatype(dtype)
        send = pack_pieces(buffer, split_axis, split_sizes, xp)
        mine = with_length(shape, split_axis, split_sizes[team.position])
        out_shape = with_length(mine, concat_axis, sum(concat_sizes))
        comm = team.comm
        if is_leading_axis(out_shape, concat_axis):
            recv = xp.empty(out_shape, dtype)
            finish: Callable[[], Array] = lambda: recv  # noqa: E731
        else:
            recv = xp.empty(math.prod(out_shape), dtype)
            shapes = [with_length(mine, concat_axis, n) for n in concat_sizes]
            finish = lambda: concat_blocks(recv, shapes, concat_axis, xp)  # noqa: E731
        if all_equal(split_sizes) and all_equal(concat_sizes):
            send_count = send.size // k if k else 0
            recv_count = recv.size // k if k else 0
            args = ([send, send_count, datatype], [recv, recv_count, datatype])
            return self._issue(blocking, staged, comm.Alltoall, comm.Ialltoall, args, finish)
        send_counts = piece_counts(shape, split_axis, split_sizes)
        recv_counts = piece_counts(mine, concat_axis, concat_sizes)
        args = (
            [send, send_counts, offsets(send_counts), datatype],
            [recv, recv_counts, offsets(recv_counts), datatype],
        )
        return self._issue(blocking, staged, comm.Alltoallv, comm.Ialltoallv, args, finish)

    # -- plumbing -------------------------------------------------------------

    def _issue(
        self, blocking: bool, staged: Staged, run: Callable[..., Any],
        start: Callable[..., Any] | None, args: tuple[Any, ...], finish: Callable[[], Array],
    ) -> Any:
        """Run the MPI call (``blocking``) or start it and return a ``Handle``."""
        if staged.sync is not None:
            staged.sync()
        restore = staged.restore
        rank = self.rank
        if blocking:
            run(*args)
            result = finish()
            return {rank: result if restore is None else restore(result)}
        assert start is not None
        request = start(*args)

        def complete() -> dict[int, Array]:
            result = finish()
            return {rank: result if restore is None else restore(result)}

        return Handle(complete, request, args)

    def _keys_error(self, kind: str, per_rank: Mapping[Any, Any]) -> CollectiveError:
        return CollectiveError(
            f"{kind}: expected shards for ranks [{self.rank}] (this MPI process's rank), "
            f"got ranks {describe_keys(per_rank)}"
        )

    def _own_array(
        self, team: _Team, kind: str, shards: Shards, check: bool,
        parse: Callable[..., tuple[Any, ...]] | None = None, *arguments: Any,
        names: tuple[str, ...] = (), call: tuple[int, ...] = (), op: ReduceOp | None = None,
    ) -> tuple[Array, tuple[Any, ...]]:
        """This rank's array ``x`` (``shards`` must hold exactly this rank) and its other arguments, validated.

        ``x``'s dtype is checked (for ``op`` too, if given); the other arguments are
        ``parse(kind, x.ndim, team.group, *arguments)``, and ``names`` are ``verify``'s names for
        them.  Without ``check`` a validation error is raised here at once.  With it the group
        agrees first (``_agree``; the op, ``call`` and the parsed values make the call's
        fingerprint), so every member raises together or none does.
        """
        x, values, error = None, (), None
        try:
            if len(shards) != 1 or self.rank not in shards:
                raise self._keys_error(kind, shards)
            x = shards[self.rank]
            if type(x) is not np.ndarray and not is_device_array(x):
                x = np.asarray(x)
            validate_dtype(x.dtype, kind)
            if op is not None:
                validate_reduction(x.dtype, op, kind)
            if parse is not None:
                values = parse(kind, x.ndim, team.group, *arguments)
        except (TypeError, ValueError) as exc:
            if not check:
                raise
            error = exc
        if check:
            op_index = () if op is None else (REDUCE_OPS.index(op),)
            fingerprint = call_fingerprint(kind, team.fingerprint, *op_index, *call, *values)
            self._agree(team, kind, x, error, fingerprint, **dict(zip(names, values)))
        return x, values

    def _agree(
        self, team: _Team, kind: str, x: Array | None, error: Exception | None, call: int,
        **checks: Any,
    ) -> None:
        """``check=True``: one ``Allgather`` of descriptors, then everyone raises together."""
        info = MemberInfo(
            self.rank,
            dtype_code(x.dtype) if x is not None else 0,
            tuple(x.shape) if x is not None else (),
            status_of(error),
            call,
        )
        rows = np.empty((team.size, DESCRIPTOR_LENGTH), np.int64)
        team.comm.Allgather(encode(info), rows)
        if error is not None:
            raise error
        infos = [decode(rows[i], team.group[i]) for i in range(team.size)]
        verify(kind, team.group, infos, **checks)

    def _team(self, groups: Groups) -> _Team:
        """This rank's group communicator for ``groups`` (made on first use, then cached)."""
        try:
            team = self._teams.get(groups)
        except TypeError:  # unhashable groups (lists): normalised below
            team = None
        return team if team is not None else self._new_team(groups)

    def _new_team(self, groups: Groups) -> _Team:
        layout = group_layout(groups, self.world_size)
        team = self._teams.get(layout.groups)
        if team is None:
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


def _finisher(recv: Array, op: str, group_size: int) -> Callable[[], Array]:
    if op == "avg":
        return lambda: divide_by_group_size(recv, group_size)
    return lambda: recv
