"""``dt.random``: every mesh and placement draws the one-device array bit for bit; the draws are good random numbers.

* Every mesh of 1 to 8 simulated ranks (1-D and every 2-D factorisation)
  and under ``mpiexec -n 2`` and ``-n 4``, every placement (``Shard`` on
  each dim, ``Replicate``, 2-D combinations), shapes with zero and uneven
  sizes: each rank's shard equals its block of the one-device draw, for
  every distribution; hypothesis adds random shapes, meshes and placements.
* Moments and a Kolmogorov-Smirnov distance of large draws (fixed keys,
  bounds of about 5 standard errors), randint's lack of modulo bias where a
  modulo would show it, permutations uniform over first positions.
* Split and fold_in keys give uncorrelated streams.
* Bad input raises the same error on every rank (no draw communicates
  before its checks).
* CuPy keys draw the NumPy bits (marked ``gpu``: skipped without CuPy and a device).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.runtime import backend_for

R = Replicate()
KEY = dt.random.key(20261128)

Draw = Callable[..., Any]  # (key, shape, mesh=..., placements=...) -> array or DTensor
DRAWS: dict[str, Draw] = {
    "normal64": lambda k, s, **kw: dt.random.normal(k, s, **kw),
    "normal32": lambda k, s, **kw: dt.random.normal(k, s, np.float32, **kw),
    "uniform64": lambda k, s, **kw: dt.random.uniform(k, s, minval=-2.0, maxval=3.0, **kw),
    "uniform32": lambda k, s, **kw: dt.random.uniform(k, s, np.float32, **kw),
    "uniform16": lambda k, s, **kw: dt.random.uniform(k, s, np.float16, **kw),
    "bernoulli": lambda k, s, **kw: dt.random.bernoulli(k, s, p=0.3, **kw),
    "bernoulli_f": lambda k, s, **kw: dt.random.bernoulli(k, s, np.float64, p=0.7, **kw),
    "randint64": lambda k, s, **kw: dt.random.randint(k, s, -(2**40), 17, **kw),
    "randint8": lambda k, s, **kw: dt.random.randint(k, s, 0, 256, np.uint8, **kw),
}
SHAPES = [(), (0,), (1,), (7,), (5, 3), (3, 0), (2, 9, 5)]


def meshes(size: int, backend: str) -> list[dt.DeviceMesh]:
    """The 1-D mesh of ``size`` ranks and every 2-D factorisation ``(a, size // a)``."""
    out = [dt.DeviceMesh((size,), backend=backend)]
    out += [dt.DeviceMesh((a, size // a), backend=backend) for a in range(1, size + 1) if size % a == 0]
    return out


def placements_of(mesh: dt.DeviceMesh, ndim: int) -> list[tuple]:
    """Every combination of ``Replicate`` and ``Shard`` on each tensor dim, one per mesh dim."""
    choices = [R] + [Shard(d) for d in range(ndim)]
    return list(itertools.product(choices, repeat=mesh.ndim))


def assert_blocks_equal(x: dt.DTensor, whole: np.ndarray, what: str, placements: Any = None) -> None:
    """``x`` has ``placements`` (when given) and every shard this process holds equals its block of ``whole``,
    bit for bit (dtype included)."""
    assert isinstance(x, dt.DTensor) and x.shape == whole.shape and x.dtype == whole.dtype, what
    assert placements is None or x.placements == tuple(placements), (what, x.placements)
    held = x.local_shards()
    assert sorted(held) == sorted(backend_for(x.mesh).ranks), what
    for rank, shard in held.items():
        block = whole[x.spec.local_index(rank)]
        assert shard.shape == block.shape and shard.dtype == block.dtype, (what, rank)
        assert shard.tobytes() == block.tobytes(), (what, rank)


@pytest.mark.worlds(simulated=(1, 2, 3, 4, 5, 6, 7, 8), mpi=(2, 4))
def test_every_mesh_and_placement_equals_the_one_device_draw(world):
    with dt.comm_counter() as counter:
        check_every_mesh_and_placement(world.size, world.kind)
    assert sum(counter.counts.values()) == 0, counter.counts  # no draw communicates, permutation included
    check_device_and_random_examples(world.size, world.kind)


def check_every_mesh_and_placement(size: int, kind: str) -> None:
    """Each distribution and permutation on every mesh of ``size`` ranks and every placement, fixed shapes."""
    for mesh in meshes(size, kind):
        for shape in SHAPES:
            wholes = {name: draw(KEY, shape) for name, draw in DRAWS.items()}
            for placements in placements_of(mesh, len(shape)):
                for name, draw in DRAWS.items():
                    what = f"{name} {shape} on {mesh.shape} {placements}"
                    x = draw(KEY, shape, mesh=mesh, placements=placements)
                    assert_blocks_equal(x, wholes[name], what, placements)
        for n in (0, 1, 5, 13):
            whole = dt.random.permutation(KEY, n)
            assert sorted(whole.tolist()) == list(range(n))
            for placements in placements_of(mesh, 1):
                x = dt.random.permutation(KEY, n, mesh=mesh, placements=placements)
                assert_blocks_equal(x, whole, f"permutation({n}) on {mesh.shape} {placements}", placements)


def check_device_and_random_examples(size: int, kind: str) -> None:
    """Default placements, ``device=``, and hypothesis's shapes, meshes, placements and keys."""
    # no mesh dims given: replicated on every rank; device= a Sharding or a mesh, as the Array API namespace takes it
    mesh = dt.DeviceMesh((size,), backend=kind)
    whole = dt.random.normal(KEY, (3, 2))
    assert_blocks_equal(dt.random.normal(KEY, (3, 2), mesh=mesh), whole, "default placements")
    x = dt.random.normal(KEY, (3, 2), device=dt.Sharding(mesh, [Shard(1)]))
    assert x.placements == (Shard(1),) and dt.random.normal(KEY, (3, 2), device=mesh).placements == (R,)
    assert_blocks_equal(x, whole, "device=Sharding")
    # random shapes, meshes, placements and keys (under MPI every rank draws the same examples: derandomized)
    all_meshes = meshes(size, kind)

    @settings(max_examples=12)
    @given(shape=st.lists(st.integers(0, 11), max_size=3).map(tuple), data=st.data(),
           name=st.sampled_from(sorted(DRAWS) + ["permutation"]), seed=st.integers(0, 2**64 - 1))
    def check(shape: tuple[int, ...], data: Any, name: str, seed: int) -> None:
        mesh = data.draw(st.sampled_from(all_meshes), label="mesh")
        k = dt.random.key(seed)
        if name == "permutation":
            shape = shape[:1] or (0,)
            placements = data.draw(st.sampled_from(placements_of(mesh, 1)), label="placements")
            x, whole = dt.random.permutation(k, shape[0], mesh=mesh, placements=placements), dt.random.permutation(k, shape[0])
        else:
            placements = data.draw(st.sampled_from(placements_of(mesh, len(shape))), label="placements")
            x, whole = DRAWS[name](k, shape, mesh=mesh, placements=placements), DRAWS[name](k, shape)
        assert_blocks_equal(x, whole, f"{name} {shape} on {mesh.shape} {placements}", placements)

    check()


@settings(max_examples=40)
@given(
    shape=st.lists(st.integers(0, 9), max_size=3).map(tuple),
    size=st.integers(1, 8),
    data=st.data(),
    name=st.sampled_from(sorted(DRAWS)),
    seed=st.integers(-(2**63), 2**64 - 1),
)
def test_random_shapes_meshes_and_placements_equal_the_one_device_draw(shape, size, data, name, seed):
    mesh = data.draw(st.sampled_from(meshes(size, "simulated")), label="mesh")
    placements = data.draw(st.sampled_from(placements_of(mesh, len(shape))), label="placements")
    k = dt.random.key(seed)
    x = DRAWS[name](k, shape, mesh=mesh, placements=list(placements))
    assert_blocks_equal(x, DRAWS[name](k, shape), f"{name} {shape} on {mesh.shape} {placements}", placements)
    np.testing.assert_array_equal(x.full_tensor(), DRAWS[name](k, shape))


def test_draws_are_pure_functions_of_key_and_position():
    """The same key draws the same numbers; a longer draw extends a shorter one (C order); other keys differ."""
    a = dt.random.uniform(KEY, (4, 6))
    np.testing.assert_array_equal(a, dt.random.uniform(KEY, (4, 6)))
    np.testing.assert_array_equal(a.ravel(), dt.random.uniform(KEY, (24,)))
    np.testing.assert_array_equal(a.ravel(), dt.random.uniform(KEY, (30,))[:24])
    assert not np.isin(a, dt.random.uniform(dt.random.key(1), (4, 6))).any()
    assert type(dt.random.normal(KEY)) is np.ndarray and dt.random.normal(KEY).shape == ()  # 0-d: an array
    assert dt.random.normal(KEY, 3).shape == (3,)


def test_threefry_known_answers():
    """Random123's known-answer tests for Threefry-2x32-20 (the ones JAX checks)."""
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for k, (c0, c1), expected in cases:
        y = dt.random.threefry2x32(np.array(k, np.uint32), np.array([c0], np.uint32), np.array([c1], np.uint32))
        assert (int(y[0][0]), int(y[1][0])) == expected


def test_keys_are_values():
    assert dt.random.key(5).tolist() == [0, 5] and dt.random.key(2**40 + 3).tolist() == [256, 3]
    assert dt.random.key(-1).tolist() == [2**32 - 1] * 2 and dt.random.key(5).dtype == np.uint32
    ks = dt.random.split(KEY, 5)
    assert ks.shape == (5, 2) and ks.dtype == np.uint32 and len({tuple(k) for k in ks.tolist()}) == 5
    np.testing.assert_array_equal(ks[:2], dt.random.split(KEY))  # key i of a split does not depend on n
    assert dt.random.split(KEY, 0).shape == (0, 2)
    folded = {tuple(dt.random.fold_in(KEY, i).tolist()) for i in range(100)}
    assert len(folded) == 100 and tuple(KEY.tolist()) not in folded
    k1, k2 = dt.random.split(KEY)
    np.testing.assert_array_equal(dt.random.normal(k1, 4), dt.random.normal(np.array(k1.tolist(), np.uint32), 4))


# -- statistics -------------------------------------------------------------------------
N = 200_000


def ks_distance(x: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """The Kolmogorov-Smirnov distance between the sample ``x`` and ``cdf``."""
    x = np.sort(np.asarray(x, np.float64))
    f = cdf(x)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


KS_BOUND = 2.0 / math.sqrt(N)  # the 0.1% critical value is 1.95 / sqrt(n)
normal_cdf = np.frompyfunc(lambda v: 0.5 * (1 + math.erf(v / math.sqrt(2))), 1, 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_normal_moments_and_distribution(dtype):
    x = dt.random.normal(dt.random.key(1), (N,), dtype).astype(np.float64)
    se = 1 / math.sqrt(N)
    assert abs(x.mean()) < 5 * se and abs(x.var() - 1) < 5 * math.sqrt(2) * se
    assert abs(np.mean(x**3)) < 5 * math.sqrt(15) * se and abs(np.mean(x**4) - 3) < 5 * math.sqrt(96) * se
    assert ks_distance(x, lambda v: normal_cdf(v).astype(np.float64)) < KS_BOUND
    assert np.isfinite(x).all()


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_uniform_moments_distribution_and_range(dtype):
    u = dt.random.uniform(dt.random.key(2), (N,), dtype)
    assert u.dtype == dtype and (u >= 0).all() and (u < 1).all()
    bits = np.finfo(dtype).nmant + 1
    assert np.all(u * 2.0**bits == np.floor(u * 2.0**bits))  # exact multiples of 2**-bits
    u = u.astype(np.float64)
    se = 1 / math.sqrt(N)
    assert abs(u.mean() - 0.5) < 5 * se / math.sqrt(12) and abs(u.var() - 1 / 12) < 5 * se * math.sqrt(1 / 180)
    assert ks_distance(u, lambda v: v) < KS_BOUND + 2.0**-bits
    v = dt.random.uniform(dt.random.key(3), (N,), dtype, minval=-3.0, maxval=-2.5)
    assert (v >= -3).all() and (v < -2.5).all() and abs(float(v.astype(np.float64).mean()) + 2.75) < 0.01


@pytest.mark.parametrize("p", [0.0, 1e-3, 0.1, 0.5, 0.9, 1.0])
def test_bernoulli_frequency(p):
    m = dt.random.bernoulli(dt.random.key(4), (N,), p=p)
    assert m.dtype == np.bool_
    assert abs(m.mean() - p) <= 5 * math.sqrt(p * (1 - p) / N)
    assert dt.random.bernoulli(dt.random.key(4), (3,), np.float32, p=p).dtype == np.float32


def test_randint_is_uniform_and_free_of_modulo_bias():
    r = dt.random.randint(dt.random.key(5), (N,), -3, 4)
    counts = np.bincount(r + 3, minlength=7)
    assert r.min() == -3 and r.max() == 3
    chi2 = float(np.sum((counts - N / 7) ** 2 / (N / 7)))
    assert chi2 < 30  # 6 degrees of freedom: the 0.01% critical value is 27.9
    # high - low = 3 * 2**62: a 64-bit modulo would put half the draws below 2**62, multiply-shift a third
    big = dt.random.randint(dt.random.key(6), (N,), 0, 3 * 2**62, np.uint64)
    below = float(np.mean(big < np.uint64(2**62)))
    assert abs(below - 1 / 3) < 5 * math.sqrt(2 / 9 / N)
    full = dt.random.randint(dt.random.key(7), (N,), -(2**63), 2**63)  # the whole int64 range
    assert abs(float(np.mean(full < 0)) - 0.5) < 5 * math.sqrt(0.25 / N)
    assert dt.random.randint(dt.random.key(8), (5,), 7, 8).tolist() == [7] * 5


def test_permutations_are_uniform():
    n, trials = 4, 5_000
    firsts = np.array([dt.random.permutation(dt.random.fold_in(KEY, t), n)[0] for t in range(trials)])
    counts = np.bincount(firsts, minlength=n)
    assert float(np.sum((counts - trials / n) ** 2 / (trials / n))) < 25  # 3 degrees of freedom: 0.01% at 21.1
    p = dt.random.permutation(KEY, 1000, np.int32)
    assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(1000))
    assert abs(np.corrcoef(p, np.arange(1000))[0, 1]) < 5 / math.sqrt(1000)


def test_split_and_fold_in_streams_are_uncorrelated():
    """Draws of sibling keys, a parent and its children, and successive fold_ins: correlations within 5/sqrt(n)."""
    n = 100_000
    bound = 5 / math.sqrt(n)
    k1, k2 = dt.random.split(KEY)
    streams = [dt.random.normal(k, (n,)) for k in (KEY, k1, k2, *dt.random.split(k1, 2))]
    streams += [dt.random.normal(dt.random.fold_in(KEY, i), (n,)) for i in range(3)]
    streams.append(dt.random.normal(dt.random.key(20261129), (n,)))  # the next seed
    c = np.corrcoef(np.stack(streams))
    assert np.max(np.abs(c - np.eye(len(streams)))) < bound
    # lagged: a stream against itself shifted by one element (neighbouring counters)
    assert abs(np.corrcoef(streams[0][1:], streams[0][:-1])[0, 1]) < bound
    # the two words of one counter (Box-Muller's pair) give independent uniforms
    u = dt.random.uniform(KEY, (n,))
    assert abs(np.corrcoef(u[::2], u[1::2])[0, 1]) < bound * math.sqrt(2)


# -- bad input --------------------------------------------------------------------------
BAD: list[tuple[Callable[[dt.DeviceMesh], Any], type, str]] = [
    (lambda m: dt.random.normal([0, 1], (2,)), TypeError, r"expected a key \(a uint32 array of shape \(2,\) from dt.random.key\), got list"),
    (lambda m: dt.random.normal(np.zeros(2, np.int64), (2,)), TypeError, "got a int64 array of shape"),
    (lambda m: dt.random.uniform(dt.random.split(KEY, 3), (2,)), TypeError, r"got a uint32 array of shape \(3, 2\)"),
    (lambda m: dt.random.split(np.zeros(3, np.uint32)), TypeError, "expected a key"),
    (lambda m: dt.random.normal(KEY, (2, -1)), ValueError, r"expected a shape of non-negative sizes, got \(2, -1\)"),
    (lambda m: dt.random.normal(KEY, (2.5,)), TypeError, "shape"),
    (lambda m: dt.random.normal(KEY, (2**31, 2**31)), ValueError, r"expected a shape of fewer than 2\*\*62 elements"),
    (lambda m: dt.random.normal(KEY, (2,), np.int32), TypeError, r"expected a real floating dtype \(float16, float32, float64\), got"),
    (lambda m: dt.random.uniform(KEY, (2,), "complex128"), TypeError, "expected a real floating dtype"),
    (lambda m: dt.random.randint(KEY, (2,), 0, 5, np.float64), TypeError, "expected an integer dtype"),
    (lambda m: dt.random.bernoulli(KEY, (2,), p=1.5), ValueError, r"expected a probability 0 <= p <= 1, got p=1.5"),
    (lambda m: dt.random.bernoulli(KEY, (2,), p=-0.1), ValueError, "expected a probability 0 <= p <= 1"),
    (lambda m: dt.random.bernoulli(KEY, (2,), p=float("nan")), ValueError, "expected a probability"),
    (lambda m: dt.random.randint(KEY, (2,), 5, 5), ValueError, r"low < high .* got low=5, high=5"),
    (lambda m: dt.random.randint(KEY, (2,), 0, 300, np.uint8), ValueError, r"expected 0 <= low < high <= 256 for uint8"),
    (lambda m: dt.random.randint(KEY, (2,), 0.5, 3), TypeError, "expected int bounds"),
    (lambda m: dt.random.uniform(KEY, (2,), minval=1.0, maxval=1.0), ValueError, "expected finite minval < maxval"),
    (lambda m: dt.random.permutation(KEY, -1), ValueError, "non-negative"),
    (lambda m: dt.random.permutation(KEY, 300, np.int8), ValueError, r"expected n <= 128 for int8, got 300"),
    (lambda m: dt.random.key(1.5), TypeError, "expected an int seed, got float"),
    (lambda m: dt.random.key(2**64), ValueError, "expected a seed of 64 bits"),
    (lambda m: dt.random.split(KEY, -1), ValueError, "expected a number of keys n >= 0, got -1"),
    (lambda m: dt.random.fold_in(KEY, 2**32), ValueError, r"expected data of 32 bits \(0 <= data < 2\*\*32\)"),
    (lambda m: dt.random.normal(KEY, (4,), mesh=m, placements=[Partial()]), dt.ShardingError,
     r"expected Shard or Replicate placements for a random draw, got P\(sum\)"),
    (lambda m: dt.random.normal(KEY, (4,), mesh=m, placements=[Shard(1)]), dt.ShardingError, "S\\(1\\) is out of range"),
    (lambda m: dt.random.normal(KEY, (4,), mesh=m, placements=[R, R]), dt.ShardingError, "expected 1 placements"),
    (lambda m: dt.random.normal(KEY, (4,), placements=[R]), TypeError, "placements need a mesh"),
    (lambda m: dt.random.normal(KEY, (4,), mesh=(2,)), TypeError, "expected a DeviceMesh or None for mesh, got tuple"),
    (lambda m: dt.random.normal(KEY, (4,), mesh=m, device=m), TypeError, "expected device= or mesh=/placements=, got both"),
    (lambda m: dt.random.normal(KEY, (4,), device="cpu"), TypeError, "expected a Sharding or a DeviceMesh for device, got str"),
]


@pytest.mark.worlds(simulated=(1, 3, 4), mpi=(4,))
def test_bad_input_raises_on_every_rank(world):
    """Each rank raises alone (a draw checks everything before any work); afterwards the ranks are in step."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    for call, error, fragment in BAD:
        with pytest.raises(error, match=fragment):
            call(mesh)
    x = dt.random.normal(KEY, (5,), mesh=mesh, placements=[Shard(0)])
    np.testing.assert_array_equal(x.full_tensor(), dt.random.normal(KEY, (5,)))


# -- CuPy ---------------------------------------------------------------------------------
@pytest.mark.gpu
def test_cupy_keys_draw_the_numpy_bits(cupy):
    """A CuPy key draws CuPy shards: bit for bit NumPy's for the integer-exact draws, normal within a few ulp."""
    key = cupy.asarray(KEY)
    mesh = dt.DeviceMesh((2, 2))
    for shape in [(0,), (7,), (5, 3)]:
        for placements in placements_of(mesh, len(shape)):
            for name, draw in DRAWS.items():
                x = draw(key, shape, mesh=mesh, placements=placements)
                assert all(isinstance(s, cupy.ndarray) for s in x.local_shards().values())
                got, want = cupy.asnumpy(x.full_tensor()), draw(KEY, shape)
                if name.startswith("normal"):
                    np.testing.assert_array_max_ulp(got, want, maxulp=4)
                else:
                    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (name, shape, placements)
        perm = dt.random.permutation(key, 11, mesh=dt.DeviceMesh((4,)), placements=[Shard(0)])
        np.testing.assert_array_equal(cupy.asnumpy(perm.full_tensor()), dt.random.permutation(KEY, 11))
    np.testing.assert_array_equal(cupy.asnumpy(dt.random.split(key, 3)), dt.random.split(KEY, 3))
    np.testing.assert_array_equal(cupy.asnumpy(dt.random.fold_in(key, 9)), dt.random.fold_in(KEY, 9))


# -- dropout in the training example -------------------------------------------------------
@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_training_with_dropout_matches_one_device(world):
    """Dropout masks drawn on the mesh (each rank its block) train as the one-device masks do: 1e-9 over 8 steps."""
    from dtensor_np.examples import train as example

    cfg = example.Config(layers=2, d_model=16, heads=4, d_ff=32, seq=8)
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"), backend=world.kind)
    with dt.comm_counter() as counter:
        run = example.train(mesh, cfg, steps=8, batch_size=6, lr=3e-3, bucket_mb=0.01, dropout=0.25)
    single = example.train(None, cfg, steps=8, batch_size=6, lr=3e-3, dropout=0.25)
    plain = example.train(None, cfg, steps=8, batch_size=6, lr=3e-3)
    np.testing.assert_allclose(run.losses, single.losses, rtol=1e-9)
    assert np.max(np.abs(np.subtract(single.losses, plain.losses))) > 1e-3  # the masks do change the run
    per_step = sum(run.collectives.values())  # the masks add no collective: every one is the step's own
    assert sum(counter.counts.values()) == 8 * per_step
    # the masks are the batch's shards: drawn Shard(0) on dp, no rank holds the whole
    key = dt.random.key(3)
    masks = example.dropout_masks(key, 0.25, cfg, 6, mesh)
    assert masks.placements == (Shard(0), R)
    assert_blocks_equal(masks, example.dropout_masks(key, 0.25, cfg, 6), "dropout masks")
    assert set(np.unique(masks.full_tensor()).tolist()) == {0.0, 1 / 0.75}


def test_training_with_dropout_on_uneven_batch_shards_matches_one_device():
    """A batch of 5 over 3 dp ranks (2, 2, 1 rows; a 1-D mesh without dim names): the masks split as the batch."""
    from dtensor_np.examples import train as example

    cfg = example.Config(layers=1, d_model=8, heads=2, d_ff=16, seq=4)
    run = example.train(dt.DeviceMesh((3,)), cfg, steps=3, batch_size=5, lr=1e-3, dropout=0.3)
    single = example.train(None, cfg, steps=3, batch_size=5, lr=1e-3, dropout=0.3)
    np.testing.assert_allclose(run.losses, single.losses, rtol=1e-9)


def test_training_example_main_takes_dropout(capsys):
    from dtensor_np.examples import train as example

    tiny = ["--steps", "3", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "16", "--seq", "4", "--plot", ""]
    assert example.main(tiny + ["--dropout", "0.1"]) == 0
    assert "OK" in capsys.readouterr().out
    assert example.main(tiny + ["--dropout", "1.0"]) == 2
    assert "expected --dropout with 0 <= P < 1, got 1.0" in capsys.readouterr().err


def test_a_batch_dtensor_must_be_placed_as_the_graph_takes_it():
    """fsdp's step takes a batch DTensor only with the batch's spec (Shard(0) on dp): a replicated one is refused."""
    from dtensor_np.examples import train as example

    cfg = example.Config(layers=1, d_model=8, heads=2, d_ff=16, seq=4)
    mesh = dt.DeviceMesh((2, 2), ("dp", "tp"))
    text = example.corpus(2000)
    vocab = sorted(set(text))
    params = example.init_params(np.random.default_rng(0), cfg, len(vocab))
    x, y = example.batch(text, vocab, cfg, 4, 0)
    mask = example.dropout_masks(KEY, 0.5, cfg, 4)
    step = dt.fsdp(lambda p, x, y, d: example.loss_fn(p, x, y, cfg, d), params, x, y, mask, mesh=mesh)
    flat = step.shard(params)
    sharded = example.dropout_masks(KEY, 0.5, cfg, 4, mesh)
    loss, _ = step.value_and_grad(flat, x, y, sharded)
    assert np.isclose(float(loss), example.loss_fn(params, x, y, cfg, mask), rtol=1e-12)
    replicated = dt.random.bernoulli(KEY, mask.shape, np.float64, mesh=mesh, placements=[R, R])
    with pytest.raises(dt.ShardingError, match=r"expected an array or a DTensor placed as .*, got .*RR"):
        step.value_and_grad(flat, x, y, replicated)
