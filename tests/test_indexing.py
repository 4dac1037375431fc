"""Indexing DTensors like NumPy: ``x[idx]``, ``x.at[idx].op(v)``, ``x[idx] = v`` and iteration.

Every test takes the ``world`` fixture (simulated 1, 2, 3, 4, 8 ranks; MPI 2
and 4) and draws indices with hypothesis (``hypothesis.extra.numpy``'s
``basic_indices`` and ``integer_array_indices``, boolean masks, and mixed
indices of every kind), on 1-D meshes and, for even worlds of 4 or more, 2-D
meshes, with shapes whose sides run from 0 to 7 (uneven and empty shards).
A result is compared on every rank: its global shape and dtype against
NumPy's on the full array, every held rank's shard against its block of
NumPy's result, its placements against the documented rule, and the
collectives it issued.  Each example's failures are shared between the ranks
before the next one, so an MPI rank never waits alone in a collective.
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, Callable

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from strategies import world_meshes
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.propagation.index_plan import plan_index

SETTINGS = dict(deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
R = Replicate()
UFUNCS = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}


def examples(world: Any, simulated: int, mpi: int) -> Any:
    return settings(max_examples=mpi if world.kind == "mpi" else simulated, **SETTINGS)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
class Verdict:
    """Mismatches found on this process in one example; ``agree`` fails every rank together."""

    def __init__(self, world: Any) -> None:
        self.world = world
        self.errors: list[str] = []

    def check(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a mismatch to report on every rank
            self.errors.append(f"{what}: {type(e).__name__}: {e}"[:3000])
            return None

    def agree(self) -> None:
        every = self.world.backend.comm.allgather(self.errors) if self.world.kind == "mpi" else [self.errors]
        bad = [f"process {i}: {e}" for i, errors in enumerate(every) for e in errors]
        assert not bad, "\n".join(bad[:12])


meshes = world_meshes  # one 1-D mesh, and a 2-D one from 4 ranks on


def full_array(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(-50, 50, size=shape).astype(dtype)


@st.composite
def placements(draw: Any, mesh: dt.DeviceMesh, ndim: int, partial: bool = False) -> list[Any]:
    options = [st.just(R)] + ([st.integers(0, ndim - 1).map(Shard)] * 2 if ndim else [])
    if partial:
        options.append(st.just(Partial()))
    return [draw(st.one_of(options)) for _ in range(mesh.ndim)]


def place(draw: Any, full: np.ndarray, mesh: dt.DeviceMesh, pls: list[Any]) -> Any:
    """``full`` distributed on ``pls``; a dim split by two mesh dims is sometimes split by the inner one first."""
    x = dt.distribute_tensor(full, mesh, pls)
    twice = [(d, ms) for d, ms in x.spec.shard_order if len(ms) > 1]
    if twice and draw(st.booleans()):
        order = tuple((d, tuple(reversed(ms)) if len(ms) > 1 else ms) for d, ms in x.spec.shard_order)
        x = x.redistribute(pls, shard_order=order)
    return x


@st.composite
def shapes(draw: Any, min_dims: int = 1, max_dims: int = 3) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(0, 7), min_size=min_dims, max_size=max_dims)))


@st.composite
def slices(draw: Any, n: int) -> slice:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    return slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3])))


@st.composite
def mixed_indices(draw: Any, shape: tuple[int, ...], arrays: bool = True, masks: bool = True) -> tuple[Any, ...]:
    """Any mix of ints, slices (every step), integer arrays, one boolean mask, None, bool scalars and ``...``."""
    b_shape = draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=3))
    kinds = ["slice", "slice", "int"] + ["array"] * arrays + ["mask"] * masks
    if masks and draw(st.booleans()):
        kinds = ["slice", "int", "mask", "mask", "mask"]
    items: list[Any] = []
    used_mask = used_array = False
    d = 0
    while d < len(shape) and not draw(st.integers(0, 5)) == 0:
        n = shape[d]
        kind = draw(st.sampled_from(kinds))
        if kind == "int" and n:
            items.append(draw(st.integers(-n, n - 1)))
            d += 1
        elif kind == "array" and not used_mask and (n or 0 in b_shape):
            sub = tuple(s if draw(st.booleans()) else 1 for s in b_shape)[draw(st.integers(0, len(b_shape))):]
            items.append(draw(hnp.arrays(np.intp, sub, elements=st.integers(-n, max(n - 1, -n)))))
            used_array = True
            d += 1
        elif kind == "mask" and not used_mask and not used_array:
            k = draw(st.integers(1, len(shape) - d))
            items.append(draw(hnp.arrays(np.bool_, shape[d:d + k])))
            used_mask = True
            d += k
        else:
            items.append(draw(slices(n)))
            d += 1
    for _ in range(draw(st.integers(0, 2))):
        bools = (arrays or masks) and not used_array and not used_mask  # a bool scalar makes the index advanced
        extra = draw(st.sampled_from([None, None, True, False] if bools else [None]))
        items.insert(draw(st.integers(0, len(items))), extra)
    if d < len(shape) and draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    return tuple(items)


class LineUp:
    """A boolean mask to be placed like the dims of ``x`` it indexes (see :func:`line_up_masks`)."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask


def as_dtensor_index(draw: Any, index: tuple[Any, ...], mesh: dt.DeviceMesh, x: Any) -> tuple[Any, ...]:
    """Some index arrays as DTensors: random placements, or (masks) lined up with ``x``'s."""
    out: list[Any] = []
    for item in index:
        how = draw(st.sampled_from(["numpy", "dtensor", "line up"])) if isinstance(item, np.ndarray) and item.ndim \
            else "numpy"
        if how == "line up" and item.dtype == bool:
            out.append(LineUp(item))
        elif how != "numpy":
            out.append(dt.distribute_tensor(item, mesh, draw(placements(mesh, item.ndim))))
        else:
            out.append(item)
    return tuple(out)


def _consumes(item: Any) -> int:
    if item is None or item is Ellipsis or isinstance(item, (bool, np.bool_)):
        return 0
    if isinstance(item, LineUp):
        return item.mask.ndim
    if isinstance(item, (np.ndarray, dt.DTensor)) and item.dtype == bool:
        return item.ndim
    return 1


def line_up_masks(index: tuple[Any, ...], x: Any) -> tuple[Any, ...]:
    """Every :class:`LineUp` mask as a DTensor placed like the dims of ``x`` it indexes (the mask fast path)."""
    out = []
    for i, item in enumerate(index):
        if isinstance(item, LineUp):
            if any(it is Ellipsis for it in index[:i]):
                a = x.ndim - item.mask.ndim - sum(_consumes(it) for it in index[i + 1:])
            else:
                a = sum(_consumes(it) for it in index[:i])
            k = item.mask.ndim
            pl = [Shard(p.dim - a) if isinstance(p, Shard) and a <= p.dim < a + k else R for p in x.placements]
            out.append(dt.distribute_tensor(item.mask, x.mesh, pl))
        else:
            out.append(item)
    return tuple(out)


def numpy_index(index: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(item.full_tensor() if isinstance(item, dt.DTensor) else item for item in index)


def check_blocks(v: Verdict, what: str, got: Any, want: np.ndarray) -> None:
    """Shape, dtype, and every held rank's shard against its block of ``want`` (the full tensor when Partial)."""
    def run() -> None:
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
        if any(isinstance(p, Partial) for p in got.placements):  # partial sums of floats round
            np.testing.assert_allclose(got.full_tensor(), want, rtol=1e-12, atol=1e-12)
            return
        for r, shard in got.shards.items():
            block = want[got.spec.local_index(r)]
            assert shard.shape == block.shape, (r, shard.shape, block.shape)
            np.testing.assert_array_equal(shard, block, err_msg=f"rank {r}")
    v.check(what, run)


def expected_placements(x: Any, index: tuple[Any, ...]) -> tuple[Any, ...]:
    """The documented rule: a sliced dim keeps its mesh dims, an int's become R, an indexed (array) dim's shard
    the first dim of the index arrays' shape (R when they are 0-d); Partial stays."""
    plan = plan_index(x.shape, tuple(np.zeros(i.shape, i.dtype) if isinstance(i, dt.DTensor) and i.dtype != bool
                                     else (i.full_tensor() if isinstance(i, dt.DTensor) else i) for i in index))
    out = []
    for p in x.placements:
        if not isinstance(p, Shard):
            out.append(p)
            continue
        e = plan.entry_of(p.dim)
        if e.kind == "int":
            out.append(R)
        elif e.kind == "adv":
            out.append(Shard(plan.b_pos) if plan.b_shape else R)
        else:
            out.append(Shard(plan.out_dim_of(plan.y_dim_of(p.dim))))
    return tuple(out)


def moving_dims(x: Any, index: Any, result: Any) -> tuple[int, int]:
    """(sliced sharded dims whose kept rows are not the result's chunks, 1 if an int lies on a sharded dim), brute force."""
    plan = plan_index(x.shape, index)
    moves = 0
    for d, mesh_dims in x.spec.shard_order:
        e = plan.entry_of(d)
        if e.kind != "slice":
            continue
        selected = list(range(e.start, e.start + e.step * e.length, e.step))[:e.length]
        y = plan.out_dim_of(plan.y_dim_of(d))
        for r in x.mesh.all_ranks:
            (size,), (offset,) = ((s[d],) for s in x.spec.local_block(r))
            kept = [k for k, i in enumerate(selected) if offset <= i < offset + size]
            tsize, toffset = (s[y] for s in result.spec.local_block(r))
            if kept != list(range(toffset, toffset + tsize)) and (kept or tsize):
                moves += 1
                break
    ints = any(isinstance(p, Shard) and plan.entry_of(p.dim).kind == "int" for p in x.placements)
    return moves, int(ints)


def same_error(v: Verdict, what: str, numpy_call: Callable[[], Any], call: Callable[[], Any]) -> bool:
    """True when NumPy raises; then ``call`` must raise the same type with the same message."""
    want: Exception | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            numpy_call()
    except Exception as e:  # noqa: BLE001
        want = e
    if want is None:
        return False

    def run() -> None:
        try:
            call()
        except Exception as got:  # noqa: BLE001
            assert type(got) is type(want) and str(got) == str(want), (repr(got), repr(want))
            return
        raise AssertionError(f"no error; NumPy raised {want!r}")

    v.check(what, run)
    return True


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------
def test_basic_indexing_keeps_shards_and_moves_only_changed_rows(world):
    """ints, slices of every step, None, ...: the documented placements, at most one Alltoallv per sliced sharded
    dim (none when the layout is kept), one broadcast for ints on sharded dims, never an all_gather."""

    @examples(world, 40, 12)
    @given(st.data())
    def check(data):
        mesh = data.draw(st.sampled_from(meshes(world)))
        shape = data.draw(shapes(0, 3))
        full = full_array(shape, data.draw(st.sampled_from(["float64", "int32", "bool"])), data.draw(st.integers(0, 99)))
        x = place(data.draw, full, mesh, data.draw(placements(mesh, len(shape), partial=True)))
        index = data.draw(st.one_of(hnp.basic_indices(shape, allow_newaxis=True),
                                    mixed_indices(shape, arrays=False, masks=False)))
        v = Verdict(world)
        if same_error(v, f"{mesh.shape} {x.spec} {shape}[{index!r}]", lambda: full[index], lambda: x[index]):
            v.agree()
            return
        with dt.comm_counter() as counter:
            got = v.check(f"{mesh.shape} {x.spec} {shape}[{index!r}]", lambda: x[index])
        if got is not None:
            ctx = f"{mesh.shape} {x.spec} {shape}[{index!r}] -> {got.spec}"
            want = full[index]
            check_blocks(v, ctx, got, want)
            v.check(ctx + " placements", lambda: operator.eq(got.placements, expected_placements(x, index_items(index)))
                    or pytest.fail(f"{got.placements} != {expected_placements(x, index_items(index))}"))
            moves, ints = moving_dims(x, index, got)

            def counts() -> None:
                assert counter.counts["all_gather"] == 0 and counter.counts["all_reduce"] == 0, counter
                assert counter.counts["all_to_all"] == moves and counter.counts["broadcast"] == ints, (counter, moves)
                assert counter.total == moves + ints
            v.check(ctx + " collectives", counts)
            v.check(ctx + " a copy", lambda: [operator.not_(np.shares_memory(a, b)) or pytest.fail("a view")
                                             for a in got.shards.values() for b in x.shards.values()])
            v.check(ctx + " x unchanged", lambda: np.testing.assert_array_equal(x.full_tensor(), full))
        v.agree()

    check()


def index_items(index: Any) -> tuple[Any, ...]:
    return index if type(index) is tuple else (index,)


def test_advanced_indexing_equals_numpy(world):
    """Integer arrays, boolean masks and mixes with basic items, NumPy or DTensor index arrays: values, placements,
    and no all_gather but of index arrays (never of x)."""

    @examples(world, 40, 10)
    @given(st.data())
    def check(data):
        mesh = data.draw(st.sampled_from(meshes(world)))
        shape = data.draw(shapes(1, 3))
        full = full_array(shape, data.draw(st.sampled_from(["float64", "int64"])), data.draw(st.integers(0, 99)))
        x = place(data.draw, full, mesh, data.draw(placements(mesh, len(shape), partial=True)))
        if all(shape) and data.draw(st.booleans()):
            index = data.draw(hnp.integer_array_indices(shape, result_shape=hnp.array_shapes(max_dims=2, max_side=4)))
        else:
            index = data.draw(mixed_indices(shape))
        index = line_up_masks(as_dtensor_index(data.draw, index, mesh, x), x)
        v = Verdict(world)
        np_index = numpy_index(index)
        ctx = f"{mesh.shape} {x.spec} {shape}[{np_index!r}]"
        if same_error(v, ctx, lambda: full[np_index], lambda: x[index]):
            v.agree()
            return
        index_bytes = sum(i.size * i.dtype.itemsize for i in np_index if isinstance(i, np.ndarray))
        with dt.comm_counter() as counter:
            got = v.check(ctx, lambda: x[index])
        if got is not None:
            want = full[np_index]
            check_blocks(v, ctx + f" -> {got.spec}", got, want)
            v.check(ctx + " placements", lambda: operator.eq(got.placements, expected_placements(x, index))
                    or pytest.fail(f"{got.placements} != {expected_placements(x, index)}"))
            v.check(ctx + " no all_gather of x", lambda: operator.le(counter.bytes["all_gather"],
                                                                     counter.counts["all_gather"] * index_bytes)
                    or pytest.fail(f"{counter.bytes['all_gather']} bytes gathered"))
            v.check(ctx + " x unchanged", lambda: np.testing.assert_array_equal(x.full_tensor(), full))
        v.agree()

    check()


def test_index_arrays_on_unsharded_dims_and_replicated_indices_communicate_nothing(world):
    n = world.size
    for mesh in meshes(world):
        full = np.arange(4 * (n + 3) * 3.0).reshape(4, n + 3, 3)
        x = dt.distribute_tensor(full, mesh, [Shard(1)] + [R] * (mesh.ndim - 1))
        idx = np.array([[2, 0], [-1, 1]])
        for index in [(idx,), (slice(None), slice(None), [2, 2, 0]), (idx, slice(None), idx[::-1] % 3),
                      (full[:, 0, 0] > 10,), (Ellipsis, np.array([True, False, True]))]:
            with dt.comm_counter() as counter:
                got = x[index]
            assert counter.total == 0, (index, counter)
            want = full[index]
            for r, shard in got.shards.items():
                np.testing.assert_array_equal(shard, want[got.spec.local_index(r)])


def test_mask_lined_up_with_x_agrees_on_counts_and_moves_rows_once(world):
    """x[m] with m placed like x: one small count exchange (not a counted collective) and at most one rechunk."""
    n = world.size
    rng = np.random.default_rng(5)
    for mesh in meshes(world):
        for shape in [(2 * n + 1,), (n + 2, 3), (3, n + 1)]:
            full = rng.normal(size=shape)
            for pl in ([Shard(0)], [Shard(len(shape) - 1)], [R]):
                pl = pl + [R] * (mesh.ndim - 1)
                x = dt.distribute_tensor(full, mesh, pl)
                mask = x > 0
                with dt.comm_counter() as counter:
                    got = x[mask]
                want = full[full > 0]
                assert got.shape == want.shape
                np.testing.assert_array_equal(got.full_tensor(), want)
                for r, shard in got.shards.items():
                    np.testing.assert_array_equal(shard, want[got.spec.local_index(r)])
                if len(shape) == 1 or pl[0] == Shard(0) or pl[0] == R:
                    assert counter.counts["all_to_all"] <= 1 and counter.counts["all_gather"] == 0, counter
                    assert got.placements[0] == (Shard(0) if pl[0] != R else R)
                # rows of a masked leading dim
                rows = full[:, 0] > 0 if full.ndim == 2 else full > 0
                m = dt.distribute_tensor(rows, mesh, [Shard(0) if pl[0] == Shard(0) else R] + [R] * (mesh.ndim - 1))
                got = x[m, ...] if full.ndim == 2 else x[m]
                np.testing.assert_array_equal(got.full_tensor(), full[rows])


def test_slice_moves_only_the_rows_that_change_owner(world):
    """comm_counter().bytes: a slice of a sharded dim passes MPI only the rows that leave each rank."""
    n = world.size
    width = 3
    full = np.arange((4 * n + 3) * width, dtype=np.float64).reshape(-1, width)
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    x = dt.distribute_tensor(full, mesh, [Shard(0)])
    for index in [slice(1, None), slice(2, -1), slice(None, None, 2), slice(None, None, -1), slice(-2, 0, -3)]:
        with dt.comm_counter() as counter:
            got = x[index]
        selected = list(range(full.shape[0]))[index]
        leaving = {}
        for r in mesh.all_ranks:
            (size, _), (offset, _) = x.spec.local_block(r)
            tsize, toffset = (s[0] for s in got.spec.local_block(r))
            mine = [k for k, i in enumerate(selected) if offset <= i < offset + size]
            leaving[r] = sum(1 for k in mine if not toffset <= k < toffset + tsize)
        moved = max(leaving[r] for r in world.ranks) * width * 8
        assert counter.counts["all_gather"] == 0
        if any(leaving.values()):
            assert counter.counts["all_to_all"] == 1 and counter.bytes["all_to_all"] == moved, (index, counter.bytes)
            assert moved < full.nbytes
        else:
            assert counter.total == 0
        np.testing.assert_array_equal(got.full_tensor(), full[index])


def test_iteration_and_0d(world):
    for mesh in meshes(world):
        full = np.arange(15.0).reshape(5, 3)
        x = dt.distribute_tensor(full, mesh, [Shard(0)] + [Shard(1)] * (mesh.ndim - 1))
        rows = [row.full_tensor() for row in x]
        assert len(rows) == 5
        for row, want in zip(rows, full):
            np.testing.assert_array_equal(row, want)
        scalar = x[3, -1]
        assert scalar.shape == () and float(scalar) == full[3, -1]
        with pytest.raises(TypeError, match="iteration over a 0-d array"):
            iter(scalar)
        np.testing.assert_array_equal(scalar[()].full_tensor(), full[3, -1])
        np.testing.assert_array_equal(scalar[None, ...].full_tensor(), full[3, -1][None, ...])


# ---------------------------------------------------------------------------
# updates
# ---------------------------------------------------------------------------
def test_at_updates_equal_numpy(world):
    """x.at[idx].set/add/multiply/min/max(v) == NumPy's assignment / ufunc.at on the full array, duplicates included;
    x and its shards are unchanged; ranks holding none of idx keep their shard object; a value already on every rank
    needs no collective."""

    @examples(world, 40, 10)
    @given(st.data())
    def check(data):
        mesh = data.draw(st.sampled_from(meshes(world)))
        shape = data.draw(shapes(1, 3))
        dtype = data.draw(st.sampled_from(["float64", "int64"]))
        full = full_array(shape, dtype, data.draw(st.integers(0, 99)))
        x = place(data.draw, full, mesh, data.draw(placements(mesh, len(shape))))
        index = data.draw(st.one_of(hnp.basic_indices(shape, allow_newaxis=True), mixed_indices(shape)))
        index = line_up_masks(as_dtensor_index(data.draw, index_items(index), mesh, x), x)
        np_index = numpy_index(index)
        op = data.draw(st.sampled_from(["set", "add", "multiply", "min", "max"]))
        try:
            target = full[np_index].shape
        except (IndexError, ValueError):
            return
        kind = data.draw(st.sampled_from(["scalar", "numpy", "broadcast", "dtensor", "replicated"]))
        value: Any = int(data.draw(st.integers(-9, 9)))
        if kind != "scalar":
            vshape = target if kind != "broadcast" else tuple(1 if data.draw(st.booleans()) else s for s in target)[
                data.draw(st.integers(0, len(target))):]
            value = full_array(vshape, dtype, data.draw(st.integers(0, 99)))
            if kind == "dtensor":
                value = dt.distribute_tensor(value, mesh, data.draw(placements(mesh, value.ndim)))
            elif kind == "replicated":
                value = dt.distribute_tensor(value, mesh, [R] * mesh.ndim)
        np_value = value.full_tensor() if isinstance(value, dt.DTensor) else value
        want = full.copy()
        if op == "set":
            want[np_index] = np_value
        else:
            UFUNCS[op].at(want, np_index, np_value)
        touched = np.zeros(shape, bool)
        touched[np_index] = True
        before = {r: s.copy() for r, s in x.shards.items()}
        v = Verdict(world)
        ctx = f"{mesh.shape} {x.spec} {shape}.at[{np_index!r}].{op}({kind} {np.shape(np_value)})"
        with dt.comm_counter() as counter:
            got = v.check(ctx, lambda: getattr(x.at[index], op)(value))
        if got is not None:
            check_blocks(v, ctx, got, want)
            v.check(ctx + " placements", lambda: operator.eq(got.placements, x.placements) or pytest.fail(got.spec))
            v.check(ctx + " x unchanged", lambda: [np.testing.assert_array_equal(s, before[r])
                                                  for r, s in x.shards.items()])
            untouched = [r for r in x.shards if not touched[x.spec.local_index(r)].any()]
            v.check(ctx + " untouched ranks keep their shard", lambda: [
                operator.is_(got.shards[r], x.shards[r]) or pytest.fail(f"rank {r} copied") for r in untouched])
            if kind in ("scalar", "numpy", "broadcast", "replicated") and not any(
                    isinstance(i, dt.DTensor) for i in index):
                v.check(ctx + " no collective", lambda: operator.eq(counter.total, 0) or pytest.fail(counter))
        if op == "set":  # x[index] = value rebinds a handle to the same result; x, the copy's source, unchanged
            handle = x.copy()
            v.check(ctx + " setitem", lambda: handle.__setitem__(index, value))
            check_blocks(v, ctx + " setitem", handle, want)
            v.check(ctx + " x unchanged by setitem", lambda: np.testing.assert_array_equal(x.full_tensor(), full))
            view = x.copy()[...]  # a view: writing through it rebinds its base, as NumPy writes its base's memory
            v.check(ctx + " setitem through a view", lambda: view.__setitem__(index, value))
            check_blocks(v, ctx + " setitem through a view", view, want)
            check_blocks(v, ctx + " the view's base", view.base, want)
        v.agree()

    check()


def test_update_by_a_dtensor_of_the_slice_moves_rows_back_not_gathers(world):
    n = world.size
    mesh = dt.DeviceMesh((n,), backend=world.kind)
    full = np.arange(3.0 * (2 * n + 3)).reshape(-1, 3)
    x = dt.distribute_tensor(full, mesh, [Shard(0)])
    for index in [slice(1, None), slice(None, None, -2), (slice(2, None), 1)]:
        value = x[index] * 10
        with dt.comm_counter() as counter:
            got = x.at[index].add(value)
        want = full.copy()
        want[index] += full[index] * 10
        np.testing.assert_array_equal(got.full_tensor(), want)
        assert counter.counts["all_gather"] == 0 and counter.counts["all_to_all"] <= 1, (index, counter)


def test_setitem_rebinds_this_handle_only(world):
    for mesh in meshes(world):
        full = np.arange(24.0).reshape(6, 4)
        x = dt.distribute_tensor(full, mesh, [Shard(0)] + [Shard(1)] * (mesh.ndim - 1))
        alias = x
        other = x.redistribute([R] * mesh.ndim)
        same = x.redistribute(x.placements)  # nothing moves, yet a handle of its own
        earlier = x[1:4]  # a view, as in NumPy: it sees the writes
        copied = x[1:4].copy()  # a copy: it does not
        locals_before = {r: s for r, s in x.shards.items()}
        copies = {r: s.copy() for r, s in x.shards.items()}
        local = x.to_local()
        x[::2, 1] = -1.0
        x[np.array([5, 5]), :] = np.array([7.0, 8.0, 9.0, 10.0])
        x[x > 20] = 0.0
        want = full.copy()
        want[::2, 1] = -1.0
        want[np.array([5, 5]), :] = np.array([7.0, 8.0, 9.0, 10.0])
        want[want > 20] = 0.0
        np.testing.assert_array_equal(x.full_tensor(), want)
        assert alias is x  # the same handle: it sees the new value
        np.testing.assert_array_equal(other.full_tensor(), full)
        assert same is not x
        np.testing.assert_array_equal(same.full_tensor(), full)
        np.testing.assert_array_equal(earlier.full_tensor(), want[1:4])
        np.testing.assert_array_equal(copied.full_tensor(), full[1:4])
        for r, s in locals_before.items():
            np.testing.assert_array_equal(s, copies[r])  # the old shard objects were never written
        shards = local.shards if isinstance(local, dt.LocalTensor) else {world.ranks[0]: local}
        for r, s in shards.items():
            np.testing.assert_array_equal(s, copies[r])
        with pytest.raises(TypeError, match=r"x.at\[index\] does not take assignment"):
            x.at[0] = 1.0


# ---------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------
def test_getitem_in_traced_and_tensor_parallel_graphs(world):
    rng = np.random.default_rng(3)
    params = {"fc.weight": rng.normal(size=(2 * world.size + 5, 4))}

    def fn(p, x):
        h = x @ p["fc.weight"].T
        return h[:, 1::2][:, ::-1][:, [0, 2, 2]] + h[:, 3:4] + h[-1, 2] + h[:, np.array([True, False] * 2 + [False])
                                                                           .nonzero()[0][:1]]

    x = rng.normal(size=(3, 4))
    g = dt.trace(fn, params, x)
    assert [n.op for n in g.nodes].count("getitem") >= 5
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    tp, local = dt.tensor_parallel_transform(g, params, mesh, {"fc": dt.ColwiseParallel()})
    np.testing.assert_allclose(tp(local, x), fn(params, x), rtol=1e-12)
    with pytest.raises(TypeError, match="data-dependent shape"):
        dt.trace(lambda a: a[a > 0], x)
    mask = np.array([True, False, True])
    np.testing.assert_array_equal(dt.trace(lambda a: a[mask, 1:], x)(x), x[mask, 1:])  # a concrete mask is static


# ---------------------------------------------------------------------------
# the error catalogue (docs/errors.md, "Indexing and updates")
# ---------------------------------------------------------------------------
def test_catalogue_indexing_errors(world):
    from test_bad_input import Catalogue

    cat = Catalogue(world)
    mesh = cat.mesh
    a = np.arange(12.0).reshape(3, 4)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    xi = dt.distribute_tensor(np.arange(12, dtype=np.uint8).reshape(3, 4), mesh, [Shard(0)])
    wrong_mesh = dt.DeviceMesh((1, world.size), backend=world.kind)
    ShardingError = dt.ShardingError
    # reading: NumPy's errors and words, raised before anything moves
    for name, index, kind, match in [
        ("x[5]", 5, IndexError, r"index 5 is out of bounds for axis 0 with size 3"),
        ("x[0, -5]", (0, -5), IndexError, r"index -5 is out of bounds for axis 1 with size 4"),
        ("x[[0, 3]]", [0, 3], IndexError, r"index 3 is out of bounds for axis 0 with size 3"),
        ("x[0, 0, 0]", (0, 0, 0), IndexError, r"too many indices for array: array is 2-dimensional, but 3 were indexed"),
        ("x[..., ...]", (Ellipsis, Ellipsis), IndexError, r"an index can only have a single ellipsis \('\.\.\.'\)"),
        ("x[1.0]", 1.0, IndexError, r"only integers, slices \(`:`\), ellipsis \(`\.\.\.`\), numpy\.newaxis \(`None`\) "
                                    r"and integer or boolean arrays are valid indices"),
        ("x['a']", "a", IndexError, r"only integers, slices"),
        ("x[[0.5]]", [0.5], IndexError, r"only integers, slices"),
        ("x[np.array([1.0])]", np.array([1.0]), IndexError, r"arrays used as indices must be of integer \(or boolean\) type"),
        ("x[::0]", slice(None, None, 0), ValueError, r"slice step cannot be zero"),
        ("x[1.5:]", slice(1.5, None), TypeError, r"slice indices must be integers or None or have an __index__ method"),
        ("x[mask of shape (2,)]", np.array([True, False]), IndexError,
         r"boolean index did not match indexed array along axis 0; size of axis is 3 but size of corresponding "
         r"boolean axis is 2"),
        ("x[[0, 1], [0, 1, 2]]", ([0, 1], [0, 1, 2]), IndexError,
         r"shape mismatch: indexing arrays could not be broadcast together with shapes \(2,\) \(3,\) "),
        ("x[[[0, 1], [0]]] (ragged)", [[0, 1], [0]], ValueError, r"inhomogeneous"),
    ]:
        cat.raises(name, kind, match, lambda index=index: x[index])
    cat.raises("x[DTensor mask of shape (2,)]", IndexError, r"boolean index did not match indexed array along axis 0",
               lambda: x[dt.distribute_tensor(np.array([True, False]), mesh, [Shard(0)])])
    cat.raises("x[DTensor index with a value out of range]", IndexError,
               r"index 7 is out of bounds for axis 1 with size 4",
               lambda: x[:, dt.distribute_tensor(np.array([1, 7, 0]), mesh, [Shard(0)])])
    cat.raises("x[DTensor float index]", IndexError, r"arrays used as indices must be of integer \(or boolean\) type",
               lambda: x[dt.distribute_tensor(np.array([1.0]), mesh, [R])])
    cat.raises("x[index on another mesh]", ShardingError, r"an index array must live on the indexed array's mesh",
               lambda: x[dt.distribute_tensor(np.array([0, 1]), wrong_mesh, [R, R])])
    cat.raises("iter(x0d)", TypeError, r"iteration over a 0-d array", lambda: iter(x[0, 0]))
    cat.raises("trace of x[x > 0]", TypeError, r"boolean mask that is a traced or graph array has a data-dependent "
                                               r"shape", lambda: dt.trace(lambda t: t[t > 0], a))
    # updates
    cat.raises("x.at[0:2].set(ones(3))", ValueError, r"could not broadcast input array from shape \(3,\) into shape "
                                                     r"\(2, 4\)", lambda: x.at[0:2].set(np.ones(3)))
    cat.raises("x.at[[0, 1]].add(ones((3, 4)))", ValueError,
               r"shape mismatch: value array of shape \(3, 4\) could not be broadcast to indexing result of shape "
               r"\(2, 4\)", lambda: x.at[[0, 1]].add(np.ones((3, 4))))
    cat.raises("x[0:2] = DTensor of shape (3,)", ValueError, r"could not broadcast input array from shape \(3,\)",
               lambda: x.__setitem__(slice(0, 2), dt.distribute_tensor(np.ones(3), mesh, [Shard(0)])))
    cat.raises("x.at[5].set(1)", IndexError, r"index 5 is out of bounds for axis 0 with size 3",
               lambda: x.at[5].set(1.0))
    cat.raises("x_uint8.at[0].set(300)", OverflowError, r"Python integer 300 out of bounds for uint8",
               lambda: xi.at[0].set(300))
    cat.raises("x.at[0].set('a')", TypeError, r"dtensor_np distributes numeric and bool arrays; the value has dtype",
               lambda: x.at[0].set(np.array(["a"])))
    cat.raises("x.at[0].set(value on another mesh)", ShardingError, r"the value must live on the updated array's mesh",
               lambda: x.at[0].set(dt.distribute_tensor(np.ones(4), wrong_mesh, [R, R])))
    cat.raises("x.at[0] = 1", TypeError, r"x\.at\[index\] does not take assignment \(DTensors are immutable\)",
               lambda: x.at.__setitem__(0, 1.0))
    cat.works("x.at[0:0].add(ones(4)) and x[[]] (empty selections)", lambda: (
        np.testing.assert_array_equal(x.at[0:0].add(np.ones(4)).full_tensor(), a),
        np.testing.assert_array_equal(x[[]].full_tensor(), a[[]])))
    cat.works("x[np.zeros((3, 0), bool)] (NumPy checks no mask dim of size 0)", lambda: (
        np.testing.assert_array_equal(x[np.zeros((3, 0), bool)].full_tensor(), a[np.zeros((3, 0), bool)])))
    cat.finish()
