"""Unit tests of the pieces that need no world: sizes, groups, dtypes, launch and CUDA
decisions, counters, handles and packing."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from collectives_testing import BFLOAT16, mesh_groups

import collectives
from collectives import (
    Backend,
    CollectiveError,
    CommCounter,
    Handle,
    MpiBackend,
    SimulatedBackend,
    array_module,
    chunk_sizes,
    comm_counter,
    cuda_aware_mpi,
    get_backend,
    launched_by_mpiexec,
    mpi_world_size,
)
from collectives.agreement import MemberInfo, decode, encode, verify
from collectives.device import CUDA_AWARE_ENV, detect_cuda_aware_mpi
from collectives.ops import AllGather, AllReduce
from collectives.dtypes import dtype_code, dtype_name, validate_dtype
from collectives.arguments import group_layout
from collectives.packing import block_receiver, piece_packer
from collectives.reduce_ops import validate_reduction


@pytest.mark.parametrize(
    ("length", "pieces", "expected"),
    [(5, 4, (2, 2, 1, 0)), (8, 4, (2, 2, 2, 2)), (0, 3, (0, 0, 0)), (1, 4, (1, 0, 0, 0)),
     (7, 3, (3, 3, 1)), (4, 3, (2, 2, 0)), (3, 1, (3,))],
)
def test_chunk_sizes_follow_torch_chunk(length, pieces, expected):
    assert chunk_sizes(length, pieces) == expected


def test_group_layout_positions_and_errors():
    layout = group_layout(mesh_groups((2, 2), 0), 4)
    assert layout.groups == ((0, 2), (1, 3))
    assert layout.group_index == (0, 1, 0, 1) and layout.position == (0, 0, 1, 1)
    assert group_layout([[1, 0]], 2).groups == ((1, 0),)  # lists are accepted
    assert group_layout(((np.int64(0), np.int64(1)),), 2).groups == ((0, 1),)
    with pytest.raises(CollectiveError, match=r"no group for ranks \[3\]"):
        group_layout(((0, 1), (2,)), 4)
    with pytest.raises(CollectiveError, match="rank 1 twice"):
        group_layout(((0, 1), (1, 2)), 3)
    with pytest.raises(CollectiveError, match="got rank 5"):
        group_layout(((0, 5),), 2)
    with pytest.raises(CollectiveError, match="empty group"):
        group_layout(((0, 1), ()), 2)


def test_dtype_validation():
    for bad in (object, "U3", "S2", "V8", [("a", "f4"), ("b", "i4")]):
        with pytest.raises(TypeError, match="cannot communicate arrays of dtype"):
            validate_dtype(np.dtype(bad), "all_gather")
    for ok in (np.float16, np.bool_, np.complex128, "M8[s]", "m8[ns]", np.uint8, np.longdouble):
        validate_dtype(np.dtype(ok), "all_gather")
    assert dtype_name(dtype_code(np.dtype(np.float32))) == "float32"
    assert dtype_name(dtype_code(np.dtype(object))) == "object"
    with pytest.raises(TypeError, match="avg"):
        validate_reduction(np.dtype(np.bool_), "avg", "all_reduce")
    with pytest.raises(TypeError, match="datetime64"):
        validate_reduction(np.dtype("M8[s]"), "sum", "all_reduce")


def test_dtype_names_of_every_dtype_in_both_byte_orders():
    """A code from another process names its dtype readably (``>f8``), even if this process never saw it."""
    from collectives import dtypes

    names = {}
    for scalar_type in set(np.sctypeDict.values()):
        native = np.dtype(scalar_type)
        for dtype in {native, native.newbyteorder(">"), native.newbyteorder("<")}:
            names[dtype_code(dtype)] = str(dtype)
    for unit in ("s", "ms", "ns", "D"):
        for dtype in (np.dtype(f">M8[{unit}]"), np.dtype(f"<m8[{unit}]")):
            names[dtype_code(dtype)] = str(dtype)
    dtypes._names_by_code.clear()  # as on a process that has seen none of them
    for code, name in names.items():
        assert dtype_name(code) == name
    assert dtype_name(dtype_code(np.dtype(">f8"))) == ">f8"
    assert dtype_name(dtype_code(np.dtype("<f8"))) == "float64"


def test_descriptor_round_trip_and_verify_messages():
    info = MemberInfo(3, dtype_code(np.dtype(np.int32)), (4, 0, 7), 0, -12345)
    assert decode(encode(info), 3) == info
    a = MemberInfo(0, dtype_code(np.dtype(np.float32)), (2, 3))
    b = MemberInfo(1, dtype_code(np.dtype(np.float64)), (2, 3))
    with pytest.raises(CollectiveError, match="expected float32 .* got float64 on rank 1"):
        verify("all_reduce", (0, 1), [a, b])
    c = MemberInfo(1, a.dtype, (2, 4))
    with pytest.raises(CollectiveError, match=r"expected \(2, 3\) .* got \(2, 4\) on rank 1"):
        verify("all_reduce", (0, 1), [a, c], AllReduce("sum"))
    verify("all_gather", (0, 1), [a, c], AllGather(axis=1, sizes=(3, 4)))
    with pytest.raises(CollectiveError, match="in_sizes gives rank 1 length 5"):
        verify("all_gather", (0, 1), [a, c], AllGather(axis=1, sizes=(3, 5)))
    failed = MemberInfo(1, dtype_code(np.dtype(object)), (2,), status=1)
    with pytest.raises(TypeError, match="rank 1 .* dtype object"):
        verify("all_gather", (0, 1), [a, failed], AllGather(axis=0))


def test_launch_detection_reads_the_environment(monkeypatch):
    for name in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "MPI_LOCALNRANKS", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "ALPS_APP_PE",
                 "PALS_RANKID"):
        monkeypatch.delenv(name, raising=False)
    assert not launched_by_mpiexec() and mpi_world_size() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "6")
    assert launched_by_mpiexec() and mpi_world_size() == 6
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "3")
    assert launched_by_mpiexec() and mpi_world_size() == 3


def test_importing_collectives_does_not_initialise_mpi():
    code = ("import sys, collectives; collectives.launched_by_mpiexec(); "
            "collectives.SimulatedBackend(2); assert 'mpi4py.MPI' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(_repo_root()))


def test_cuda_awareness_decision():
    never = lambda: pytest.fail("the query must not run when the env var decides")  # noqa: E731
    assert detect_cuda_aware_mpi({CUDA_AWARE_ENV: "1"}, never) is True
    assert detect_cuda_aware_mpi({CUDA_AWARE_ENV: "0"}, never) is False
    assert detect_cuda_aware_mpi({}, lambda: True) is True
    assert detect_cuda_aware_mpi({}, lambda: None) is False
    assert detect_cuda_aware_mpi({CUDA_AWARE_ENV: ""}, lambda: False) is False

    def broken() -> bool:
        raise OSError("no libmpi")

    assert detect_cuda_aware_mpi({}, broken) is False


def test_cuda_aware_mpi_is_decided_once(monkeypatch):
    cuda_aware_mpi.cache_clear()
    try:
        monkeypatch.setenv(CUDA_AWARE_ENV, "1")
        assert cuda_aware_mpi() is True
        monkeypatch.setenv(CUDA_AWARE_ENV, "0")
        assert cuda_aware_mpi() is True  # cached: decided once per process
        cuda_aware_mpi.cache_clear()
        assert cuda_aware_mpi() is False
    finally:
        cuda_aware_mpi.cache_clear()


def test_counters_nest_and_ignore_helpers():
    backend = SimulatedBackend(2)
    x = {0: np.zeros(3), 1: np.zeros(3)}
    with comm_counter() as outer:
        with comm_counter() as inner:
            backend.all_gather(x, ((0, 1),))
        backend.iall_reduce(x, ((0,), (1,)))  # one call, two groups: counts 1
        backend.barrier()
        backend.all_true({0: True, 1: True})
    assert isinstance(outer, CommCounter)
    assert inner.counts["all_gather"] == 1 and inner.total == 1
    assert outer.counts["all_reduce"] == 1 and outer.total == 2
    assert outer.bytes["all_reduce"] == 24
    assert "all_reduce" in repr(outer)


def test_handles_and_backends():
    result = {0: np.ones(1)}
    handle = Handle.completed(result)
    assert handle.wait() is result and handle.wait() is result
    calls = []
    lazy = Handle(lambda: calls.append(1) or result)
    assert lazy.wait() is result and lazy.wait() is result and calls == [1]
    backend = get_backend("simulated", 3)
    assert isinstance(backend, SimulatedBackend) and isinstance(backend, Backend)
    assert backend.name == "simulated" and backend.ranks == (0, 1, 2)
    with pytest.raises(CollectiveError, match="world_size"):
        get_backend("simulated")
    with pytest.raises(CollectiveError, match="unknown backend"):
        get_backend("nccl")
    with pytest.raises(CollectiveError):
        SimulatedBackend(0)
    assert array_module(np.zeros(1)) is np
    assert issubclass(CollectiveError, ValueError)
    assert set(collectives.__all__) >= {"MpiBackend", "get_backend", "comm_counter", "ReduceOp", "Groups"}
    assert hasattr(MpiBackend, "iall_to_all")


@pytest.mark.parametrize(
    ("shape", "axis", "sizes"),
    [((4, 6), 1, (2, 2, 2)), ((4, 6), 1, (3, 0, 2, 1)), ((3, 4), 0, (1, 2)), ((2, 0, 3), 2, (2, 1)),
     ((2, 3, 4), 1, (3,))],
)
def test_pack_then_concat_restores_the_array(shape, axis, sizes):
    x = np.arange(int(np.prod(shape))).reshape(shape)
    lead = (slice(None),) * axis
    starts = np.cumsum((0,) + sizes)
    pieces = [x[lead + (slice(a, b),)] for a, b in zip(starts[:-1], starts[1:])]
    pack = piece_packer(x.shape, sizes, axis, x.dtype, np)
    packed = x if pack is None else pack(x)
    # the send buffer holds the pieces one after the other, each in C order
    np.testing.assert_array_equal(packed.reshape(-1), np.concatenate([p.reshape(-1) for p in pieces]))
    recv_shape, finish = block_receiver([p.shape for p in pieces], axis, x.dtype, np)
    recv = packed.reshape(recv_shape)
    np.testing.assert_array_equal(recv if finish is None else finish(recv), x)


@pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed")
def test_bfloat16_is_reduced_like_numpy():
    backend = SimulatedBackend(3)
    x = {r: np.arange(4).astype(BFLOAT16) * (r + 1) for r in range(3)}
    out = backend.all_reduce(x, ((0, 1, 2),), op="avg")
    np.testing.assert_array_equal(out[1], (x[0] + x[1] + x[2]) / 3)


def _repo_root():
    from pathlib import Path

    return Path(collectives.__file__).resolve().parent.parent
