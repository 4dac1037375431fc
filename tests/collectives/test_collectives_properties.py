"""Hypothesis properties: random uneven sizes (empty pieces included) for all_gather and
all_to_all round trips.  Under MPI every rank draws the same examples (derandomized)."""
from __future__ import annotations

import os

import numpy as np
from collectives_testing import Failures, held, make_array, split_along
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = 25 if os.environ.get("PYTEST_ISOLATE_MPI_IS_FORKED") else 40
DTYPES = (np.float64, np.int32, np.float16, np.complex64, np.bool_)


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_uneven_gather_and_all_to_all_round_trip(world, data):
    """all_gather with random in_sizes equals np.concatenate; all_to_all S(i)->S(j) with random
    sizes, then back S(j)->S(i), returns every rank's input."""
    backend, n = world.backend, world.size
    failures = Failures(world)
    split_world = data.draw(st.booleans(), label="two groups") and n % 2 == 0
    groups = (tuple(range(0, n, 2)), tuple(range(1, n, 2))) if split_world else (tuple(range(n)),)
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    ndim = data.draw(st.integers(2, 3), label="ndim")
    axis_i, axis_j = data.draw(st.permutations(range(ndim)), label="axes")[:2]
    other = data.draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim), label="other dims")
    sizes_i = {r: data.draw(st.integers(0, 4), label=f"len i {r}") for r in range(n)}
    totals_j = {g: data.draw(st.integers(0, 6), label=f"len j {g}") for g in groups}
    sizes_j = {}
    for g in groups:
        cuts = sorted(data.draw(st.lists(st.integers(0, totals_j[g]), min_size=len(g) - 1,
                                         max_size=len(g) - 1), label="cuts"))
        sizes_j.update({r: b - a for r, a, b in zip(g, [0, *cuts], [*cuts, totals_j[g]])})
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)

    inputs = {}
    for g in groups:
        for r in g:
            shape = list(other)
            shape[axis_i] = sizes_i[r]
            shape[axis_j] = totals_j[g]
            inputs[r] = make_array(rng, tuple(shape), dtype)

    gathered = backend.all_gather(held(world, inputs), groups, axis=axis_i, in_sizes=sizes_i)
    for r in world.ranks:
        g = next(g for g in groups if r in g)
        failures.equal(gathered[r], np.concatenate([inputs[m] for m in g], axis=axis_i), f"all_gather rank {r}")

    moved = backend.all_to_all(held(world, inputs), groups, split_axis=axis_j, concat_axis=axis_i,
                               in_sizes=sizes_i, out_sizes=sizes_j)
    for r in world.ranks:
        g = next(g for g in groups if r in g)
        full = np.concatenate([inputs[m] for m in g], axis=axis_i)
        piece = split_along(full, axis_j, [sizes_j[m] for m in g])[g.index(r)]
        failures.equal(moved[r], piece, f"all_to_all rank {r}")
    back = backend.all_to_all(moved, groups, split_axis=axis_i, concat_axis=axis_j,
                              in_sizes=sizes_j, out_sizes=sizes_i)
    for r in world.ranks:
        failures.equal(back[r], inputs[r], f"round trip rank {r}")
    failures.raise_if_any()
