"""The redistribute planner: pure steps, fewest collectives, never more than the greedy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np import DeviceMesh, DTensorSpec, Partial, Replicate, Shard, TensorMeta
from dtensor_np.planner import COLLECTIVE_KINDS, count_collectives, greedy_collectives

from strategies import factorizations, placements, tensor_shapes

R = Replicate()


def spec(mesh_shape, shape, placements, dtype="float32", order=None):
    return DTensorSpec(DeviceMesh(mesh_shape), tuple(placements), TensorMeta(shape, dtype), order)


def n_collectives(src, dst):
    return count_collectives(dt.plan_redistribute(src, dst))


@pytest.mark.parametrize(
    "mesh_shape, shape, src, dst, expected",
    [
        ((2, 2), (8, 8), [Shard(0), Shard(1)], [Shard(0), Shard(0)], 1),
        ((2, 2), (8, 8), [Shard(0), Shard(1)], [Shard(1), Shard(0)], 2),
        ((2, 2, 2), (8, 8, 8), [Shard(0), Shard(1), Shard(2)], [Shard(2), Shard(1), Shard(0)], 2),
        ((4, 1), (8, 8), [Shard(0), R], [Shard(0), Shard(1)], 0),
        ((4, 1), (8, 8), [Shard(0), Shard(1)], [Shard(0), R], 0),
        ((4, 1), (8, 8), [Shard(0), Partial()], [Shard(0), Shard(1)], 0),
        ((2, 2), (8, 8), [Shard(0), Shard(0)], [R, R], 1),  # merged: one all_gather over all 4 ranks
        ((2, 2), (8, 8), [Partial(), Partial()], [R, R], 1),  # merged all_reduce
        ((2, 2), (8, 8), [R, R], [Partial(), Shard(1)], 0),  # local chunk and partition
        ((4,), (9,), [Shard(0)], [R], 1),
        ((4,), (9, 3), [Shard(0)], [Shard(1)], 1),  # all_to_all, never gather-then-chunk
        ((4,), (9,), [Partial()], [Shard(0)], 1),  # reduce_scatter
    ],
)
def test_collective_counts_of_known_cases(mesh_shape, shape, src, dst, expected):
    s, d = spec(mesh_shape, shape, src), spec(mesh_shape, shape, dst)
    assert n_collectives(s, d) == expected
    assert n_collectives(s, d) <= greedy_collectives(s, d)


def test_shard_to_shard_is_one_all_to_all():
    plan = dt.plan_redistribute(spec((4,), (8, 8), [Shard(0)]), spec((4,), (8, 8), [Shard(1)]))
    assert [s.kind for s in plan] == ["all_to_all"]
    assert (plan[0].mesh_dim, plan[0].src, plan[0].dst) == (0, Shard(0), Shard(1))


def test_merged_all_gather_names_its_mesh_dims_in_split_order():
    plan = dt.plan_redistribute(spec((2, 2), (8,), [Shard(0), Shard(0)]), spec((2, 2), (8,), [R, R]))
    assert len(plan) == 1 and plan[0].kind == "all_gather" and plan[0].mesh_dim == (0, 1)
    reverse = spec((2, 2), (8,), [Shard(0), Shard(0)], order=((0, (1, 0)),))
    plan = dt.plan_redistribute(reverse, spec((2, 2), (8,), [R, R]))
    assert plan[0].mesh_dim == (1, 0)


def test_explain_shows_the_state_chain():
    s = spec((2, 2), (8, 8), [Shard(0), R])
    plan = dt.plan_redistribute(s, spec((2, 2), (8, 8), [R, Shard(1)]))
    text = dt.explain(plan, s)
    assert text.split("->")[0] == "S(0)R" and text.split("->")[-1] == "RS(1)"
    assert len(text.split("->")) == len(plan) + 1


def test_plans_are_cached_on_specs_not_ranks():
    s, d = spec((2, 2), (6, 6), [Shard(0), Shard(1)]), spec((2, 2), (6, 6), [R, R])
    assert dt.plan_redistribute(s, d) is dt.plan_redistribute(spec((2, 2), (6, 6), [Shard(0), Shard(1)]), d)


@pytest.mark.parametrize(
    "src, dst, message",
    [
        ([Partial("sum")], [Partial("max")], "different reduce ops"),
        ([Partial("max")], [Partial("min")], "different reduce ops"),
    ],
)
def test_refused_transitions(src, dst, message):
    with pytest.raises(dt.ShardingError, match=message):
        dt.plan_redistribute(spec((2,), (4,), src), spec((2,), (4,), dst))


@pytest.mark.parametrize("op", ["sum", "avg", "max", "min"])
def test_shard_to_partial_goes_through_replicate(op):
    """A new Partial comes from Replicate: the planner plans S -> R -> P itself (one all_gather, one partition)."""
    src, dst = spec((2, 2), (6, 5), [Shard(0), Shard(1)]), spec((2, 2), (6, 5), [Partial(op), Shard(1)])
    plan = dt.plan_redistribute(src, dst)
    assert [(s.kind, s.mesh_dims) for s in plan] == [("all_gather", (0,)), ("partition", (0,))], plan
    a = np.arange(30.0).reshape(6, 5)
    x = dt.distribute_tensor(a, dt.DeviceMesh((2, 2)), [Shard(0), Shard(1)])
    y = x.redistribute([Partial(op), Shard(1)])
    assert y.placements == (Partial(op), Shard(1))
    np.testing.assert_array_equal(y.full_tensor(), a)


def test_different_meshes_or_shapes_are_refused():
    with pytest.raises(dt.ShardingError, match="different meshes"):
        dt.plan_redistribute(spec((2,), (4,), [R]), spec((4,), (4,), [R]))
    with pytest.raises(dt.ShardingError, match="keeps the global shape"):
        dt.plan_redistribute(spec((2,), (4,), [R]), spec((2,), (5,), [R]))


@st.composite
def spec_pairs(draw):
    world = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    mesh_shape = draw(st.sampled_from(factorizations(world)))
    shape = draw(tensor_shapes(1, 3, max_side=9))
    ops = draw(st.sampled_from([("sum",), ("max",), ("avg",)]))
    src = draw(placements(len(mesh_shape), len(shape), ops=ops))
    dst = draw(placements(len(mesh_shape), len(shape), ops=ops))
    # Partials of different reduce ops do not convert (a new Partial comes from Replicate, Shard through it)
    dst = tuple(
        d if not isinstance(d, Partial) or s == d or not isinstance(s, Partial) or mesh_shape[m] == 1 else R
        for m, (s, d) in enumerate(zip(src, dst))
    )
    src = tuple(
        s if not (isinstance(s, Partial) and isinstance(dst[m], Partial) and s != dst[m] and mesh_shape[m] > 1) else R
        for m, s in enumerate(src)
    )
    return spec(mesh_shape, shape, src), spec(mesh_shape, shape, dst)


@settings(max_examples=150)
@given(spec_pairs())
def test_never_more_collectives_than_greedy(pair):
    src, dst = pair
    plan = dt.plan_redistribute(src, dst)
    assert count_collectives(plan) <= greedy_collectives(src, dst)
    # the plan ends exactly at the target placements
    final = plan[-1].placements if plan else src.placements
    assert all(
        a == b or src.mesh.shape[m] == 1 for m, (a, b) in enumerate(zip(final, dst.placements))
    ), (dt.explain(plan, src), dst)
    for step in plan:
        assert step.is_collective == (step.kind in COLLECTIVE_KINDS)
        assert all(0 <= m < src.mesh.ndim for m in step.mesh_dims)


def test_search_beats_greedy_somewhere():
    pairs = [
        (spec((2, 2), (8, 8), [Shard(0), Shard(0)]), spec((2, 2), (8, 8), [R, R])),
        (spec((2, 2, 2), (8, 8), [Partial()] * 3), spec((2, 2, 2), (8, 8), [R] * 3)),
    ]
    for s, d in pairs:
        assert n_collectives(s, d) < greedy_collectives(s, d)
        assert n_collectives(s, d) == 1


def test_uneven_nested_specs_plan_and_local_shapes_tile():
    s = spec((2, 2), (5, 3), [Shard(0), Shard(0)])
    shapes = [s.local_shape_of_rank(r)[0] for r in range(4)]
    assert shapes == [2, 1, 1, 1]  # 5 -> 3,2 -> (2,1),(1,1)
    assert math.fsum(shapes) == 5
