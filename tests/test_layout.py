"""Pure-metadata tests: the int-tuple helpers and the CuTe-style ``Layout`` algebra.

Everything is lexicographic (row-major), like PyTorch's ``_MeshLayout``: the
last mode moves fastest.  Concrete cases pin exact values (including the
examples of the reference docstrings); hypothesis properties check the algebra
against brute-force evaluation of the layout functions.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtensor_np import ShardingError
from dtensor_np.int_tuple import (
    congruent,
    coordinate_to_index,
    flatten,
    index_to_coordinate,
    inner_product,
    product,
    suffix_product,
)
from dtensor_np.layout import Layout


def values(layout: Layout) -> list[int]:
    """The layout as a function, evaluated on its whole domain through ``__call__``."""
    return [layout(i) for i in range(layout.numel())]


# ---------------------------------------------------------------------------
# int-tuple helpers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (((2, 3), 4), (2, 3, 4)),
        (5, (5,)),
        ((), ()),
        ((1, (2, (3, 4)), 5), (1, 2, 3, 4, 5)),
        (((7,),), (7,)),
    ],
)
def test_flatten(value, expected):
    assert flatten(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(((2, 3), 4), 24), (7, 7), ((), 1), ((1, (2, (3, 4))), 24), ((5, 1, 1), 5)],
)
def test_product(value, expected):
    assert product(value) == expected


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((2, 3, 4), (12, 4, 1)), ((5,), (1,)), ((), ()), ((2, 1, 3), (3, 3, 1)), ((4, 2), (2, 1))],
)
def test_suffix_product(shape, expected):
    assert suffix_product(shape) == expected


def test_index_to_coordinate_concrete():
    assert index_to_coordinate(5, (2, 3)) == (1, 2)
    assert index_to_coordinate(0, (2, 3)) == (0, 0)
    assert index_to_coordinate(3, (2, 3)) == (1, 0)
    assert index_to_coordinate(23, (2, 3, 4)) == (1, 2, 3)
    assert index_to_coordinate(13, (2, 3, 4)) == (1, 0, 1)
    assert [index_to_coordinate(i, (2, 2)) for i in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_coordinate_to_index_concrete():
    assert coordinate_to_index((1, 2), (2, 3)) == 5
    assert coordinate_to_index((0, 0), (2, 3)) == 0
    assert coordinate_to_index((1, 0, 1), (2, 3, 4)) == 13
    assert coordinate_to_index((1, 2, 3), (2, 3, 4)) == 23


def test_inner_product_and_congruent():
    assert inner_product((1, 2, 3), (4, 5, 6)) == 32
    assert inner_product((), ()) == 0
    with pytest.raises(ValueError, match="equal lengths"):
        inner_product((1, 2), (1,))
    assert congruent((2, (3, 4)), (1, (5, 6)))
    assert congruent(3, 9)
    assert not congruent((2, 3), (2, (3, 1)))
    assert not congruent((2, 3), (2,))
    assert not congruent(2, (2,))


@given(st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple), st.data())
@settings(max_examples=60)
def test_index_coordinate_round_trip_matches_numpy(shape, data):
    n = math.prod(shape)
    index = data.draw(st.integers(0, n - 1))
    coord = index_to_coordinate(index, shape)
    assert coord == tuple(int(c) for c in np.unravel_index(index, shape))
    assert coordinate_to_index(coord, shape) == index
    assert coordinate_to_index(coord, shape) == int(np.ravel_multi_index(coord, shape))
    # suffix_product gives numpy's C-order strides (in elements)
    assert suffix_product(shape) == tuple(s // 8 for s in np.zeros(shape, np.int64).strides)


# ---------------------------------------------------------------------------
# Layout: construction, structure, evaluation
# ---------------------------------------------------------------------------


def test_layout_is_frozen_value():
    a = Layout((2, 3), (3, 1))
    b = Layout((2, 3), (3, 1))
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, Layout((2, 3), (1, 2))}) == 2
    assert a != Layout((3, 2), (2, 1))
    with pytest.raises(AttributeError):
        a.shape = (6,)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("shape", "stride", "error", "pattern"),
    [
        ((2, 3), (1,), ShardingError, "nest alike"),
        ((2, (3, 4)), (1, 2), ShardingError, "nest alike"),
        ((2, 0), (1, 1), ShardingError, ">= 1"),
        ((2, 3), (3, -1), ShardingError, ">= 0"),
        (("2", 3), (3, 1), TypeError, "int or a nested tuple"),
        ((2.0, 3), (3, 1), TypeError, "int or a nested tuple"),
        ((True, 3), (3, 1), TypeError, "int or a nested tuple"),
        ([2, 3], [3, 1], TypeError, "int or a nested tuple"),
    ],
)
def test_layout_rejects_bad_shapes_and_strides(shape, stride, error, pattern):
    with pytest.raises(error, match=pattern):
        Layout(shape, stride)
    assert issubclass(ShardingError, ValueError)


def test_layout_numel():
    assert Layout(4, 1).numel() == 4
    assert Layout((2, 3), (3, 1)).numel() == 6
    assert Layout(((2, 3), 4), ((12, 4), 1)).numel() == 24
    assert Layout((1, 1), (0, 0)).numel() == 1
    assert Layout((2, 5), (0, 0)).numel() == 10


def test_layout_len_getitem_modes():
    L = Layout(((2, 3), 4), ((12, 4), 1))
    assert len(L) == 2
    assert L[0] == Layout((2, 3), (12, 4))
    assert L[1] == Layout(4, 1)
    assert L[-1] == Layout(4, 1)
    assert L.modes() == [Layout((2, 3), (12, 4)), Layout(4, 1)]
    assert L.sizes_and_strides == [(2, 12), (3, 4), (4, 1)]
    single = Layout(4, 2)
    assert len(single) == 1
    assert single[0] == single
    assert single.modes() == [single]
    with pytest.raises(IndexError):
        single[1]


def test_layout_call():
    L = Layout((2, 3), (1, 2))
    assert values(L) == [0, 2, 4, 1, 3, 5]
    assert L(4) == 3
    assert values(Layout((2, 3), (3, 1))) == [0, 1, 2, 3, 4, 5]
    assert values(Layout(4, 3)) == [0, 3, 6, 9]
    # nested shapes are read row-major over the flattened shape
    nested = Layout(((2, 2), 3), ((1, 6), 2))
    assert values(nested) == [
        c0 * 1 + c1 * 6 + c2 * 2 for c0, c1, c2 in itertools.product(range(2), range(2), range(3))
    ]
    assert nested(7) == 1 * 1 + 0 * 6 + 1 * 2  # index 7 is coordinate (1, 0, 1)
    assert values(Layout((3, 2), (0, 1))) == [0, 1, 0, 1, 0, 1]


def test_layout_str():
    assert str(Layout((2, 3), (3, 1))) == "(2, 3):(3, 1)"
    assert str(Layout(4, 2)) == "4:2"


# ---------------------------------------------------------------------------
# coalesce
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # reference _MeshLayout.coalesce docstring, examples 1 and 2
        (Layout((3, 2), (2, 1)), Layout(6, 1)),
        (Layout((3, 2), (4, 1)), Layout((3, 2), (4, 1))),
        (Layout((2, 2), (4, 2)), Layout(4, 2)),
        (Layout((2, 3, 4), (12, 4, 1)), Layout(24, 1)),
        (Layout((2, 3, 4), (24, 4, 1)), Layout((2, 12), (24, 1))),
        # size-1 modes are dropped whatever their stride
        (Layout((2, 1, 3), (3, 7, 1)), Layout(6, 1)),
        (Layout((1, 5), (9, 2)), Layout(5, 2)),
        (Layout((1, 1), (3, 4)), Layout(1, 0)),
        (Layout(1, 5), Layout(1, 0)),
        # column-major modes cannot merge in a row-major algebra
        (Layout((2, 3), (1, 2)), Layout((2, 3), (1, 2))),
        # broadcast modes merge with each other
        (Layout((2, 2), (0, 0)), Layout(4, 0)),
        # nested shapes coalesce over their flattening
        (Layout(((2, 2), 3), ((6, 3), 1)), Layout(12, 1)),
        (Layout(4, 1), Layout(4, 1)),
    ],
)
def test_coalesce_concrete(layout, expected):
    result = layout.coalesce()
    assert result == expected
    assert values(result) == values(layout)


# ---------------------------------------------------------------------------
# composition
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # reference _MeshLayout.composition docstring: (6,2):(2,1) o 3:2 == 3:2
        (Layout((6, 2), (2, 1)), Layout(3, 2), Layout(3, 2)),
        (Layout(8, 1), Layout((2, 4), (4, 1)), Layout((2, 4), (4, 1))),
        (Layout(8, 2), Layout((2, 2), (2, 1)), Layout((2, 2), (4, 2))),
        (Layout((2, 4), (4, 1)), Layout(2, 4), Layout(2, 4)),
        (Layout((2, 4), (1, 2)), Layout(2, 4), Layout(2, 1)),
        (Layout((2, 4), (1, 2)), Layout(4, 1), Layout(4, 2)),
        # unflattening a non-contiguous (flattened) mode splits it back
        (Layout((2, 2), (4, 1)), Layout((2, 2), (2, 1)), Layout((2, 2), (4, 1))),
        (Layout((2, 2), (4, 2)), Layout(2, 1), Layout(2, 2)),
        # a broadcast selector picks element 0 over and over
        (Layout((3, 4), (1, 3)), Layout(5, 0), Layout(5, 0)),
    ],
)
def test_composition_concrete(a, b, expected):
    result = a.composition(b)
    assert result == expected
    assert [result(i) for i in range(b.numel())] == [a(b(i)) for i in range(b.numel())]


def test_composition_keeps_the_shape_of_the_right_layout():
    a = Layout((4, 6), (6, 1))
    b = Layout((2, 3), (12, 1))
    c = a.composition(b)
    assert len(c) == 2
    assert [m.numel() for m in c.modes()] == [2, 3]
    assert values(c) == [a(b(i)) for i in range(6)]


def test_composition_with_a_size_one_mode():
    # Regression: a size-1 mode of the right layout picks index 0 only, whatever its stride; it
    # raised "cannot compose ... stride 4 does not divide mode size 3".
    a = Layout((4, 3), (4, 6))
    b = Layout((1, 3), (4, 3))
    c = a.composition(b)
    assert c == Layout((1, 3), (0, 4))
    assert values(c) == [a(b(i)) for i in range(b.numel())]
    assert a.composition(Layout(1, 7)) == Layout(1, 0)
    # a mode that is used up early never looks at the outer modes (which would not divide)
    assert Layout((5, 3, 4), (12, 4, 1)).composition(Layout((2, 1), (1, 5))) == Layout((2, 1), (1, 0))


def test_composition_refuses_modes_that_carry_into_each_other():
    # Regression (found by the property below): by modes, (2,2):(1,2) o (2,2):(1,1) gave
    # (2,2):(2,2), whose index 3 is rank 4, but other(3) == 2 and self(2) == 1.
    with pytest.raises(ShardingError, match=r"the modes of \(2, 2\):\(1, 1\) overlap in the coordinates of \(2, 2\):\(1, 2\)"):
        Layout((2, 2), (1, 2)).composition(Layout((2, 2), (1, 1)))


def test_composition_inadmissible_raises():
    # (3,4):(1,3) does not coalesce; stride 3 neither divides nor is divided by
    # the innermost mode size 4.
    with pytest.raises(ShardingError, match="cannot compose"):
        Layout((3, 4), (1, 3)).composition(Layout(2, 3))


# ---------------------------------------------------------------------------
# complement, all_ranks_from_zero, global_ranks, check_non_overlap
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "world_size", "expected"),
    [
        # reference _MeshLayout.complement docstring: complement(4:1, 8) is "2" more copies
        (Layout(4, 1), 8, Layout(2, 4)),
        (Layout(4, 1), 16, Layout(4, 4)),
        (Layout(4, 1), 4, Layout(1, 0)),
        (Layout((2, 2), (4, 2)), 8, Layout(2, 1)),
        (Layout(2, 2), 4, Layout(2, 1)),
        (Layout(2, 4), 8, Layout(4, 1)),
        (Layout((2, 2), (4, 1)), 8, Layout(2, 2)),
        (Layout((2, 2), (1, 4)), 16, Layout((2, 2), (8, 2))),
        (Layout(1, 0), 6, Layout(6, 1)),
    ],
)
def test_complement_concrete(layout, world_size, expected):
    comp = layout.complement(world_size)
    assert comp == expected
    sums = sorted(c + r for c in comp.all_ranks_from_zero() for r in layout.all_ranks_from_zero())
    assert sums == list(range(world_size))


@pytest.mark.parametrize(
    ("layout", "world_size", "pattern"),
    [
        (Layout(4, 1), 6, "does not divide the world size 6"),
        (Layout(4, 2), 4, "does not divide the world size 4"),
        (Layout((2, 2), (1, 1)), 4, "no complement"),
        (Layout((3, 2), (1, 2)), 12, "no complement"),
        (Layout(2, 1), 0, "positive world size"),
        (Layout(2, 1), -4, "positive world size"),
    ],
)
def test_complement_errors(layout, world_size, pattern):
    with pytest.raises(ShardingError, match=pattern):
        layout.complement(world_size)


def test_all_ranks_from_zero():
    # reference docstring, examples A and B
    assert Layout((2, 3), (3, 1)).all_ranks_from_zero() == [0, 1, 2, 3, 4, 5]
    assert Layout((2, 3), (1, 2)).all_ranks_from_zero() == [0, 2, 4, 1, 3, 5]
    assert Layout(4, 2).all_ranks_from_zero() == [0, 2, 4, 6]
    assert Layout(((2, 2), 2), ((1, 4), 2)).all_ranks_from_zero() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert Layout(1, 0).all_ranks_from_zero() == [0]


def test_global_ranks():
    # reference _MeshLayout.global_ranks docstring
    assert Layout(4, 1).global_ranks(16) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]
    assert Layout(4, 1).global_ranks(8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert Layout(2, 2).global_ranks(4) == [[0, 2], [1, 3]]
    assert Layout(2, 1).global_ranks(4) == [[0, 1], [2, 3]]
    assert Layout((2, 2), (4, 1)).global_ranks(8) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert Layout(4, 2).global_ranks(8) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert Layout((2, 3), (1, 2)).global_ranks(6) == [[0, 2, 4, 1, 3, 5]]
    assert Layout(1, 0).global_ranks(3) == [[0], [1], [2]]
    with pytest.raises(ShardingError):
        Layout(4, 1).global_ranks(6)


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (Layout((2, 2), (2, 1)), True),
        (Layout((2, 2), (1, 2)), True),
        (Layout((2, 2), (1, 1)), False),
        (Layout((3, 2), (1, 2)), False),  # 0,2,1,3,2,4: rank 2 twice
        (Layout((2, 2), (1, 4)), True),
        (Layout(4, 0), False),
        (Layout((1, 4), (0, 1)), True),  # a size-1 broadcast mode is harmless
        (Layout(1, 0), True),
        (Layout((2, 3, 2), (6, 2, 1)), True),
        (Layout((2, 3, 2), (6, 1, 3)), True),
        # Regression: sorted by stride, a mode may start inside the span of the one below it and
        # still never hit the same rank; the sorted-stride check alone answered False for these.
        (Layout((3, 2), (6, 8)), True),  # 0, 8, 6, 14, 12, 20
        (Layout((2, 2), (4, 6)), True),  # 0, 6, 4, 10
        (Layout((3, 2), (2, 3)), True),  # 0, 3, 2, 5, 4, 7
        (Layout((3, 3), (2, 3)), True),  # 0, 3, 6, 2, 5, 8, 4, 7, 10
        (Layout((2, 2, 2), (3, 2, 1)), False),  # 0, 1, 2, 3, 3, ...: rank 3 twice
    ],
)
def test_check_non_overlap(layout, expected):
    assert layout.check_non_overlap() is expected
    # whenever it answers True the ranks really are distinct
    if expected:
        ranks = layout.all_ranks_from_zero()
        assert len(set(ranks)) == len(ranks)


# ---------------------------------------------------------------------------
# hypothesis properties
# ---------------------------------------------------------------------------


def _prime_factors(n: int) -> list[int]:
    out = []
    d = 2
    while n > 1:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return out


@st.composite
def compact_layouts(draw, max_modes: int = 3):
    """A compact (bijective onto range(numel)) layout: row-major over a permutation of its modes."""
    sizes = draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=max_modes))
    order = draw(st.permutations(range(len(sizes))))
    packed = suffix_product(tuple(sizes[p] for p in order))
    strides = [0] * len(sizes)
    for j, p in enumerate(order):
        strides[p] = packed[j]
    if len(sizes) == 1 and draw(st.booleans()):
        return Layout(sizes[0], strides[0])
    return Layout(tuple(sizes), tuple(strides))


@st.composite
def admissible_pairs(draw):
    """(A, B) with B's image inside A's domain and B aligned to a refinement of A's modes.

    A's flat shape is refined by splitting each size into factors; the index
    space of A is row-major over that refinement T.  B picks some modes of T
    (any order) with their row-major strides, optionally broadcasting some.
    """
    a = draw(compact_layouts())
    refined: list[int] = []
    for size in flatten(a.shape):
        factors = draw(st.permutations(_prime_factors(size)))
        cuts = draw(st.lists(st.booleans(), min_size=len(factors), max_size=len(factors)))
        group = 1
        parts = []
        for f, cut in zip(factors, cuts):
            group *= f
            if cut:
                parts.append(group)
                group = 1
        if group > 1 or not parts:
            parts.append(group)
        refined.extend(parts)
    strides_t = suffix_product(tuple(refined))
    picked = draw(st.lists(st.integers(0, len(refined) - 1), min_size=1, max_size=len(refined), unique=True))
    broadcast = draw(st.lists(st.booleans(), min_size=len(picked), max_size=len(picked)))
    b_sizes = tuple(refined[j] for j in picked)
    b_strides = tuple(0 if z and draw(st.integers(0, 4)) == 0 else strides_t[j] for j, z in zip(picked, broadcast))
    if len(b_sizes) == 1 and draw(st.booleans()):
        return a, Layout(b_sizes[0], b_strides[0])
    return a, Layout(b_sizes, b_strides)


@given(admissible_pairs())
@settings(max_examples=100)
def test_composition_is_function_composition(pair):
    a, b = pair
    c = a.composition(b)
    assert c.numel() == b.numel()
    assert [c(i) for i in range(b.numel())] == [a(b(i)) for i in range(b.numel())]
    if len(b) > 1:
        # by-mode: shaped like the right layout
        assert len(c) == len(b)
        assert [m.numel() for m in c.modes()] == [m.numel() for m in b.modes()]


@st.composite
def any_layouts(draw):
    """Random (possibly overlapping, broadcasting, nested) layouts."""
    n = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    if n >= 3 and draw(st.booleans()):
        return Layout(((sizes[0], sizes[1]),) + tuple(sizes[2:]), ((strides[0], strides[1]),) + tuple(strides[2:]))
    if n == 1 and draw(st.booleans()):
        return Layout(sizes[0], strides[0])
    return Layout(tuple(sizes), tuple(strides))


@given(any_layouts())
@settings(max_examples=300)
def test_check_non_overlap_agrees_with_brute_force(layout):
    """Injective exactly when the image of every coordinate is a different rank."""
    ranks = [inner_product(coord, flatten(layout.stride))
             for coord in itertools.product(*(range(s) for s in flatten(layout.shape)))]
    assert layout.check_non_overlap() is (len(set(ranks)) == len(ranks))


@given(any_layouts(), any_layouts())
@settings(max_examples=400)
def test_composition_is_function_composition_wherever_defined(a, b):
    """Random pairs, size-1 modes included: when composition answers, it is ``i -> a(b(i))``."""
    try:
        c = a.composition(b)
    except ShardingError:
        return  # not admissible for CuTe's composition: refused, never a wrong layout
    assert c.numel() == b.numel()
    assert len(c) == len(b)
    assert [m.numel() for m in c.modes()] == [m.numel() for m in b.modes()]
    for i in range(b.numel()):
        if b(i) < a.numel():  # outside a's domain the outermost mode is extended, not wrapped
            assert c(i) == a(b(i)), (a, b, c, i)


@given(st.one_of(any_layouts(), compact_layouts()))
@settings(max_examples=100)
def test_coalesce_keeps_the_function(layout):
    c = layout.coalesce()
    assert c.numel() == layout.numel()
    assert values(c) == values(layout)
    assert c.all_ranks_from_zero() == layout.all_ranks_from_zero()
    pairs = c.sizes_and_strides
    # fewest modes: no size-1 mode (except the trivial 1:0) and no mergeable neighbours
    if pairs != [(1, 0)]:
        assert all(size > 1 for size, _ in pairs)
    for (_, outer_stride), (inner_size, inner_stride) in zip(pairs, pairs[1:]):
        assert outer_stride != inner_size * inner_stride
    assert c.coalesce() == c


@st.composite
def sub_layouts_of_a_world(draw):
    """(L, w): some modes of a random row-major mesh of world size w, in any order."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    world = math.prod(shape)
    strides = suffix_product(tuple(shape))
    chosen = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    layout = Layout(tuple(shape[i] for i in chosen), tuple(strides[i] for i in chosen))
    return layout, world


@given(sub_layouts_of_a_world())
@settings(max_examples=100)
def test_complement_tiles_the_world_exactly_once(case):
    layout, world = case
    assert layout.check_non_overlap()
    comp = layout.complement(world)
    assert comp.numel() * layout.numel() == world
    assert comp.check_non_overlap()
    counts = Counter(c + r for c in comp.all_ranks_from_zero() for r in layout.all_ranks_from_zero())
    assert sorted(counts) == list(range(world))
    assert set(counts.values()) == {1}
    # global_ranks is the same tiling, one group per complement offset
    groups = layout.global_ranks(world)
    assert len(groups) == comp.numel()
    assert all(len(g) == layout.numel() for g in groups)
    assert sorted(r for g in groups for r in g) == list(range(world))
    base = layout.all_ranks_from_zero()
    assert all([r - g[0] for r in g] == base for g in groups)
