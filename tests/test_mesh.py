"""Pure-metadata tests for ``DeviceMesh``: sizes, names, coordinates, rank groups,
sub-meshes, flatten and unflatten.  No communication is involved anywhere.

Mesh ranks are row-major: on a mesh of shape ``(a, b, c)`` rank ``r`` sits at
``np.unravel_index(r, (a, b, c))``; the rank groups along mesh dim ``d`` are the
lines of ``np.arange(n).reshape(shape)`` along axis ``d``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np import DeviceMesh, ShardingError


def numpy_groups(shape, world_size, dims):
    """Rank groups over ``dims`` (outer first) of a row-major mesh ``shape`` tiled in ``world_size``."""
    grid = np.arange(world_size).reshape((world_size // math.prod(shape),) + tuple(shape))
    dims = [d + 1 for d in dims]
    rest = [a for a in range(grid.ndim) if a not in dims]
    lines = np.transpose(grid, rest + dims).reshape(-1, math.prod(grid.shape[d] for d in dims))
    return lines.tolist()


def assert_partition(groups, world_size, group_size):
    flat = [r for g in groups for r in g]
    assert sorted(flat) == list(range(world_size)), groups
    assert all(len(g) == group_size for g in groups), groups
    assert len(groups) == world_size // group_size


# ---------------------------------------------------------------------------
# sizes and names
# ---------------------------------------------------------------------------


def test_shape_ndim_size_and_names():
    mesh = DeviceMesh((2, 3), dim_names=("dp", "tp"))
    assert mesh.shape == (2, 3)
    assert mesh.ndim == 2
    assert mesh.size() == 6
    assert mesh.size(0) == 2
    assert mesh.size(1) == 3
    assert mesh.size(-1) == 3
    assert mesh.size("dp") == 2
    assert mesh.size("tp") == 3
    assert mesh.dim_names == ("dp", "tp")
    assert mesh.world_size == 6
    assert DeviceMesh((4,)).dim_names is None
    assert DeviceMesh(4).shape == (4,)
    assert DeviceMesh([2, 2], ["a", "b"]).dim_names == ("a", "b")
    assert DeviceMesh([2, 2]).shape == (2, 2)


def test_top_level_constructor_matches_the_contract():
    mesh = dt.DeviceMesh((2, 2), dim_names=("dp", "tp"))
    assert mesh.rank_groups("dp") == [[0, 2], [1, 3]]
    assert mesh.rank_groups("tp") == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(shape=(2, 0)), "positive ints"),
        (dict(shape=()), "positive ints"),
        (dict(shape=(2, -1)), "positive ints"),
        (dict(shape=(2.0, 2)), "positive ints"),
        (dict(shape=(2, 2), dim_names=("dp",)), "expected 2 dim names"),
        (dict(shape=(2, 2), dim_names=("dp", "dp")), "unique"),
        (dict(shape=(2, 2), dim_names=("dp", 3)), "unique strings"),
        (dict(shape=(2, 2), backend="nccl"), "backend"),
        (dict(shape=(2, 2), world_size=3), "world size 3"),
    ],
)
def test_constructor_rejects_bad_input(kwargs, pattern):
    with pytest.raises(ShardingError, match=pattern):
        DeviceMesh(**kwargs)


def test_mesh_is_a_frozen_hashable_value():
    a = DeviceMesh((2, 2), ("dp", "tp"))
    b = DeviceMesh((2, 2), ("dp", "tp"))
    assert a == b
    assert hash(a) == hash(b)
    assert a != DeviceMesh((2, 2), ("x", "y"))
    assert a != DeviceMesh((4,))
    assert a != DeviceMesh((2, 2))
    assert len({a, b, DeviceMesh((2, 2))}) == 2
    with pytest.raises(AttributeError):
        a.shape = (4,)  # type: ignore[misc]


def test_dim_errors():
    mesh = DeviceMesh((2, 2), ("dp", "tp"))
    with pytest.raises(ShardingError, match="no dim named 'pp'"):
        mesh.rank_groups("pp")
    with pytest.raises(ShardingError, match=r"\[0, 2\)"):
        mesh.rank_groups(2)
    with pytest.raises(ShardingError, match=r"\[0, 2\)"):
        mesh.size(-3)
    with pytest.raises(ShardingError, match="no dim named"):
        DeviceMesh((2, 2)).rank_groups("dp")


# ---------------------------------------------------------------------------
# coordinates and rank groups
# ---------------------------------------------------------------------------


def test_rank_groups_2x2():
    mesh = DeviceMesh((2, 2))
    assert mesh.rank_groups(0) == [[0, 2], [1, 3]]
    assert mesh.rank_groups(1) == [[0, 1], [2, 3]]
    assert mesh.rank_groups(-1) == [[0, 1], [2, 3]]
    named = DeviceMesh((2, 2), ("dp", "tp"))
    assert named.rank_groups("dp") == [[0, 2], [1, 3]]
    assert named.rank_groups("tp") == [[0, 1], [2, 3]]


def test_rank_groups_2x3_and_2x4():
    mesh = DeviceMesh((2, 3))
    assert mesh.rank_groups(0) == [[0, 3], [1, 4], [2, 5]]
    assert mesh.rank_groups(1) == [[0, 1, 2], [3, 4, 5]]
    mesh = DeviceMesh((2, 4), ("dp", "tp"))
    assert mesh.rank_groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh["tp"].rank_groups(0) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_rank_groups_2x2x2():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    assert mesh.rank_groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh.rank_groups("cp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.rank_groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.groups((0, 2)) == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert DeviceMesh((2, 2)).groups((1, 0)) == ((0, 2, 1, 3),)


def test_coordinate_of():
    mesh = DeviceMesh((2, 3))
    assert [mesh.coordinate_of(r) for r in range(6)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    mesh3 = DeviceMesh((2, 2, 2))
    assert mesh3.coordinate_of(5) == (1, 0, 1)
    assert mesh3.coordinate_of(6) == (1, 1, 0)
    assert DeviceMesh((1, 3, 1)).coordinate_of(2) == (0, 2, 0)
    assert [mesh.rank_at(mesh.coordinate_of(r)) for r in range(6)] == list(range(6))


@pytest.mark.parametrize("rank", [-1, 6, 100, 1.0, "0", True])
def test_coordinate_of_rejects_bad_ranks(rank):
    with pytest.raises(ShardingError, match=r"rank must be in \[0, 6\)"):
        DeviceMesh((2, 3)).coordinate_of(rank)


# ---------------------------------------------------------------------------
# sub-meshes
# ---------------------------------------------------------------------------


def test_submesh_single_dim_keeps_global_ranks():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    dp = mesh["dp"]
    assert dp.shape == (2,)
    assert dp.dim_names == ("dp",)
    assert dp.world_size == 8
    assert dp.size() == 2
    assert dp.rank_groups(0) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert dp.rank_groups("dp") == mesh.rank_groups("dp")
    assert mesh["cp"].rank_groups(0) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh["tp"].rank_groups(0) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # a rank's coordinate in the sub-mesh is its position along that dim
    assert [dp.coordinate_of(r) for r in range(8)] == [(r // 4,) for r in range(8)]
    assert [mesh["cp"].coordinate_of(r) for r in range(8)] == [((r // 2) % 2,) for r in range(8)]


def test_submesh_two_dims():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    sub = mesh["dp", "tp"]
    assert sub.shape == (2, 2)
    assert sub.dim_names == ("dp", "tp")
    assert sub.world_size == 8
    assert sub.rank_groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert sub.rank_groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert sub.coordinate_of(5) == (1, 1)
    assert sub.coordinate_of(3) == (0, 1)
    full = mesh["dp", "cp", "tp"]
    assert [full.rank_groups(d) for d in range(3)] == [mesh.rank_groups(d) for d in range(3)]


def test_submesh_of_a_submesh():
    mesh = DeviceMesh((2, 3, 2), ("a", "b", "c"))
    assert mesh["a", "c"]["c"].rank_groups(0) == mesh.rank_groups("c")
    assert mesh["b", "c"]["b"].rank_groups(0) == mesh.rank_groups("b")


def test_submesh_errors():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    with pytest.raises(ShardingError, match=r"mesh order \('dp', 'cp', 'tp'\), got \('tp', 'dp'\)"):
        mesh["tp", "dp"]
    with pytest.raises(ShardingError, match="distinct"):
        mesh["dp", "dp"]
    with pytest.raises(ShardingError, match="no dim named 'pp'"):
        mesh["pp"]
    with pytest.raises(ShardingError, match="no dim named 'pp'"):
        mesh["dp", "pp"]
    with pytest.raises(ShardingError, match="no dim names"):
        DeviceMesh((2, 2))["dp"]


# ---------------------------------------------------------------------------
# flatten and unflatten
# ---------------------------------------------------------------------------


def test_flatten_required_example():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    flat = mesh["dp", "cp"].flatten()
    assert flat.shape == (4,)
    assert flat.dim_names == ("dp_cp",)
    assert flat.world_size == 8
    assert flat.rank_groups(0) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert flat.rank_groups("dp_cp") == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_flatten_non_adjacent_and_full():
    mesh = DeviceMesh((2, 2, 2), ("a", "b", "c"))
    assert mesh["a", "c"].flatten().rank_groups(0) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert mesh["b", "c"].flatten("bc").dim_names == ("bc",)
    assert mesh["b", "c"].flatten("bc").rank_groups("bc") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    whole = mesh.flatten()
    assert whole.shape == (8,)
    assert whole.dim_names == ("a_b_c",)
    assert whole.rank_groups(0) == [list(range(8))]
    assert DeviceMesh((2, 3)).flatten().dim_names is None
    assert DeviceMesh((2, 3)).flatten().rank_groups(0) == [[0, 1, 2, 3, 4, 5]]
    assert [whole.coordinate_of(r) for r in range(8)] == [(r,) for r in range(8)]
    # on a 2x3x2 mesh the (a, c) sub-mesh is not contiguous
    odd = DeviceMesh((2, 3, 2), ("a", "b", "c"))
    assert odd["a", "c"].flatten().rank_groups(0) == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]


def test_unflatten():
    mesh = DeviceMesh((8,), ("world",))
    split = mesh.unflatten(0, (2, 4), ("dp", "tp"))
    assert split.shape == (2, 4)
    assert split.dim_names == ("dp", "tp")
    assert split.rank_groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert split.rank_groups("tp") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split == DeviceMesh((2, 4), ("dp", "tp"))
    by_name = mesh.unflatten("world", (2, 2, 2), ("a", "b", "c"))
    assert by_name == DeviceMesh((2, 2, 2), ("a", "b", "c"))
    inner = DeviceMesh((2, 4), ("dp", "tp")).unflatten("tp", (2, 2), ("x", "y"))
    assert inner.shape == (2, 2, 2)
    assert inner.dim_names == ("dp", "x", "y")
    assert inner.rank_groups("x") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert DeviceMesh((6,)).unflatten(0, (3, 2)).rank_groups(0) == [[0, 2, 4], [1, 3, 5]]


def test_unflatten_of_flattened_submesh_gives_back_the_groups():
    mesh = DeviceMesh((2, 2, 2), ("dp", "cp", "tp"))
    for names in [("dp", "cp"), ("dp", "tp"), ("cp", "tp")]:
        sub = mesh[names]
        back = sub.flatten().unflatten(0, sub.shape, names)
        assert back.rank_groups(0) == sub.rank_groups(0) == mesh.rank_groups(names[0])
        assert back.rank_groups(1) == sub.rank_groups(1) == mesh.rank_groups(names[1])
        assert back == sub
    # and the other way round: the flattened dp_tp of a 2x3x2 mesh split as 4x1
    odd = DeviceMesh((2, 3, 2), ("a", "b", "c"))
    split = odd["a", "c"].flatten().unflatten(0, (4, 1), ("x", "y"))
    assert split.rank_groups("x") == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    assert split.rank_groups("y") == [[r] for r in range(12)]


def test_unflatten_errors():
    mesh = DeviceMesh((8,), ("world",))
    with pytest.raises(ShardingError, match=r"sizes \(3, 2\) must multiply to mesh dim size 8"):
        mesh.unflatten(0, (3, 2), ("a", "b"))
    with pytest.raises(ShardingError, match="must multiply"):
        mesh.unflatten(0, (), ())
    with pytest.raises(ShardingError, match="name the 2 new dims"):
        mesh.unflatten(0, (2, 4))
    with pytest.raises(ShardingError, match="expected 2 dim names"):
        mesh.unflatten(0, (2, 4), ("a",))
    with pytest.raises(ShardingError, match="no dim named"):
        mesh.unflatten("tp", (2, 4), ("a", "b"))
    with pytest.raises(ShardingError, match="unique"):
        DeviceMesh((2, 4), ("dp", "tp")).unflatten("tp", (2, 2), ("dp", "x"))


def test_flatten_unflatten_round_trip_of_a_single_rank_mesh():
    one = DeviceMesh((1,), ("a",))
    assert one.flatten().rank_groups(0) == [[0]]
    assert one.flatten().unflatten(0, (1,), ("a",)) == one


def test_flatten_unflatten_round_trip_is_equal_for_nontrivial_meshes():
    for shape in [(2, 1, 3), (1, 4), (4, 1), (2, 3), (2, 2, 2)]:
        names = tuple("abc"[: len(shape)])
        mesh = DeviceMesh(shape, names)
        assert mesh.flatten().unflatten(0, shape, names) == mesh


def test_repr_names_shape_and_dim_names():
    text = repr(DeviceMesh((2, 3), ("dp", "tp")))
    assert text.startswith("DeviceMesh(")
    assert "(2, 3)" in text and "'dp'" in text and "'tp'" in text
    assert "world_size=8" in repr(DeviceMesh((2, 2, 2), ("a", "b", "c"))["a"])


# ---------------------------------------------------------------------------
# hypothesis properties
# ---------------------------------------------------------------------------

NAMES = ("a", "b", "c")


@st.composite
def mesh_shapes(draw):
    """Shapes of 1 to 3 dims with at most 8 ranks (sizes 1 included)."""
    ndim = draw(st.integers(1, 3))
    shape = []
    budget = 8
    for _ in range(ndim):
        size = draw(st.integers(1, budget))
        shape.append(size)
        budget //= size
    return tuple(shape)


@st.composite
def meshes_and_views(draw):
    """(full mesh, view, dims of the full mesh the view covers, flattened?)."""
    shape = draw(mesh_shapes())
    mesh = DeviceMesh(shape, NAMES[: len(shape)])
    dims = sorted(draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True)))
    view = mesh[tuple(NAMES[d] for d in dims)]
    flat = draw(st.booleans())
    if flat:
        view = view.flatten()
    return mesh, view, tuple(dims), flat


@given(mesh_shapes())
@settings(max_examples=60)
def test_rank_groups_partition_the_world(shape):
    mesh = DeviceMesh(shape)
    n = math.prod(shape)
    for d in range(len(shape)):
        groups = mesh.rank_groups(d)
        assert_partition(groups, n, shape[d])
        assert groups == numpy_groups(shape, n, [d])


@given(meshes_and_views())
@settings(max_examples=80)
def test_submesh_and_flattened_groups_partition_the_world(case):
    mesh, view, dims, flat = case
    n = mesh.size()
    assert view.world_size == n
    if flat:
        assert view.shape == (math.prod(mesh.shape[d] for d in dims),)
        groups = view.rank_groups(0)
        assert_partition(groups, n, view.size())
        # each group is row-major over the chosen dims (outer first), groups in
        # row-major order of the other dims
        assert groups == numpy_groups(mesh.shape, n, list(dims))
    else:
        assert view.shape == tuple(mesh.shape[d] for d in dims)
        for i, d in enumerate(dims):
            groups = view.rank_groups(i)
            assert_partition(groups, n, mesh.shape[d])
            assert groups == mesh.rank_groups(d)


@given(meshes_and_views())
@settings(max_examples=80)
def test_coordinate_of_is_consistent_with_rank_groups(case):
    mesh, view, _, _ = case
    for m in (mesh, view):
        for d in range(m.ndim):
            for group in m.rank_groups(d):
                for position, rank in enumerate(group):
                    assert m.coordinate_of(rank)[d] == position
    for r in range(mesh.size()):
        assert mesh.coordinate_of(r) == tuple(int(c) for c in np.unravel_index(r, mesh.shape))
        assert mesh.rank_at(mesh.coordinate_of(r)) == r


@given(meshes_and_views())
@settings(max_examples=60)
def test_unflatten_of_flatten_gives_back_the_groups(case):
    mesh, view, dims, flat = case
    if flat:
        return
    names = tuple(NAMES[d] for d in dims)
    back = view.flatten().unflatten(0, view.shape, names)
    assert back.shape == view.shape
    assert back.dim_names == names
    for d in range(view.ndim):
        assert back.rank_groups(d) == view.rank_groups(d)
    assert [back.coordinate_of(r) for r in range(mesh.size())] == [
        view.coordinate_of(r) for r in range(mesh.size())
    ]


@given(mesh_shapes(), st.data())
@settings(max_examples=60)
def test_unflatten_a_dim_matches_numpy_reshape(shape, data):
    """Splitting one dim of a row-major mesh gives the mesh of the refined shape."""
    mesh = DeviceMesh(shape)
    d = data.draw(st.integers(0, len(shape) - 1))
    size = shape[d]
    first = data.draw(st.sampled_from([f for f in range(1, size + 1) if size % f == 0]))
    split = mesh.unflatten(d, (first, size // first))
    refined = shape[:d] + (first, size // first) + shape[d + 1 :]
    assert split.shape == refined
    for e in range(len(refined)):
        assert split.rank_groups(e) == numpy_groups(refined, mesh.size(), [e])
