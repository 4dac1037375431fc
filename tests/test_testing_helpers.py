"""dtensor_np.testing: assert_dtensor_equal, check_op and raises_on_all_ranks pass, and fail on every rank together.

Every test takes the ``world`` fixture: simulated, and under ``mpiexec`` where
each rank must raise the same message (naming the failing rank, its block's
global offset, the first differing global index and both values).
"""
from __future__ import annotations

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.testing import assert_dtensor_equal, check_op, placement_combinations, raises_on_all_ranks


def _mesh(world, shape=None):
    return dt.init_device_mesh(shape or (world.size,), backend=world.kind)


@pytest.mark.worlds(simulated=(1, 4), mpi=(2,))
def test_assert_dtensor_equal_passes_on_uneven_empty_and_partial_blocks(world):
    mesh = _mesh(world)
    a = np.arange(15.0).reshape(5, 3)
    for placements in ([Shard(0)], [Shard(1)], [Replicate()]):  # 5 rows over 4 ranks: 2, 2, 1, 0
        assert_dtensor_equal(dt.distribute_tensor(a, mesh, placements), a, placements=placements)
    # a Partial sum: its blocks are not slices, so it is reduced before comparing
    shards = {r: a / world.size for r in world.ranks}
    local = shards[world.ranks[0]] if world.kind == "mpi" else shards
    partial = dt.DTensor.from_local(local, mesh, [Partial()], run_check=False)
    assert_dtensor_equal(partial, a, rtol=1e-12)
    # tolerances as np.allclose; NaNs compare equal
    b = a.copy()
    b[0, 0] = np.nan
    assert_dtensor_equal(dt.distribute_tensor(b * (1 + 1e-9), mesh, [Shard(0)]), b, rtol=1e-8)


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_assert_dtensor_equal_fails_on_every_rank_naming_rank_offset_index_and_values(world):
    mesh = _mesh(world)
    a = np.arange(15.0).reshape(5, 3)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    wrong = a.copy()
    wrong[4, 2] = -1.0  # in the last non-empty block: rank 2 of 4 (rows 4..4), rank 1 of 2 (rows 3..4)
    wrong[4, 1] = -2.0
    with pytest.raises(AssertionError) as failed:
        assert_dtensor_equal(x, wrong)
    rank, offset = (2, (4, 0)) if world.size == 4 else (1, (3, 0))
    shape = (1, 3) if world.size == 4 else (2, 3)
    assert str(failed.value) == (
        f"assert_dtensor_equal: 1 of {world.size} ranks differ from expected (rtol=1e-07, atol=0.0):\n"
        f"  rank {rank}: block of shape {shape} at global offset {offset}: 2 of {shape[0] * 3} elements differ, "
        "the first at global index (4, 1): got 13.0, expected -2.0"
    )
    with pytest.raises(AssertionError, match=r"expected placements \(Replicate\(\),\), got \(Shard\(dim=0\),\)"):
        assert_dtensor_equal(x, a, placements=[Replicate()])
    with pytest.raises(AssertionError, match=r"expected shape \(3, 5\), got \(5, 3\)"):
        assert_dtensor_equal(x, a.T)
    with pytest.raises(TypeError, match="expected a DTensor as x, got ndarray"):
        assert_dtensor_equal(a, a)


@pytest.mark.worlds(simulated=(4,), mpi=())  # its comparisons are assert_dtensor_equal's, tested under MPI above
def test_check_op_tries_every_placement_and_reports_every_failing_one(world):
    mesh = _mesh(world)
    a, b = np.arange(10.0).reshape(5, 2), np.arange(2.0) + 1
    # 3 placements of a (R, S(0), S(1)) x 2 of b (R, S(0)): uneven and empty shards of a's 5 rows
    assert check_op(np.multiply, a, b, mesh=mesh) == 6
    assert check_op(np.sum, a, 0, mesh=mesh) == 3  # a non-array argument passes as it is

    def wrong_when_sharded(x):  # a bug that shows only on sharded rows: the first local row doubled
        if isinstance(x, dt.DTensor) and x.placements[0].is_shard(0):
            return x * 2
        return x

    with pytest.raises(AssertionError) as failed:
        check_op(wrong_when_sharded, a, mesh=mesh)
    text = str(failed.value)
    assert text.startswith(f"check_op(wrong_when_sharded): 1 of 3 placement combinations failed on mesh ({world.size},):")
    assert "\n[S(0)]: AssertionError: assert_dtensor_equal:" in text and "[R]" not in text
    with pytest.raises(dt.ShardingError, match=r"expected one placements sequence per array argument \(2\)"):
        check_op(np.add, a, b, mesh=mesh, placements=[([Shard(0)],)])
    with pytest.raises(TypeError, match="expected a callable fn, got int"):
        check_op(3, a, mesh=mesh)
    with pytest.raises(dt.ShardingError, match="expected placements='all' or a list of combinations, got 'some'"):
        check_op(np.add, a, b, mesh=mesh, placements="some")


def test_placement_combinations_cover_replicate_and_every_shard_per_mesh_dim():
    combos = placement_combinations(dt.DeviceMesh((2, 2)), 2)
    assert len(combos) == 9 and (Replicate(), Replicate()) in combos and (Shard(1), Shard(0)) in combos
    assert check_op(np.transpose, np.arange(15.0).reshape(5, 3)) == 9  # default mesh: simulated 2 x 2


@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_raises_on_all_ranks_passes_only_when_every_rank_raised(world):
    mesh = _mesh(world)
    with raises_on_all_ranks(dt.ShardingError, match=r"S\(2\) is out of range") as caught:
        dt.distribute_tensor(np.ones((2, 2)), mesh, [Shard(2)])
    assert isinstance(caught.value, dt.ShardingError)
    rank = world.ranks[0] if world.kind == "mpi" else 0
    # under MPI only rank 1 raises, simulated none does: rank 0 is named on every rank
    with pytest.raises(AssertionError) as failed:
        with raises_on_all_ranks(ValueError):
            if world.kind == "mpi" and rank == 1:
                raise ValueError("rank 1's bad value")
    assert str(failed.value) == "raises_on_all_ranks: expected ValueError on every rank; rank 0 did not raise"
    with pytest.raises(AssertionError, match="rank 0 raised it with a message not matching 'other'"):
        with raises_on_all_ranks(ValueError, match="other"):
            raise ValueError("this")
    with pytest.raises(AssertionError, match=r"rank 0 raised another exception.*\(KeyError: 'k'\)"):
        with raises_on_all_ranks(ValueError):
            raise KeyError("k")
    with pytest.raises(TypeError, match="expected an exception class, got 'ValueError'"):
        raises_on_all_ranks("ValueError")
