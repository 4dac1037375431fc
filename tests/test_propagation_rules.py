"""Pure sharding-propagation rules: ``einop_rule``, ``pointwise_rule`` and ``OutputSharding``.

No arrays here: specs are built with ``DTensorSpec.from_dim_map`` and
``TensorMeta``, and the expected results follow PyTorch's ``einop_rule`` /
``pointwise_rule`` semantics (shared/reference/common_rules_einop_pointwise.txt):

* a dim sharded in one input and replicated in another is resharded so both
  are sharded (a redistribute suggestion, no output spec);
* a dim sharded on two different mesh dims raises "sharded two different ways";
* two different dims sharded on one mesh dim: the input with the larger comm
  volume keeps its sharding, the other dim is replicated;
* a sharded dim contracted away makes the output ``Partial(sum)`` there;
* with ``linearity`` a pending sum stays pending when *every* input is
  partial on that mesh dim; otherwise the suggestion is to make every input
  partial there (PyTorch's "pending sum" suggestion);
* without ``linearity`` pending sums are reduced first (suggestion with no sums);
* enforced shardings (``out_spec``) override the inputs' shardings;
* a broadcast singleton dim never carries a sharding.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtensor_np import DeviceMesh, DTensorSpec, Partial, Replicate, Shard, ShardingError, TensorMeta
from dtensor_np.propagation import OutputSharding, einop_rule, pointwise_rule

M1 = DeviceMesh((2,))
M22 = DeviceMesh((2, 2))
M23 = DeviceMesh((2, 3))


def spec(mesh, shape, dim_map, sums=(), dtype="float64"):
    return DTensorSpec.from_dim_map(mesh, list(dim_map), list(sums), TensorMeta(tuple(shape), dtype))


def settle(rule, specs):
    """Follow one redistribute suggestion: (input specs used, output spec)."""
    result = rule(specs)
    if result.output_spec is not None:
        return tuple(specs), result.output_spec
    assert result.redistribute_specs is not None, "a rule returned neither an output spec nor a suggestion"
    again = rule(result.redistribute_specs)
    assert again.output_spec is not None, (
        f"following the suggestion {[str(s) for s in result.redistribute_specs]} did not settle"
    )
    return tuple(result.redistribute_specs), again.output_spec


# ---------------------------------------------------------------------------
# The reference's own cases
# ---------------------------------------------------------------------------


def test_contracting_a_sharded_dim_gives_a_partial_output():
    """einop_rule docstring: "mk,kn->mn" with dim maps [-1, 0] and [0, -1] gives Partial(sum)."""
    a = spec(M1, (4, 6), [-1, 0])
    b = spec(M1, (6, 8), [0, -1])
    result = einop_rule("mk,kn->mn", [a, b])
    assert isinstance(result, OutputSharding)
    assert result.redistribute_specs is None
    out = result.output_spec
    assert out is not None
    assert out.dim_map == [-1, -1]
    assert out.sums == [0]
    assert out.placements == (Partial("sum"),)
    assert out.tensor_meta is not None and out.shape == (4, 8)
    assert out.mesh == M1


def test_matmul_on_a_2x2_mesh_keeps_both_shardings():
    """[0, -1] times [-1, 1] on a 2x2 mesh gives [0, 1] with no pending sum."""
    a = spec(M22, (4, 6), [0, -1])
    b = spec(M22, (6, 8), [-1, 1])
    result = einop_rule("mk,kn->mn", [a, b])
    assert result.redistribute_specs is None
    assert result.output_spec.dim_map == [0, 1]
    assert result.output_spec.sums == []
    assert result.output_spec.placements == (Shard(0), Shard(1))
    assert result.output_spec.shape == (4, 8)


def test_matmul_sharded_on_both_mesh_dims_and_contracted():
    """m on mesh dim 0 and k on mesh dim 1 in both: output [0, -1] with a pending sum on mesh dim 1."""
    a = spec(M22, (4, 6), [0, 1])
    b = spec(M22, (6, 8), [1, -1])
    out = einop_rule("mk,kn->mn", [a, b]).output_spec
    assert out is not None
    assert out.dim_map == [0, -1]
    assert out.sums == [1]
    assert out.placements == (Shard(0), Partial("sum"))


@pytest.mark.parametrize("via", ["pointwise_rule", "einop_rule"])
def test_a_dim_sharded_two_different_ways_raises(via):
    a = spec(M22, (4, 4), [0, -1])
    b = spec(M22, (4, 4), [1, -1])
    with pytest.raises(ShardingError, match="sharded two different ways"):
        if via == "pointwise_rule":
            pointwise_rule([a, b])
        else:
            einop_rule("ij,ij->ij", [a, b])


def test_sharded_two_different_ways_is_a_value_error_naming_the_dim():
    a = spec(M22, (4, 6), [-1, 0])
    b = spec(M22, (6, 8), [1, -1])
    with pytest.raises(ValueError, match="dim k sharded two different ways"):
        einop_rule("mk,kn->mn", [a, b])


# ---------------------------------------------------------------------------
# Merging shardings, suggestions and their content
# ---------------------------------------------------------------------------


def test_replicated_operand_is_chunked_to_match_the_sharded_one():
    a = spec(M1, (4, 4), [0, -1])
    b = spec(M1, (4, 4), [-1, -1], dtype="float32")
    result = pointwise_rule([a, b])
    assert result.output_spec is None
    suggested = result.redistribute_specs
    assert isinstance(suggested, tuple) and len(suggested) == 2
    assert all(isinstance(s, DTensorSpec) for s in suggested)
    assert [s.dim_map for s in suggested] == [[0, -1], [0, -1]]
    assert [s.sums for s in suggested] == [[], []]
    # the suggestion is about placements only: mesh, shape and dtype are the inputs'
    assert suggested[0].tensor_meta == a.tensor_meta
    assert suggested[1].tensor_meta == b.tensor_meta
    assert all(s.mesh == M1 for s in suggested)
    out = pointwise_rule(suggested).output_spec
    assert out.dim_map == [0, -1] and out.sums == []


def test_contraction_suggestion_shards_the_replicated_operand_then_gives_partial():
    a = spec(M1, (4, 6), [-1, 0])
    b = spec(M1, (6, 8), [-1, -1])
    result = einop_rule("mk,kn->mn", [a, b])
    assert result.output_spec is None
    assert [s.dim_map for s in result.redistribute_specs] == [[-1, 0], [0, -1]]
    out = einop_rule("mk,kn->mn", result.redistribute_specs).output_spec
    assert out.dim_map == [-1, -1] and out.sums == [0]


def test_reduction_equation_of_a_sharded_dim_is_partial():
    a = spec(M22, (4, 6), [1, 0])
    out = einop_rule("ij->i", [a]).output_spec
    assert out.dim_map == [1]
    assert out.sums == [0]
    assert out.shape == (4,)


def test_identical_shardings_need_no_redistribution():
    a = spec(M22, (4, 6), [0, 1])
    result = pointwise_rule([a, a])
    assert result.redistribute_specs is None
    assert result.output_spec == a


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "keep"),
    [
        ((8, 4), (4, 2), "m"),  # the left operand is larger: m keeps mesh dim 0, n is replicated
        ((2, 4), (4, 16), "n"),  # the right operand is larger: n keeps mesh dim 0, m is replicated
    ],
)
def test_comm_volume_heuristic_keeps_the_larger_inputs_sharding(a_shape, b_shape, keep):
    """m and n both want mesh dim 0: the input with the larger comm volume keeps its sharding."""
    a = spec(M1, a_shape, [0, -1])
    b = spec(M1, b_shape, [-1, 0])
    result = einop_rule("mk,kn->mn", [a, b])
    assert result.output_spec is None
    suggested_a, suggested_b = result.redistribute_specs
    if keep == "m":
        assert suggested_a.dim_map == [0, -1] and suggested_b.dim_map == [-1, -1]
    else:
        assert suggested_a.dim_map == [-1, -1] and suggested_b.dim_map == [-1, 0]
    _, out = settle(lambda ss: einop_rule("mk,kn->mn", ss), (a, b))
    assert out.dim_map == ([0, -1] if keep == "m" else [-1, 0])
    assert out.sums == []


def test_comm_volume_heuristic_for_pointwise_transposed_shardings():
    """ij with i on mesh dim 0 in a (large) and j on mesh dim 0 in b (small, broadcast): a wins."""
    a = spec(M1, (8, 6), [0, -1])
    b = spec(M1, (6,), [0])
    result = pointwise_rule([a, b])
    assert result.output_spec is None
    assert [s.dim_map for s in result.redistribute_specs] == [[0, -1], [-1]]


def test_inputs_on_different_meshes_raise():
    a = spec(M1, (4, 4), [0, -1])
    b = spec(DeviceMesh((2,), dim_names=("tp",)), (4, 4), [0, -1])
    with pytest.raises(ShardingError, match="mesh"):
        pointwise_rule([a, b])
    with pytest.raises(ShardingError, match="mesh"):
        einop_rule("mk,kn->mn", [a, b])


def test_mismatched_dim_sizes_and_malformed_equations_raise():
    a = spec(M1, (4, 5), [-1, -1])
    b = spec(M1, (6, 8), [-1, -1])
    with pytest.raises(ShardingError):
        einop_rule("mk,kn->mn", [a, b])  # k is 5 in one input and 6 in the other
    with pytest.raises(ShardingError):
        einop_rule("mk,kn", [a, b])  # no output
    with pytest.raises(ShardingError):
        einop_rule("mk->mk", [a, b])  # two specs for one input term
    with pytest.raises(ShardingError):
        einop_rule("mkx,kn->mn", [a, b])  # three letters for a 2-d input


# ---------------------------------------------------------------------------
# Pending sums (Partial) and linearity
# ---------------------------------------------------------------------------


def test_linearity_keeps_partial_through_add_when_all_inputs_are_partial():
    a = spec(M22, (4, 4), [1, -1], sums=[0])
    b = spec(M22, (4, 4), [1, -1], sums=[0])
    result = pointwise_rule([a, b], linearity=True)
    assert result.redistribute_specs is None
    assert result.output_spec.sums == [0]
    assert result.output_spec.dim_map == [1, -1]
    assert result.output_spec.placements == (Partial("sum"), Shard(0))


def test_without_linearity_pending_sums_are_reduced_first():
    a = spec(M1, (4, 4), [-1, -1], sums=[0])
    b = spec(M1, (4, 4), [-1, -1], sums=[0])
    result = pointwise_rule([a, b])
    assert result.output_spec is None
    assert [s.sums for s in result.redistribute_specs] == [[], []]
    _, out = settle(pointwise_rule, (a, b))
    assert out.sums == [] and out.placements == (Replicate(),)


def test_linearity_with_only_some_inputs_partial_suggests_a_pending_sum_on_every_input():
    """PyTorch: not every input partial -> reshard suggestion that makes every input partial there."""
    a = spec(M1, (4, 4), [-1, -1], sums=[0])
    b = spec(M1, (4, 4), [-1, -1])
    result = pointwise_rule([a, b], linearity=True)
    assert result.output_spec is None
    # Regression (fixed): expected [[0], [0]] (the reference's _gen_reshard_suggestions(..., pending_sums) marks
    # every input partial on mesh dim 0); dtensor_np/propagation/einop.py einop_rule suggests
    # [[], []] (it reduces the pending sum instead).
    assert [s.sums for s in result.redistribute_specs] == [[0], [0]]
    _, out = settle(lambda ss: pointwise_rule(ss, linearity=True), (a, b))
    assert out.sums == [0]


def test_contraction_of_a_partial_operand_without_linearity_reduces_it():
    a = spec(M1, (4, 6), [-1, -1], sums=[0])
    b = spec(M1, (6, 8), [-1, -1])
    result = einop_rule("mk,kn->mn", [a, b])
    assert result.output_spec is None
    assert [s.sums for s in result.redistribute_specs] == [[], []]


def test_partial_on_one_mesh_dim_and_sharding_on_the_other_flow_through_linear_ops():
    a = spec(M22, (6, 4), [-1, 1], sums=[0])
    b = spec(M22, (6, 4), [-1, 1], sums=[0])
    out = pointwise_rule([a, b], linearity=True).output_spec
    assert out is not None
    assert out.placements == (Partial("sum"), Shard(1))


# ---------------------------------------------------------------------------
# Enforced output sharding and broadcasting
# ---------------------------------------------------------------------------


def test_out_spec_enforces_the_output_sharding():
    a = spec(M22, (4, 6), [0, -1])
    b = spec(M22, (4, 6), [0, -1])
    out_spec = spec(M22, (4, 6), [-1, 1])
    result = pointwise_rule([a, b], out_spec=out_spec)
    assert result.output_spec is None
    assert [s.dim_map for s in result.redistribute_specs] == [[-1, 1], [-1, 1]]
    again = pointwise_rule(result.redistribute_specs, out_spec=out_spec)
    assert again.output_spec.dim_map == [-1, 1]


def test_out_spec_that_already_matches_needs_nothing():
    a = spec(M1, (4, 6), [0, -1])
    b = spec(M1, (6,), [-1])
    result = pointwise_rule([a, b], out_spec=spec(M1, (4, 6), [0, -1]))
    assert result.redistribute_specs is None
    assert result.output_spec.dim_map == [0, -1]


def test_out_spec_with_broadcast_operand():
    a = spec(M1, (4, 6), [-1, -1])
    b = spec(M1, (6,), [-1])
    result = pointwise_rule([a, b], out_spec=spec(M1, (4, 6), [-1, 0]))
    assert result.output_spec is None
    assert [s.dim_map for s in result.redistribute_specs] == [[-1, 0], [0]]


def test_einop_enforce_sharding():
    a = spec(M1, (4, 6), [0, -1])
    b = spec(M1, (6, 8), [-1, -1])
    result = einop_rule("mk,kn->mn", [a, b], enforce_sharding={"n": 0, "m": -1})
    assert result.output_spec is None
    assert [s.dim_map for s in result.redistribute_specs] == [[-1, -1], [-1, 0]]
    again = einop_rule("mk,kn->mn", result.redistribute_specs, enforce_sharding={"n": 0, "m": -1})
    assert again.output_spec.dim_map == [-1, 0]


def test_broadcast_of_a_lower_rank_operand_keeps_the_sharding():
    a = spec(M22, (4, 6), [0, 1])
    b = spec(M22, (6,), [1])
    result = pointwise_rule([a, b])
    assert result.redistribute_specs is None
    assert result.output_spec.dim_map == [0, 1]
    assert result.output_spec.shape == (4, 6)


def test_singleton_broadcast_dims_are_never_sharded():
    # b's dim 0 has size 1 and is broadcast: its sharding must be dropped, never propagated
    a = spec(M22, (4, 6), [-1, 1])
    b = spec(M22, (1, 6), [0, 1])
    result = pointwise_rule([a, b])
    assert result.output_spec is None
    assert [s.dim_map for s in result.redistribute_specs] == [[-1, 1], [-1, 1]]
    _, out = settle(pointwise_rule, (a, b))
    assert out.dim_map == [-1, 1]


def test_singleton_dims_in_both_operands_give_a_replicated_output_dim():
    a = spec(M1, (4, 1), [0, -1])
    b = spec(M1, (1, 6), [-1, -1])
    out = pointwise_rule([a, b]).output_spec
    assert out.dim_map == [0, -1] and out.shape == (4, 6)
    c = spec(M1, (1, 6), [-1, -1])
    d = spec(M1, (1, 6), [-1, 0])
    used, out = settle(pointwise_rule, (c, d))
    assert [u.dim_map for u in used] == [[-1, 0], [-1, 0]]
    assert out.shape == (1, 6)
    assert out.dim_map == [-1, 0]
    e = spec(M1, (1, 6), [0, -1])
    f = spec(M1, (4, 1), [-1, -1])
    used, out = settle(pointwise_rule, (e, f))
    assert [u.dim_map for u in used] == [[-1, -1], [-1, -1]]
    assert out.shape == (4, 6) and out.dim_map == [-1, -1]


def test_a_single_sharded_size_one_operand_keeps_its_layout():
    """With one input nothing is broadcast, so a size-1 dim is an ordinary dim."""
    a = spec(M1, (1, 6), [0, -1])
    out = pointwise_rule([a]).output_spec
    assert out is not None and out.dim_map == [0, -1]


# ---------------------------------------------------------------------------
# Properties over random broadcast shapes and dim maps
# ---------------------------------------------------------------------------


@st.composite
def broadcast_case(draw):
    mesh = draw(st.sampled_from([M1, M22, M23, DeviceMesh((3,))]))
    ndim = draw(st.integers(1, 3))
    full = draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim))
    n_inputs = draw(st.integers(1, 3))
    specs = []
    for _ in range(n_inputs):
        drop = draw(st.integers(0, ndim - 1))
        shape = [1 if draw(st.booleans()) and draw(st.booleans()) else s for s in full[drop:]]
        mesh_dims = draw(st.permutations(list(range(mesh.ndim))))
        dim_map = [-1] * len(shape)
        for m in mesh_dims:
            if draw(st.booleans()):
                d = draw(st.integers(0, len(shape) - 1))
                if dim_map[d] == -1:
                    dim_map[d] = m
        specs.append(spec(mesh, shape, dim_map))
    return mesh, specs


@settings(max_examples=150, deadline=None)
@given(broadcast_case())
def test_pointwise_rule_properties(case):
    """Settles after one suggestion; the output has the broadcast shape and a consistent dim map;
    singleton dims never carry a sharding; conflicting shardings raise."""
    mesh, specs = case
    ndim = max(s.ndim for s in specs)
    padded = [(1,) * (ndim - s.ndim) + s.shape for s in specs]
    out_shape = tuple(max(col) for col in zip(*padded))
    broadcast = len(specs) > 1

    def is_broadcast_singleton(size: int, i: int) -> bool:
        """A size-1 input dim that is stretched to a larger output dim."""
        return broadcast and size == 1 and out_shape[i] > 1

    # the mesh dims each dim is sharded on, over the inputs where it is not a singleton; whether a
    # dim that is 1 in every input is a "broadcast" is left to the library (it may keep it sharded)
    conflict = ambiguous = False
    for i in range(ndim):
        mesh_dims, singleton_dims = set(), set()
        for s, shape in zip(specs, padded):
            j = i - (ndim - s.ndim)
            if j < 0 or s.dim_map[j] == -1:
                continue
            (singleton_dims if broadcast and shape[i] == 1 else mesh_dims).add(s.dim_map[j])
        conflict |= len(mesh_dims) > 1
        ambiguous |= out_shape[i] == 1 and len(singleton_dims) > 1
    if conflict:
        with pytest.raises(ShardingError, match="sharded two different ways"):
            pointwise_rule(specs)
        return
    try:
        used, out = settle(pointwise_rule, tuple(specs))
    except ShardingError as exc:
        assert ambiguous and "sharded two different ways" in str(exc), exc
        return
    assert out.shape == out_shape
    assert out.sums == []
    assert out.mesh == mesh
    for s, u in zip(specs, used):
        assert u.tensor_meta == s.tensor_meta
    # suggestions agree on every dim, and broadcast singletons are replicated
    for i in range(ndim):
        seen = set()
        for u in used:
            j = i - (ndim - u.ndim)
            if j < 0:
                continue
            if is_broadcast_singleton(u.shape[j], i):
                assert u.dim_map[j] == -1, f"broadcast singleton dim {j} of {u.shape} sharded: {u}"
            else:
                seen.add(u.dim_map[j])
        if seen:
            assert len(seen) == 1, f"inputs disagree on dim {i}: {[str(u) for u in used]}"
            assert out.dim_map[i] == seen.pop()
        else:
            assert out.dim_map[i] == -1
    # every mesh dim shards at most one output dim
    sharded = [m for m in out.dim_map if m != -1]
    assert len(sharded) == len(set(sharded))
    # an input that already agreed with the output is left as it was
    for s, u in zip(specs, used):
        if all(
            s.dim_map[j] == -1
            if is_broadcast_singleton(s.shape[j], j + ndim - s.ndim)
            else s.dim_map[j] == out.dim_map[j + ndim - s.ndim]
            for j in range(s.ndim)
        ):
            assert u.dim_map == s.dim_map


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([M1, M22, M23]),
    st.lists(st.integers(1, 5), min_size=3, max_size=3),
    st.data(),
)
def test_einop_contraction_properties(mesh, sizes, data):
    """For "mk,kn->mn": the output is Partial exactly on the mesh dims that shard k, and its
    shape is (m, n); dims sharded one way in one input and another way elsewhere raise."""
    m, k, n = sizes
    choices = [-1] + list(range(mesh.ndim))

    def dim_map(size):
        dm = data.draw(st.lists(st.sampled_from(choices), min_size=size, max_size=size))
        seen = set()
        return [x if x == -1 or (x not in seen and not seen.add(x)) else -1 for x in dm]

    a = spec(mesh, (m, k), dim_map(2))
    b = spec(mesh, (k, n), dim_map(2))
    if a.dim_map[1] != -1 and b.dim_map[0] != -1 and a.dim_map[1] != b.dim_map[0]:
        with pytest.raises(ShardingError, match="sharded two different ways"):
            einop_rule("mk,kn->mn", [a, b])
        return
    used, out = settle(lambda ss: einop_rule("mk,kn->mn", ss), (a, b))
    assert out.shape == (m, n)
    ua, ub = used
    assert ua.dim_map[1] == ub.dim_map[0]
    k_mesh = ua.dim_map[1]
    assert out.sums == ([] if k_mesh == -1 else [k_mesh])
    assert out.dim_map == [ua.dim_map[0], ub.dim_map[1]]
    all_dims = [d for d in ua.dim_map + [ub.dim_map[1]] if d != -1]
    assert len(all_dims) == len(set(all_dims))


def test_rule_outputs_print_like_placements():
    """The rule outputs print like placements (error messages and explain() rely on it)."""
    a = spec(M1, (4, 6), [-1, 0])
    b = spec(M1, (6, 8), [0, -1])
    assert str(einop_rule("mk,kn->mn", [a, b]).output_spec) == "P(sum)"
    c = spec(M22, (4, 6), [1, -1], sums=[0])
    assert str(pointwise_rule([c, c], linearity=True).output_spec) == "P(sum)S(0)"
    for dim_map in ([-1, -1], [0, -1], [-1, 0]):
        single = spec(M1, (4, 4), dim_map)
        assert pointwise_rule([single]).output_spec == single
