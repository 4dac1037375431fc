"""DTensor and redistribute on every backend: exact values for every placement pair.

Each test taking ``world`` runs simulated (1, 2, 3, 4, 8 ranks) and under
``mpiexec`` (2 and 4 ranks); under MPI every rank draws the same examples.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.testing import assert_dtensor_equal, raises_on_all_ranks

from strategies import DTYPES, full_array, mesh_shapes, placements, rounding_tolerance, tensor_shapes
from test_numpy_ops import Checks

R = Replicate()


def make_mesh(world, shape):
    return dt.DeviceMesh(tuple(shape), backend=world.kind)


def rounds(placements_list, dtype, mesh_size) -> int:
    """The rounding steps Partial sum/avg reductions of an inexact dtype may add (0: the value is exact)."""
    if np.dtype(dtype).kind not in "fc":
        return 0
    partials = sum(isinstance(p, Partial) and p.reduce_op in ("sum", "avg") for ps in placements_list for p in ps)
    return partials * mesh_size  # each reduction: at most mesh_size - 1 additions and one division


def assert_value(got, want, terms):
    """Equal (dtype included) when ``terms`` is 0, else within ``terms * eps * max|want|``."""
    if terms:
        scale = float(np.max(np.abs(want), initial=0.0))
        np.testing.assert_allclose(got, want, rtol=0, atol=rounding_tolerance(want.dtype, terms, scale))
    else:
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


def check_local_blocks(checks, x, full, terms, ctx):
    """Every held rank's shard is the block of ``full`` its coordinate names (no Partial placements);
    each rank's mismatch is recorded in ``checks``, not raised, so every rank fails together."""
    for rank, local in x.local_shards().items():
        shape, offset = x.spec.local_shape_and_offset(x.mesh.coordinate_of(rank))
        block = full[tuple(slice(o, o + n) for o, n in zip(offset, shape))]
        check_value(checks, local, block, terms, f"{ctx}: rank {rank} block at {offset}")


def check_value(checks, got, want, terms, ctx):
    try:
        assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
        assert_value(got, want, terms)
    except AssertionError as exc:
        checks.expect(False, f"{ctx}: {exc}")


def valid(src, dst, mesh_shape, dtype):
    """Drop pairs the planner refuses by design (Partials of other reduce ops), and avg of integers."""
    for m, (a, b) in enumerate(zip(src, dst)):
        if mesh_shape[m] > 1 and isinstance(b, Partial) and isinstance(a, Partial) and a != b:
            return False
    if np.dtype(dtype).kind not in "fc" and any(isinstance(p, Partial) and p.reduce_op == "avg" for p in src + dst):
        return False
    return True


def _contains(outer, inner):
    """True when block ``inner`` (shape, offset) lies inside block ``outer`` (an empty block lies anywhere)."""
    (oshape, ooff), (ishape, ioff) = outer, inner
    if 0 in ishape:
        return True
    return all(o <= i and i + n <= o + m for m, o, n, i in zip(oshape, ooff, ishape, ioff))


def collective_bounds(src, dst):
    """The collectives a placement change must issue, from first principles, as ``(least, most)``.

    None when no rank needs another rank's data: every rank's new block lies
    inside its old one and no Partial has to be reduced.  At least one
    otherwise, and at most one per mesh dim (of size > 1) that is not Replicate
    in ``src``: reduce or gather those dims one by one, then slice locally.
    An empty array needs no data, but the library may still issue the plan's
    collectives for it (of empty blocks): there only the most is asserted.  So
    where some rank's block is empty (a sharded dim shorter than its mesh
    dims): the planner plans from placements, and a change that empty shards
    make local, ``(R, S(0)) -> (R, S(1))`` of a 1 x 1 array on a 2 x 2 mesh,
    still moves its (empty or whole) blocks with one collective.
    """
    mesh = src.mesh
    moving = [m for m in range(mesh.ndim) if mesh.shape[m] > 1]
    most = sum(1 for m in moving if not isinstance(src.placements[m], Replicate))
    blocks = [spec.local_block(r)[0] for spec in (src, dst) for r in mesh.all_ranks]
    if 0 in src.shape or any(0 in block for block in blocks):
        return 0, most
    reduce = any(src.placements[m].is_partial() and dst.placements[m] != src.placements[m] for m in moving)
    local = not reduce and all(_contains(src.local_block(r), dst.local_block(r)) for r in mesh.all_ranks)
    return (0, 0) if local else (1, most)


@st.composite
def cases(draw, world_size):
    mesh_shape = draw(mesh_shapes(world_size))
    shape = draw(tensor_shapes(0, 3, max_side=7))
    dtype = draw(st.sampled_from(DTYPES))
    chain = draw(st.lists(placements(len(mesh_shape), len(shape)), min_size=2, max_size=4))
    seed = draw(st.integers(0, 2**16))
    return mesh_shape, shape, dtype, chain, seed


@pytest.mark.worlds(simulated=(1, 2, 3, 4, 8), mpi=(2, 4))
def test_redistribute_chains_keep_every_value(world):
    @settings(max_examples=60 if world.kind == "mpi" else 120)
    @given(cases(world.size))
    def check(case):
        mesh_shape, shape, dtype, chain, seed = case
        full = full_array(shape, dtype, seed)
        mesh = make_mesh(world, mesh_shape)
        checks = Checks(world)  # every rank records its mismatches, then all fail together
        x = dt.distribute_tensor(full, mesh, list(chain[0]))
        seen = [chain[0]]
        if not any(isinstance(p, Partial) for p in chain[0]):
            check_local_blocks(checks, x, full, 0, f"distribute {chain[0]}")
        for target in chain[1:]:
            if not valid(x.placements, target, mesh_shape, dtype):
                continue
            ctx = f"{x.placements} -> {tuple(target)}"
            with dt.comm_counter() as counter:
                y = x.redistribute(list(target))
            least, most = collective_bounds(x.spec, y.spec)
            issued = sum(counter.counts.values())
            checks.expect(least <= issued <= most, f"{ctx}: {issued} collectives, expected {least}..{most}")
            seen.append(target)
            checks.expect(y.placements == tuple(target), f"{ctx}: placements {y.placements}")
            if not any(isinstance(p, Partial) for p in target):
                check_local_blocks(checks, y, full, rounds(seen, dtype, mesh.size()), ctx)
            check_value(checks, y.full_tensor(), full, rounds(seen, dtype, mesh.size()), f"{ctx}: full_tensor")
            x = y
        checks.finish()

    check()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2, 4))
def test_every_placement_pair_on_a_uneven_tensor(world):
    """All pairs over S(0), S(1), R, P(sum), P(max) on 1-D and 2-D meshes, a (7, 5) float64 tensor."""
    full = full_array((7, 5), "float64", 3)
    options = [Shard(0), Shard(1), R, Partial("sum"), Partial("max")]
    shapes = [(world.size,)] + ([(2, world.size // 2)] if world.size % 2 == 0 and world.size > 2 else [])
    for mesh_shape in shapes:
        mesh = make_mesh(world, mesh_shape)
        for src in _products(options, len(mesh_shape)):
            x = dt.distribute_tensor(full, mesh, list(src))
            for dst in _products(options, len(mesh_shape)):
                if not valid(src, dst, mesh_shape, "float64"):
                    with pytest.raises(dt.ShardingError):
                        x.redistribute(list(dst))
                    continue
                y = x.redistribute(list(dst))
                assert_value(y.full_tensor(), full, rounds([src, dst], "float64", mesh.size()))


def _products(options, n):
    if n == 1:
        return [(o,) for o in options]
    return [(a,) + rest for a in options for rest in _products(options, n - 1)]


@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_collective_counts_at_run_time(world):
    mesh = make_mesh(world, (2, 2))
    full = full_array((8, 8), "float32", 0)
    x = dt.distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    for target, expected in (([Shard(0), Shard(0)], 1), ([Shard(1), Shard(0)], 2), ([R, R], 2)):
        with dt.comm_counter() as c:
            y = x.redistribute(target)
        assert sum(c.counts.values()) == expected, (target, c.counts)
        assert_dtensor_equal(y, full, rtol=0, placements=target)  # each rank its block, no gather
    with dt.comm_counter() as c:
        x.redistribute([Shard(0), Shard(1)])
    assert sum(c.counts.values()) == 0


@pytest.mark.worlds(simulated=(2, 3), mpi=(2,))
def test_from_local_round_trip_and_shape_inference(world):
    mesh = make_mesh(world, (world.size,))
    full = full_array((2 * world.size + 1, 3), "float64", 1)  # uneven: torch.chunk sizes
    x = dt.distribute_tensor(full, mesh, [Shard(0)])
    y = dt.DTensor.from_local(x.to_local(), mesh, [Shard(0)])
    assert_dtensor_equal(y, full, rtol=0, placements=[Shard(0)])  # the shape too
    z = dt.DTensor.from_local(x.to_local(), mesh, [Shard(0)], shape=full.shape)
    assert_dtensor_equal(z, full, rtol=0)


@pytest.mark.worlds(simulated=(2,), mpi=(2, 4))
def test_from_local_bad_shard_raises_on_every_rank(world):
    mesh = make_mesh(world, (world.size,))
    ranks = collectives.get_backend(world.kind, world.size).ranks if world.kind == "simulated" else world.ranks

    def local_for(rank, dtype="float64", rows=2):
        return np.zeros((rows, 3), dtype=dtype)

    def build(fn):
        if world.kind == "mpi":
            return fn(ranks[0])
        return {r: fn(r) for r in ranks}

    with raises_on_all_ranks(dt.ShardingError, match="disagree"):  # every rank, not only rank 1
        dt.DTensor.from_local(build(lambda r: local_for(r, "float32" if r == 1 else "float64")), mesh, [Shard(0)])
    with raises_on_all_ranks(dt.ShardingError, match="do not tile|expected"):
        dt.DTensor.from_local(build(lambda r: local_for(r, rows=3 if r == 1 else 2)), mesh, [Shard(0)], shape=(2 * world.size, 3))
    with pytest.raises((dt.ShardingError, TypeError)):
        dt.DTensor.from_local(build(lambda r: np.array(["a"]) if r == 1 else np.zeros(1)), mesh, [Shard(0)])
    # after all that, the ranks are still in step
    x = dt.distribute_tensor(np.arange(4.0), mesh, [Shard(0)])
    np.testing.assert_array_equal(x.full_tensor(), np.arange(4.0))


def test_simulated_to_local_is_a_per_rank_object():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(5.0), mesh, [Shard(0)])
    local = x.to_local()
    assert isinstance(local, dt.LocalTensor)
    doubled = np.exp(local) * 2
    y = dt.DTensor.from_local(doubled, mesh, [Shard(0)])
    np.testing.assert_allclose(y.full_tensor(), np.exp(np.arange(5.0)) * 2)
    with pytest.raises(TypeError, match="one array per simulated rank"):
        np.asarray(local)


@pytest.mark.world_sizes(1, 2)  # the pytest plugin's `mesh` (simulated; also under mpiexec with --dt-mpi)
def test_dtensor_is_immutable_and_redistribute_returns_new_values(mesh):
    x = dt.distribute_tensor(np.arange(4.0), mesh, [Shard(0)])
    y = x.redistribute([R])
    assert x.placements == (Shard(0),) and y.placements == (R,)
    with pytest.raises(AttributeError):
        x._spec = y.spec
    with pytest.raises(TypeError):
        hash(x)


def test_init_device_mesh_picks_simulated_outside_mpiexec():
    mesh = dt.init_device_mesh((2, 2), dim_names=("dp", "tp"))
    assert mesh.backend == "simulated" and mesh.dim_names == ("dp", "tp")
    with pytest.raises(dt.ShardingError, match="backend"):
        dt.init_device_mesh((2,), backend="nccl")


@pytest.mark.worlds(simulated=(), mpi=(2,))
def test_init_device_mesh_under_mpiexec(world):
    mesh = dt.init_device_mesh((2,))
    assert mesh.backend == "mpi"
    with pytest.raises(dt.ShardingError, match="launched by mpiexec with 2 ranks"):
        dt.init_device_mesh((4,))
    x = dt.distribute_tensor(np.arange(6.0).reshape(3, 2), mesh, [Shard(0)])
    assert list(x.local_shards()) == [world.ranks[0]]
    np.testing.assert_array_equal(x.full_tensor(), np.arange(6.0).reshape(3, 2))


TRANSITIONS = [
    ([Shard(0)], [R]),
    ([Shard(0)], [Shard(1)]),
    ([Partial()], [R]),
    ([Partial()], [Shard(0)]),
    ([R], [Shard(0)]),
]


@pytest.mark.worlds(simulated=(4,), mpi=(2,))
def test_peak_extra_memory_is_at_most_twice_the_larger_shard(world):
    """Peak memory of one redistribute beyond its output, per rank, <= 2x the larger of input and output shard."""
    mesh = make_mesh(world, (world.size,))
    full = full_array((512, 512), "float32", 0)
    ratios = {}
    for src, dst in TRANSITIONS:
        x = dt.distribute_tensor(full, mesh, src)
        x.redistribute(dst)  # plan and compile outside the measurement
        in_bytes = max(a.nbytes for a in x.local_shards().values())
        tracemalloc.start()
        try:
            y = x.redistribute(dst)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        out_bytes = max(a.nbytes for a in y.local_shards().values())
        held = len(x.local_shards())
        extra_per_rank = (peak - sum(a.nbytes for a in y.local_shards().values())) / held
        ratios[f"{src[0]}->{dst[0]}"] = extra_per_rank / max(in_bytes, out_bytes)
    print("peak extra memory / larger shard:", {k: round(v, 2) for k, v in ratios.items()})
    assert max(ratios.values()) <= 2.05, ratios


def test_placements_must_be_a_list_or_tuple_before_and_after_a_cached_redistribute():
    """The cached fast path must not let other containers through (a NumPy array compares elementwise)."""
    x = dt.distribute_tensor(np.arange(8.0), dt.DeviceMesh((2,)), [Shard(0)])
    message = r"placements must be a list or tuple of placements, got array\(\[Replicate\(\)\], dtype=object\)"
    with pytest.raises(TypeError, match=message):
        x.redistribute(np.array([Replicate()], dtype=object))
    assert x.redistribute([Replicate()]).full_tensor().tolist() == list(range(8))  # now cached
    assert x.redistribute((Replicate(),)).full_tensor().tolist() == list(range(8))
    with pytest.raises(TypeError, match=message):
        x.redistribute(np.array([Replicate()], dtype=object))
