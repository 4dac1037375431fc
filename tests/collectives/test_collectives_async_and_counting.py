"""Asynchronous variants, and counting collectives the same way on both backends."""
from __future__ import annotations

import numpy as np
from collectives_testing import Failures, group_of, held, make_array, reduce_in_group_order, split_along, torch_chunks

from collectives import Handle, comm_counter


def test_async_variants_and_counting(world):
    failures = Failures(world)
    _check_async_variants(world, failures)
    _check_counting(world, failures)
    failures.raise_if_any()


def _check_async_variants(world, failures: Failures) -> None:
    """Several collectives in flight at once, waited for in reverse order."""
    backend, n = world.backend, world.size
    rng = np.random.default_rng(6)
    groups_list = [(tuple(range(n)),)]
    if n % 2 == 0:
        groups_list.append(tuple((r, r + n // 2) for r in range(n // 2)))
    for groups in groups_list:
        for dtype in (np.float64, np.float16, np.int32):
            lengths = {r: r % 3 for r in range(n)}
            gather_in = {r: make_array(rng, (2, lengths[r]), dtype) for r in range(n)}
            reduce_in = {r: make_array(rng, (3, 5), dtype) for r in range(n)}
            op = "avg" if np.dtype(dtype).kind == "f" else "max"
            shard_in = {r: make_array(rng, (4, 6), dtype) for r in range(n)}

            handles: list[tuple[str, Handle]] = [
                ("all_gather", backend.iall_gather(held(world, gather_in), groups, axis=1, in_sizes=lengths)),
                ("all_reduce", backend.iall_reduce(held(world, reduce_in), groups, op=op)),
                ("reduce_scatter", backend.ireduce_scatter(held(world, reduce_in), groups, op="sum", axis=1)),
                ("all_to_all", backend.iall_to_all(held(world, shard_in), groups, split_axis=1, concat_axis=0)),
            ]
            results = {name: handle.wait() for name, handle in reversed(handles)}
            again = handles[0][1].wait()
            failures.expect(again is results["all_gather"], "a second wait() returns the same result")
            for r in world.ranks:
                g = group_of(groups, r)
                context = f"async {groups} {np.dtype(dtype)} rank {r}"
                failures.equal(results["all_gather"][r], np.concatenate([gather_in[m] for m in g], axis=1), context)
                failures.equal(results["all_reduce"][r], reduce_in_group_order((reduce_in[m] for m in g), op), context)
                total = reduce_in_group_order((reduce_in[m] for m in g), "sum")
                failures.equal(
                    results["reduce_scatter"][r],
                    split_along(total, 1, torch_chunks(5, len(g)))[g.index(r)],
                    context,
                )
                pieces = [split_along(shard_in[q], 1, torch_chunks(6, len(g)))[g.index(r)] for q in g]
                failures.equal(results["all_to_all"][r], np.concatenate(pieces, axis=0), context)


def _check_counting(world, failures: Failures) -> None:
    """One call counts 1 on both backends, whatever the number of groups."""
    backend, n = world.backend, world.size
    groups = tuple((r,) for r in range(n)) if n > 1 else ((0,),)
    x = {r: np.ones((4, 2), np.float32) for r in range(n)}
    with comm_counter() as outer:
        backend.all_gather(held(world, x), groups)
        with comm_counter() as inner:
            backend.all_reduce(held(world, x), groups, check=False)
            backend.iall_reduce(held(world, x), groups).wait()
            backend.reduce_scatter(held(world, x), groups)
            handle = backend.iall_to_all(held(world, x), groups, split_axis=0, concat_axis=1)
            backend.barrier()
            backend.all_true({r: True for r in world.ranks})
            backend.gather_descriptors({r: (r,) for r in world.ranks})
        handle.wait()  # counted when issued, not when waited for
        backend.broadcast(held(world, x), groups)
        backend.scatter(held(world, x), groups)
        backend.scatter(held(world, x), groups, check=False)
    backend.all_gather(held(world, x), groups)  # after the counters closed: not counted
    nbytes = 4 * 2 * 4
    failures.expect(
        inner.counts == {"all_gather": 0, "all_reduce": 2, "reduce_scatter": 1, "all_to_all": 1,
                         "broadcast": 0, "scatter": 0, "scan": 0},
        f"inner counts {inner.counts}",
    )
    failures.expect(
        outer.counts == {"all_gather": 1, "all_reduce": 2, "reduce_scatter": 1, "all_to_all": 1,
                         "broadcast": 1, "scatter": 2, "scan": 0},
        f"outer counts {outer.counts}",
    )
    failures.expect(outer.total == 8, f"outer total {outer.total}")
    failures.expect(
        outer.bytes == {kind: count * nbytes for kind, count in outer.counts.items()},
        f"outer bytes {outer.bytes}",
    )
