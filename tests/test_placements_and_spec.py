"""Pure-metadata tests for placements, ``TensorMeta``, ``DTensorSpec`` and
``compute_local_shape_and_global_offset``.

Uneven sharding follows ``torch.chunk`` (n split k ways: ``ceil(n/k)`` each,
tail smaller or empty; n=5, k=4 gives 2, 2, 1, 0, not numpy.array_split), and
a tensor dim sharded on several mesh dims is split outer mesh dim first unless
a shard order says otherwise.  Expected values here are computed
independently of the library.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np import (
    DeviceMesh,
    DTensorSpec,
    Partial,
    Replicate,
    Shard,
    ShardingError,
    TensorMeta,
    compute_local_shape_and_global_offset,
)
from collectives import chunk_size_and_offset, chunk_sizes
from dtensor_np.placements import placements_str


def torch_chunk_sizes(n: int, k: int) -> list[int]:
    """Sizes of ``torch.chunk(range(n), k)``, padded with empty chunks up to ``k`` (as DTensor does).

    torch.chunk splits with ``split_size = ceil(n / k)``: full chunks, then
    one shorter tail chunk, and possibly fewer than ``k`` chunks.
    """
    if n == 0:
        return [0] * k
    split = (n + k - 1) // k
    sizes = [min(split, n - start) for start in range(0, n, split)]
    return sizes + [0] * (k - len(sizes))


def torch_chunk_offsets(n: int, k: int) -> list[int]:
    """Start of every chunk; an empty chunk at the tail starts at ``n``."""
    sizes = torch_chunk_sizes(n, k)
    return [sum(sizes[:i]) for i in range(k)]


def reference_block(shape, mesh_shape, placements, coordinate, order=None):
    """The block at ``coordinate``: chunk every sharded dim, mesh dim by mesh dim, in ``order``."""
    ndim = len(shape)
    if order is None:
        by_dim: dict[int, list[int]] = {}
        for m, p in enumerate(placements):
            if isinstance(p, Shard):
                by_dim.setdefault(p.dim % ndim, []).append(m)
        order = tuple((d, tuple(ms)) for d, ms in sorted(by_dim.items()))
    start = [0] * ndim
    length = list(shape)
    for d, mesh_dims in order:
        for m in mesh_dims:
            k, c = mesh_shape[m], coordinate[m]
            start[d] += torch_chunk_offsets(length[d], k)[c]
            length[d] = torch_chunk_sizes(length[d], k)[c]
    return tuple(length), tuple(start)


# ---------------------------------------------------------------------------
# placements
# ---------------------------------------------------------------------------


def test_placement_value_equality_and_hashing():
    assert Shard(0) == Shard(0)
    assert hash(Shard(0)) == hash(Shard(0))
    assert Shard(0) != Shard(1)
    assert Shard(0) != Replicate()
    assert Replicate() == Replicate()
    assert hash(Replicate()) == hash(Replicate())
    assert Partial() == Partial("sum")
    assert Partial(reduce_op="max") == Partial("max")
    assert hash(Partial()) == hash(Partial("sum"))
    assert Partial("max") != Partial("sum")
    assert Partial() != Replicate()
    placements = {Shard(0), Shard(0), Shard(1), Replicate(), Replicate(), Partial(), Partial("sum"), Partial("min")}
    assert len(placements) == 5
    assert {Shard(1): "x"}[Shard(1)] == "x"


def test_placement_str():
    assert str(Shard(0)) == "S(0)"
    assert str(Shard(2)) == "S(2)"
    assert str(Shard(-1)) == "S(-1)"
    assert str(Replicate()) == "R"
    assert str(Partial()) == "P(sum)"
    assert str(Partial("sum")) == "P(sum)"
    assert str(Partial("max")) == "P(max)"
    assert str(Partial("avg")) == "P(avg)"
    assert str(Partial("min")) == "P(min)"
    assert placements_str((Shard(0), Replicate(), Partial("max"))) == "S(0)RP(max)"


def test_placement_repr_is_constructor_like():
    assert repr(Shard(0)) == "Shard(dim=0)"
    assert repr(Shard(-1)) == "Shard(dim=-1)"
    assert repr(Replicate()) == "Replicate()"
    assert repr(Partial()) == "Partial(reduce_op='sum')"
    assert repr(Partial("max")) == "Partial(reduce_op='max')"
    for p in (Shard(3), Replicate(), Partial("avg")):
        assert eval(repr(p), {"Shard": Shard, "Replicate": Replicate, "Partial": Partial}) == p


@pytest.mark.parametrize("op", ["prod", "SUM", "", None, "mean"])
def test_partial_rejects_unknown_reduce_op(op):
    with pytest.raises(ShardingError, match=r"sum, avg, max, min, got " + re.escape(repr(op))):
        Partial(op)
    assert issubclass(ShardingError, ValueError)


@pytest.mark.parametrize("dim", ["x", 1.0, None, True, (0,)])
def test_shard_rejects_non_int_dims(dim):
    with pytest.raises(TypeError, match=r"int tensor dim, got"):
        Shard(dim)


def test_placement_predicates_and_frozenness():
    assert Shard(1).is_shard()
    assert Shard(1).is_shard(1)
    assert not Shard(1).is_shard(0)
    assert not Shard(1).is_replicate() and not Shard(1).is_partial()
    assert Replicate().is_replicate() and not Replicate().is_shard() and not Replicate().is_partial()
    assert Partial().is_partial() and not Partial().is_shard() and not Partial().is_replicate()
    with pytest.raises(dataclasses.FrozenInstanceError):
        Shard(0).dim = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Partial().reduce_op = "max"  # type: ignore[misc]


# ---------------------------------------------------------------------------
# TensorMeta and DTensorSpec
# ---------------------------------------------------------------------------


def test_tensor_meta():
    meta = TensorMeta([2, 3], "float32")
    assert meta.shape == (2, 3)
    assert meta.dtype == np.dtype("float32")
    assert meta.ndim == 2
    assert meta == TensorMeta((2, 3), np.float32)
    assert hash(meta) == hash(TensorMeta((2, 3), np.float32))
    assert TensorMeta((), "f8").ndim == 0
    with pytest.raises(ShardingError, match="non-negative"):
        TensorMeta((2, -1), "f4")
    with pytest.raises(TypeError, match="sequence of ints"):
        TensorMeta(3, "f4")


MESH22 = DeviceMesh((2, 2))
META46 = TensorMeta((4, 6), "float32")


def test_spec_is_frozen_and_hashable():
    a = DTensorSpec(MESH22, [Shard(0), Replicate()], META46)
    b = DTensorSpec(MESH22, (Shard(0), Replicate()), META46)
    c = DTensorSpec(MESH22, (Shard(0), Replicate()), META46, shard_order=((0, (0,)),))
    assert a.placements == (Shard(0), Replicate())
    assert isinstance(a.placements, tuple)
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert len({a, b, c}) == 1
    assert a != DTensorSpec(MESH22, (Replicate(), Shard(0)), META46)
    assert a != DTensorSpec(MESH22, (Shard(0), Replicate()), TensorMeta((4, 6), "float64"))
    assert a != DTensorSpec(DeviceMesh((2, 2), ("x", "y")), (Shard(0), Replicate()), META46)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.placements = (Replicate(), Replicate())  # type: ignore[misc]
    assert str(a) == "S(0)R"
    assert a.shape == (4, 6) and a.ndim == 2 and a.dtype == np.dtype("float32")


@pytest.mark.parametrize(
    ("placements", "dim_map", "sums", "num_shards"),
    [
        ((Shard(0), Replicate()), [0, -1], [], 2),
        ((Replicate(), Shard(0)), [1, -1], [], 2),
        ((Shard(1), Shard(0)), [1, 0], [], 4),
        ((Partial(), Shard(1)), [-1, 1], [0], 2),
        ((Partial(), Partial("max")), [-1, -1], [0, 1], 1),
        ((Replicate(), Replicate()), [-1, -1], [], 1),
        ((Shard(-1), Replicate()), [-1, 0], [], 2),
    ],
)
def test_dim_map_sums_num_shards(placements, dim_map, sums, num_shards):
    spec = DTensorSpec(MESH22, placements, META46)
    assert spec.dim_map == dim_map
    assert spec.sums == sums
    assert spec.num_shards == num_shards


def test_num_shards_uses_mesh_sizes():
    mesh = DeviceMesh((2, 3, 2))
    meta = TensorMeta((12, 12), "f4")
    assert DTensorSpec(mesh, (Shard(0), Shard(0), Replicate()), meta).num_shards == 6
    assert DTensorSpec(mesh, (Replicate(), Shard(1), Shard(0)), meta).num_shards == 6
    assert DTensorSpec(mesh, (Shard(0), Partial(), Shard(1)), meta).num_shards == 4


def test_dim_map_cannot_describe_nested_sharding():
    spec = DTensorSpec(MESH22, (Shard(0), Shard(0)), META46)
    with pytest.raises(ShardingError, match=r"tensor dim 0 sharded on several mesh dims \(0 and 1\)"):
        spec.dim_map
    assert spec.num_shards == 4


def test_from_dim_map():
    spec = DTensorSpec.from_dim_map(MESH22, [1, -1], [0])
    assert spec.placements == (Partial(), Shard(0))
    assert str(spec) == "P(sum)S(0)"
    mesh = DeviceMesh((2, 2, 2))
    spec = DTensorSpec.from_dim_map(mesh, [-1, 2], [0, 1], TensorMeta((2, 3), "f4"))
    assert spec.placements == (Partial(), Partial(), Shard(1))
    assert spec.dim_map == [-1, 2]
    assert spec.sums == [0, 1]
    assert spec.tensor_meta == TensorMeta((2, 3), "f4")
    spec = DTensorSpec.from_dim_map(MESH22, [1, -1, 0], [], TensorMeta((2, 3, 4), "f4"))
    assert spec.placements == (Shard(2), Shard(0))
    assert spec.dim_map == [1, -1, 0]


def test_from_dim_map_errors():
    with pytest.raises(ShardingError, match="mesh dim 0 is asked to hold S\\(0\\) and Shard\\(1\\)"):
        DTensorSpec.from_dim_map(MESH22, [0, 0], [], TensorMeta((2, 3), "f4"))
    with pytest.raises(ShardingError, match="P\\(sum\\) and Shard\\(0\\)"):
        DTensorSpec.from_dim_map(MESH22, [0], [0], TensorMeta((2,), "f4"))
    with pytest.raises(ShardingError, match="dim_map entry 2 is not a mesh dim"):
        DTensorSpec.from_dim_map(MESH22, [2], [], TensorMeta((2,), "f4"))
    with pytest.raises(ShardingError, match="dim_map entry -2 is not a mesh dim"):
        DTensorSpec.from_dim_map(MESH22, [-2], [], TensorMeta((2,), "f4"))


def test_from_dim_map_rejects_out_of_range_sums():
    with pytest.raises(ShardingError):
        DTensorSpec.from_dim_map(MESH22, [-1], [2], TensorMeta((2,), "f4"))


@given(st.data())
@settings(max_examples=60)
def test_from_dim_map_round_trips(data):
    shape = data.draw(st.sampled_from([(2,), (2, 2), (2, 1, 2), (3, 2), (2, 2, 2)]))
    mesh = DeviceMesh(shape)
    ndim = data.draw(st.integers(0, 3))
    free = list(range(mesh.ndim))
    dim_map = []
    for _ in range(ndim):
        choice = data.draw(st.sampled_from([-1] + free))
        if choice != -1:
            free.remove(choice)
        dim_map.append(choice)
    sums = sorted(data.draw(st.lists(st.sampled_from(free), unique=True)) if free else [])
    meta = TensorMeta((3,) * ndim, "f4")
    spec = DTensorSpec.from_dim_map(mesh, dim_map, sums, meta)
    assert spec.dim_map == dim_map
    assert spec.sums == sums
    assert spec.num_shards == math.prod(shape[m] for m in dim_map if m != -1)
    assert DTensorSpec.from_dim_map(mesh, spec.dim_map, spec.sums, meta) == spec
    for m, p in enumerate(spec.placements):
        if m in sums:
            assert p == Partial()
        elif m in dim_map:
            assert p == Shard(dim_map.index(m))
        else:
            assert p == Replicate()


def test_wrong_placement_count_mentions_both_counts():
    with pytest.raises(ShardingError, match=r"expected 2 placements .*got 1"):
        DTensorSpec(MESH22, [Shard(0)], META46)
    with pytest.raises(ShardingError, match=r"expected 2 placements .*got 3"):
        DTensorSpec(MESH22, [Shard(0), Replicate(), Replicate()], META46)
    with pytest.raises(ShardingError, match=r"expected 1 placements .*got 0"):
        DTensorSpec(DeviceMesh((4,)), [], META46)
    with pytest.raises(ShardingError, match=r"expected 2 placements .*got 1"):
        compute_local_shape_and_global_offset((4, 6), MESH22, [Shard(0)], (0, 0))


@pytest.mark.parametrize("dim", [2, 5, -3])
def test_shard_dim_out_of_range(dim):
    with pytest.raises(ShardingError, match=rf"S\({dim}\) is out of range for a 2-d array"):
        DTensorSpec(MESH22, [Shard(dim), Replicate()], META46)
    with pytest.raises(ShardingError, match="out of range"):
        compute_local_shape_and_global_offset((4, 6), MESH22, [Replicate(), Shard(dim)], (0, 0))


def test_shard_on_0d_array():
    with pytest.raises(ShardingError, match="0-d array"):
        DTensorSpec(DeviceMesh((2,)), [Shard(0)], TensorMeta((), "f4"))
    with pytest.raises(ShardingError, match="0-d array"):
        compute_local_shape_and_global_offset((), DeviceMesh((2,)), [Shard(0)], (0,))
    # Replicate and Partial are fine on a scalar
    assert compute_local_shape_and_global_offset((), DeviceMesh((3,)), [Partial()], (2,)) == ((), ())
    spec = DTensorSpec(DeviceMesh((2,)), [Replicate()], TensorMeta((), "f4"))
    assert spec.dim_map == []


def test_negative_shard_dims_are_normalized():
    meta = TensorMeta((2, 3, 4), "f4")
    spec = DTensorSpec(MESH22, [Shard(-1), Shard(-3)], meta)
    assert spec.placements == (Shard(2), Shard(0))
    assert spec == DTensorSpec(MESH22, [Shard(2), Shard(0)], meta)
    assert spec.dim_map == [1, -1, 0]
    assert spec.shard_order == ((0, (1,)), (2, (0,)))
    assert compute_local_shape_and_global_offset((2, 3, 4), MESH22, [Shard(-1), Shard(-3)], (1, 1)) == (
        (1, 3, 2),
        (1, 0, 2),
    )


def test_spec_type_errors():
    with pytest.raises(TypeError, match="list or tuple of placements"):
        DTensorSpec(MESH22, Shard(0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got 'R'"):
        DTensorSpec(MESH22, [Shard(0), "R"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="needs a DeviceMesh"):
        DTensorSpec((2, 2), [Shard(0), Replicate()])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tensor_meta must be a TensorMeta"):
        DTensorSpec(MESH22, [Shard(0), Replicate()], (4, 6))  # type: ignore[arg-type]
    with pytest.raises(ShardingError, match="no tensor_meta"):
        DTensorSpec(MESH22, [Shard(0), Replicate()]).dim_map


def test_shard_order_default_and_validation():
    meta = TensorMeta((4, 4), "f4")
    mesh = DeviceMesh((2, 2, 2))
    spec = DTensorSpec(mesh, (Shard(0), Shard(1), Shard(0)), meta)
    assert spec.shard_order == ((0, (0, 2)), (1, (1,)))
    assert str(spec) == "S(0)S(1)S(0)"
    custom = DTensorSpec(mesh, (Shard(0), Shard(1), Shard(0)), meta, shard_order=((1, (1,)), (0, (2, 0))))
    assert custom.shard_order == ((0, (2, 0)), (1, (1,)))
    assert custom != spec
    assert str(custom) == "S(0)S(1)S(0)[order 0:[2, 0],1:[1]]"
    bad_orders = [
        ((0, (0,)), (1, (1,))),  # mesh dim 2 missing
        ((0, (0, 2, 1)), (1, (1,))),  # mesh dim 1 shards dim 1, not dim 0
        ((0, (0, 0)), (1, (1,))),  # duplicate, mesh dim 2 missing
        ((0, (2, 0)), (1, (1,)), (2, (1,))),  # tensor dim 2 is not sharded
        ((0, (0,)), (0, (2,)), (1, (1,))),  # tensor dim 0 split into two entries
    ]
    for order in bad_orders:
        with pytest.raises(ShardingError, match="does not match placements S\\(0\\)S\\(1\\)S\\(0\\)"):
            DTensorSpec(mesh, (Shard(0), Shard(1), Shard(0)), meta, shard_order=order)
    with pytest.raises(ShardingError, match="does not match"):
        DTensorSpec(MESH22, (Shard(1), Replicate()), meta, shard_order=((0, (0,)),))


def test_spec_local_blocks_follow_the_shard_order():
    meta = TensorMeta((5, 4), "f4")
    default = DTensorSpec(MESH22, (Shard(0), Shard(0)), meta)
    reverse = DTensorSpec(MESH22, (Shard(0), Shard(0)), meta, shard_order=((0, (1, 0)),))
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [default.local_shape_and_offset(c) for c in coords] == [
        ((2, 4), (0, 0)),
        ((1, 4), (2, 0)),
        ((1, 4), (3, 0)),
        ((1, 4), (4, 0)),
    ]
    assert [reverse.local_shape_and_offset(c) for c in coords] == [
        ((2, 4), (0, 0)),
        ((1, 4), (3, 0)),
        ((1, 4), (2, 0)),
        ((1, 4), (4, 0)),
    ]
    assert [default.local_shape_of_rank(r) for r in range(4)] == [(2, 4), (1, 4), (1, 4), (1, 4)]


# ---------------------------------------------------------------------------
# compute_local_shape_and_global_offset: concrete cases
# ---------------------------------------------------------------------------


def test_uneven_1d_follows_torch_chunk():
    mesh = DeviceMesh((4,))
    blocks = [compute_local_shape_and_global_offset((5,), mesh, [Shard(0)], (i,)) for i in range(4)]
    # torch.chunk: 2, 2, 1, 0 (numpy.array_split would give 2, 1, 1, 1);
    # the empty shard's offset is clamped to n = 5
    assert blocks == [((2,), (0,)), ((2,), (2,)), ((1,), (4,)), ((0,), (5,))]
    assert dt.compute_local_shape_and_global_offset((1,), mesh, [Shard(0)], (3,)) == ((0,), (1,))
    assert [compute_local_shape_and_global_offset((6,), mesh, [Shard(0)], (i,)) for i in range(4)] == [
        ((2,), (0,)),
        ((2,), (2,)),
        ((2,), (4,)),
        ((0,), (6,)),
    ]
    assert [compute_local_shape_and_global_offset((0,), mesh, [Shard(0)], (i,))[0] for i in range(4)] == [(0,)] * 4


def test_nested_s0_s0_on_2x2_mesh():
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    # 8 rows: outer mesh dim first, so ranks 0..3 hold rows 0-1, 2-3, 4-5, 6-7
    assert [compute_local_shape_and_global_offset((8, 3), MESH22, [Shard(0), Shard(0)], c) for c in coords] == [
        ((2, 3), (0, 0)),
        ((2, 3), (2, 0)),
        ((2, 3), (4, 0)),
        ((2, 3), (6, 0)),
    ]
    # 5 rows: chunk(5, 2) = 3, 2; then chunk(3, 2) = 2, 1 and chunk(2, 2) = 1, 1
    assert [compute_local_shape_and_global_offset((5, 4), MESH22, [Shard(0), Shard(0)], c) for c in coords] == [
        ((2, 4), (0, 0)),
        ((1, 4), (2, 0)),
        ((1, 4), (3, 0)),
        ((1, 4), (4, 0)),
    ]
    # 3 rows: chunk(3, 2) = 2, 1; chunk(2, 2) = 1, 1; chunk(1, 2) = 1, 0
    assert [compute_local_shape_and_global_offset((3,), MESH22, [Shard(0), Shard(0)], c) for c in coords] == [
        ((1,), (0,)),
        ((1,), (1,)),
        ((1,), (2,)),
        ((0,), (3,)),
    ]
    # an explicit shard order splits on mesh dim 1 first
    assert [
        compute_local_shape_and_global_offset((8, 3), MESH22, [Shard(0), Shard(0)], c, shard_order=((0, (1, 0)),))
        for c in coords
    ] == [((2, 3), (0, 0)), ((2, 3), (4, 0)), ((2, 3), (2, 0)), ((2, 3), (6, 0))]


def test_two_tensor_dims_and_replicate_partial():
    mesh = DeviceMesh((2, 3))
    assert compute_local_shape_and_global_offset((4, 6), mesh, [Shard(1), Shard(0)], (1, 2)) == ((0, 3), (4, 3))
    assert compute_local_shape_and_global_offset((4, 6), mesh, [Shard(1), Shard(0)], (0, 1)) == ((2, 3), (2, 0))
    assert compute_local_shape_and_global_offset((4, 6), mesh, [Replicate(), Shard(1)], (1, 2)) == ((4, 2), (0, 4))
    for c in itertools.product(range(2), range(3)):
        assert compute_local_shape_and_global_offset((4, 6), mesh, [Replicate(), Partial()], c) == ((4, 6), (0, 0))


def test_bad_coordinates():
    with pytest.raises(ShardingError, match=r"coordinate \(0,\) is not on mesh \(2, 2\)"):
        compute_local_shape_and_global_offset((4,), MESH22, [Shard(0), Replicate()], (0,))
    with pytest.raises(ShardingError, match=r"coordinate \(0, 2\) is not on mesh \(2, 2\)"):
        compute_local_shape_and_global_offset((4,), MESH22, [Shard(0), Replicate()], (0, 2))
    with pytest.raises(ShardingError, match="not on mesh"):
        compute_local_shape_and_global_offset((4,), MESH22, [Shard(0), Replicate()], (-1, 0))


def test_from_normal_gives_the_validated_spec_without_validating():
    meta = TensorMeta((4, 4), "f4")
    mesh = DeviceMesh((2, 2, 2))
    order = ((0, (2, 0)), (1, (1,)))
    fields = dict(mesh=mesh, placements=(Shard(0), Shard(1), Shard(0)), tensor_meta=meta, shard_order=order)
    made = DTensorSpec.from_normal(**fields)
    assert made is DTensorSpec(mesh, [Shard(0), Shard(1), Shard(0)], meta, shard_order=order)
    assert DTensorSpec.from_normal(**fields) is made  # one dict lookup the second time
    other = dict(fields, tensor_meta=TensorMeta((6, 4), "f4"))  # built if no test made it before, then interned
    assert DTensorSpec.from_normal(**other) is DTensorSpec(mesh, other["placements"], other["tensor_meta"], order)
    with pytest.raises(TypeError, match="expected the fields of _key"):  # fields out of _key() order
        DTensorSpec.from_normal(placements=fields["placements"], mesh=mesh, tensor_meta=TensorMeta((7, 4), "f4"),
                                shard_order=order)


def test_shard_order_inconsistent_with_placements_is_rejected():
    placements = [Shard(0), Replicate()]
    with pytest.raises(ShardingError):
        DTensorSpec(MESH22, placements, TensorMeta((4, 4), "f4"), shard_order=((1, (1,)),))
    with pytest.raises(ShardingError):
        compute_local_shape_and_global_offset((4, 4), MESH22, placements, (1, 1), shard_order=((1, (1,)),))


def test_negative_global_shape_is_rejected():
    with pytest.raises(ShardingError):
        TensorMeta((-3,), "f4")
    with pytest.raises(ShardingError):
        compute_local_shape_and_global_offset((-3,), DeviceMesh((2,)), [Shard(0)], (1,))


# ---------------------------------------------------------------------------
# chunk sizes per torch.chunk
# ---------------------------------------------------------------------------


def test_chunk_sizes_concrete():
    assert chunk_sizes(5, 4) == (2, 2, 1, 0)
    assert chunk_sizes(6, 4) == (2, 2, 2, 0)
    assert chunk_sizes(1, 4) == (1, 0, 0, 0)
    assert chunk_sizes(0, 3) == (0, 0, 0)
    assert chunk_sizes(8, 4) == (2, 2, 2, 2)
    assert chunk_sizes(7, 3) == (3, 3, 1)
    assert chunk_sizes(10, 4) == (3, 3, 3, 1)
    assert chunk_size_and_offset(5, 4, 2) == (1, 4)
    assert chunk_size_and_offset(5, 4, 3) == (0, 5)
    with pytest.raises(ValueError):
        chunk_sizes(4, 0)


@given(st.integers(0, 40), st.integers(1, 9))
@settings(max_examples=100)
def test_chunk_sizes_match_torch_chunk(n, k):
    sizes = list(chunk_sizes(n, k))
    full = -(-n // k)
    assert sum(sizes) == n
    assert len(sizes) == k
    # every chunk is ceil(n/k) except a tail: [full]*q + [one shorter] + [0]*...
    assert all(s == full for s in sizes[: n // full]) if full else sizes == [0] * k
    assert all(0 <= s <= full for s in sizes)
    assert sizes == sorted(sizes, reverse=True)
    assert sum(1 for s in sizes if 0 < s < full) <= 1
    assert sizes == torch_chunk_sizes(n, k)
    offsets = torch_chunk_offsets(n, k)
    mesh = DeviceMesh((k,))
    for i in range(k):
        assert chunk_size_and_offset(n, k, i) == (sizes[i], offsets[i])
        assert compute_local_shape_and_global_offset((n,), mesh, [Shard(0)], (i,)) == ((sizes[i],), (offsets[i],))


# ---------------------------------------------------------------------------
# local shards tile the global array exactly once
# ---------------------------------------------------------------------------


@st.composite
def sharding_cases(draw):
    """(global shape, mesh, placements, shard_order or None) with nested sharding and random orders."""
    ndim_mesh = draw(st.integers(1, 3))
    mesh_shape = []
    budget = 8
    for _ in range(ndim_mesh):
        size = draw(st.integers(1, budget))
        mesh_shape.append(size)
        budget //= size
    mesh = DeviceMesh(tuple(mesh_shape))
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 7, 8]), min_size=ndim, max_size=ndim)))
    options = [st.just(Replicate()), st.sampled_from([Partial(op) for op in ("sum", "avg", "max", "min")])]
    if ndim:
        options.append(st.integers(-ndim, ndim - 1).map(Shard))
        options.append(st.integers(-ndim, ndim - 1).map(Shard))  # shard more often
    placements = [draw(st.one_of(options)) for _ in range(ndim_mesh)]
    order = None
    if draw(st.booleans()):
        by_dim: dict[int, list[int]] = {}
        for m, p in enumerate(placements):
            if isinstance(p, Shard):
                by_dim.setdefault(p.dim % ndim, []).append(m)
        order = tuple((d, tuple(draw(st.permutations(ms)))) for d, ms in sorted(by_dim.items()))
    return shape, mesh, placements, order


@given(sharding_cases())
@settings(max_examples=100)
def test_local_shards_tile_the_global_shape_exactly_once(case):
    shape, mesh, placements, order = case
    counts = np.zeros(shape, dtype=np.int64)
    sharded_mesh_dims = {m for m, p in enumerate(placements) if isinstance(p, Shard)}
    meta = TensorMeta(shape, "f4")
    spec = DTensorSpec(mesh, placements, meta, shard_order=order)
    for coordinate in itertools.product(*(range(s) for s in mesh.shape)):
        local, offset = compute_local_shape_and_global_offset(shape, mesh, placements, coordinate, shard_order=order)
        assert (local, offset) == spec.local_shape_and_offset(coordinate)
        assert (local, offset) == reference_block(shape, mesh.shape, placements, coordinate, order)
        assert len(local) == len(offset) == len(shape)
        assert all(0 <= o and 0 <= n and o + n <= g for o, n, g in zip(offset, local, shape))
        # count each block once per distinct sharded coordinate
        if any(c != 0 for m, c in enumerate(coordinate) if m not in sharded_mesh_dims):
            continue
        counts[tuple(slice(o, o + n) for o, n in zip(offset, local))] += 1
    assert (counts == 1).all(), counts
    # ranks along a Replicate/Partial mesh dim hold the same block
    for rank in range(mesh.size()):
        coordinate = mesh.coordinate_of(rank)
        base = tuple(0 if m not in sharded_mesh_dims else c for m, c in enumerate(coordinate))
        assert spec.local_shape_and_offset(coordinate) == spec.local_shape_and_offset(base)
    assert spec.num_shards == math.prod(mesh.shape[m] for m in sharded_mesh_dims)
