"""dt.checkpoint: save on one mesh, load on every other (values equal NumPy's), atomic commit, async, errors.

The arrays have uneven and empty shards (5 rows over 4 ranks: 2, 2, 1, 0).
The MPI case is one job of 4 ranks: it saves there and loads onto MPI meshes
of 4, 2 and 1 ranks (the others holding replicas) and onto a simulated mesh of
3 ranks in each process.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt
from dtensor_np.checkpoint import loading, saving
from dtensor_np.checkpoint.metadata import chunk_shape
from launching import MPIEXEC, clean_mpi_env

R, S, P = dt.Replicate(), dt.Shard, dt.Partial()


def _full(rng):
    """The saved arrays, drawn once at import from a generator no test draws from (order-free data)."""
    return {
        "w": rng.standard_normal((5, 3)),                      # 2, 2, 1, 0 rows over 4
        "b": rng.integers(-9, 9, size=7).astype(np.int32),
        "g": rng.standard_normal((3, 2)).astype(np.float32),   # saved Partial: the sum of 2 ranks' values
        "s": np.array(2.5),                                    # 0-d
        "m": rng.random((2, 5)) < 0.5,
        "z": (rng.standard_normal((4, 1)) + 1j * rng.standard_normal((4, 1))).astype(np.complex64),
    }


FULL = _full(np.random.default_rng(38))
SAVED = {"w": ((2, 2), [S(0), S(1)]), "b": ((4,), [S(0)]), "g": ((2, 2), [P, S(0)]), "s": ((4,), [R]),
         "m": ((2, 2), [S(1), S(1)]), "z": ((4,), [S(0)])}


def layouts(n: int) -> list[tuple[tuple[int, ...], list]]:
    """Every load layout of a set on ``n`` ranks: Shard on each dim, Replicate, and 2-D meshes for 4."""
    out = [((n,), [S(0)]), ((n,), [S(1)]), ((n,), [R])]
    if n == 4:
        out += [((2, 2), [S(0), S(1)]), ((2, 2), [S(1), S(0)]), ((2, 2), [R, S(0)]), ((2, 2), [S(0), S(0)])]
    return out


def placed(a: np.ndarray, placements: list) -> list:
    """``placements`` fitted to ``a``'s ndim: a Shard of a dim it lacks becomes Shard(0) (Replicate for 0-d)."""
    return [S(p.dim % a.ndim) if isinstance(p, dt.Shard) and a.ndim else (R if isinstance(p, dt.Shard) else p)
            for p in placements]


@contextlib.contextmanager
def shared_dir(world, tmp_path: Path):
    """A directory every rank agrees on: ``tmp_path``, or under MPI one rank 0 makes, shares and finally removes.

    (Each MPI rank's own ``tmp_path`` is a numbered pytest directory that another rank's pytest may clean away.)
    """
    if world.kind == "simulated":
        yield str(tmp_path)
        return
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    root = comm.bcast(tempfile.mkdtemp(prefix="dtensor_np_checkpoint_") if comm.rank == 0 else None, root=0)
    try:
        yield root
    finally:
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(root, ignore_errors=True)


def state(kind: str) -> dict:
    tree = {"step": 25, "lr": 3e-3, "name": "run", "key": np.array([7, 38], np.uint32), "pi": np.float64(np.pi),
            "nested": [{"n": 1}, (True,)], "arrays": {}}
    for k, a in FULL.items():
        shape, placements = SAVED[k]
        mesh = dt.DeviceMesh(shape, backend=kind)
        value = a / 2 if k == "g" else a  # two Partial shards of a/2 sum to a
        tree["arrays"][k] = dt.distribute_tensor(value, mesh, placed(a, placements))
        if k == "g":  # distribute_tensor of a Partial puts the value on one rank: make both hold a/2
            tree["arrays"][k] = dt.DTensor({r: np.asarray(value[spec_index(tree["arrays"][k], r)])
                                            for r in tree["arrays"][k].shards}, tree["arrays"][k].spec)
    return tree


def spec_index(x: dt.DTensor, r: int) -> tuple:
    return x.spec.local_index(r)


def target(kind_of: callable) -> dict:
    return {"step": 0, "lr": 0.0, "name": "", "key": np.zeros(2, np.uint32), "pi": np.float64(0),
            "nested": [{"n": 0}, (False,)], "arrays": {k: kind_of(k, a) for k, a in FULL.items()}}


def check_loaded(out: dict) -> None:
    assert (out["step"], out["lr"], out["name"], out["nested"]) == (25, 3e-3, "run", [{"n": 1}, (True,)])
    assert out["key"].dtype == np.uint32 and out["key"].tolist() == [7, 38]
    assert type(out["pi"]) is np.float64 and out["pi"] == np.pi
    for k, a in FULL.items():
        x = out["arrays"][k]
        assert x.shape == a.shape and x.dtype == a.dtype, k
        for r, block in x.local_shards().items():
            np.testing.assert_array_equal(block, a[x.spec.local_index(r)], err_msg=f"{k} rank {r} {x.spec}")


def load_everywhere(path: str, world) -> int:
    """Load onto every layout of 1, 2, 3 and 4 ranks; returns the loads done.

    A mesh whose size divides the world's lives in it (under MPI the ranks outside it hold replicas); a mesh of 3
    ranks in a world of 4 is simulated in each process.
    """
    loads = 0
    for n in (1, 2, 3, 4):
        inside = world.size % n == 0
        for shape, placements in layouts(n):
            mesh = dt.DeviceMesh(shape, backend=world.kind if inside else "simulated",
                                 world_size=world.size if inside else None)
            spec_target = target(lambda k, a: dt.checkpoint.Spec(a.shape, a.dtype, mesh, placed(a, placements)))
            check_loaded(dt.checkpoint.load(path, spec_target))
            tensor_target = target(lambda k, a: dt.distribute_tensor(np.zeros_like(a), mesh, placed(a, placements)))
            check_loaded(dt.checkpoint.load(path, tensor_target))
            loads += 2
    return loads


OPEN_STORE = loading.open_store


class CountingStore:
    """Wraps the Zarr store of a load to count the chunk bytes it reads."""

    def __init__(self) -> None:
        self.bytes = 0

    def open(self, path: str):
        from zarr.storage import WrapperStore

        counter = self

        class Counted(WrapperStore):
            async def get(self, key, prototype=None, byte_range=None):
                buf = await self._store.get(key, prototype, byte_range)
                if buf is not None and not key.endswith("zarr.json"):
                    counter.bytes += len(buf)
                return buf

        return Counted(OPEN_STORE(path))


@pytest.mark.worlds(simulated=(4,), mpi=(4,))
def test_save_on_4_ranks_then_load_on_1_to_4_ranks_with_every_placement(world, tmp_path, monkeypatch):
    with shared_dir(world, tmp_path) as root:
        save_and_load(world, root, monkeypatch)


def save_and_load(world, root: str, monkeypatch) -> None:
    path = os.path.join(root, "ckpt")
    dt.checkpoint.save(path, state(world.kind))
    assert load_everywhere(path, world) == 2 * (3 * 4 + 4)
    # a second save replaces the first, leaving nothing else beside it
    newer = state(world.kind)
    newer["step"] = 50
    dt.checkpoint.save(path, newer).wait()
    assert dt.checkpoint.load(path, target(lambda k, a: dt.checkpoint.Spec(a.shape, a.dtype, dt.DeviceMesh((1,)),
                                                                           [R] * 1)))["step"] == 50
    # async: nothing at the path until wait(), which commits on every rank
    path2 = os.path.join(root, "async")
    handle = dt.checkpoint.save(path2, state(world.kind), async_=True)
    assert not os.path.exists(path2) and not handle.done()
    work = dt.distribute_tensor(np.arange(12.0).reshape(4, 3), dt.DeviceMesh((world.size,), backend=world.kind),
                                [S(0)])
    total = float(np.sum(work @ work.T))  # collectives of a computation while the writes run
    handle.wait()
    assert handle.done() and total == float(np.sum(np.arange(12.0).reshape(4, 3) @ np.arange(12.0).reshape(4, 3).T))
    check_loaded(dt.checkpoint.load(path2, target(
        lambda k, a: dt.checkpoint.Spec(a.shape, a.dtype, dt.DeviceMesh((world.size,), backend=world.kind),
                                        placed(a, [S(1)])))))
    assert sorted(os.listdir(root)) == ["async", "ckpt"]
    # a mismatch raises on every rank before any data is read
    with pytest.raises(dt.ShardingError, match=r"missing \['step'\], extra \[\]"):
        bad = target(lambda k, a: dt.checkpoint.Spec(a.shape, a.dtype, dt.DeviceMesh((1,)), [R]))
        del bad["step"]
        dt.checkpoint.load(path, bad)
    # bytes read per rank on a resharding load: about its block, not the array
    monkeypatch.setattr(saving, "CHUNK_BYTES", 16 << 10)
    big = np.arange(256 * 256, dtype=np.float64).reshape(256, 256)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    dt.checkpoint.save(os.path.join(root, "big"), {"a": dt.distribute_tensor(big, mesh, [S(0)])})
    for n, placements in ((4, [S(1)]), (3, [S(0)]), (3, [S(1)]), (2, [S(1)])):
        kind = world.kind if n == world.size else "simulated"
        spec = dt.checkpoint.Spec(big.shape, big.dtype, dt.DeviceMesh((n,), backend=kind), placements)
        counter = CountingStore()
        monkeypatch.setattr(loading, "open_store", counter.open)
        out = dt.checkpoint.load(os.path.join(root, "big"), {"a": spec})["a"]
        blocks = {r: b.nbytes for r, b in out.local_shards().items()}
        for r, b in out.local_shards().items():
            np.testing.assert_array_equal(b, big[out.spec.local_index(r)])
        need = sum(blocks.values())
        assert need <= counter.bytes <= 1.8 * need, (n, placements, counter.bytes, blocks)
        if n == 4:  # aligned with the 32 x 64 chunks: exactly the block
            assert counter.bytes == need


def test_chunks_follow_torch_chunk_and_split_large_blocks():
    spec = dt.DTensorSpec(dt.DeviceMesh((4,)), (S(0),), dt.TensorMeta((10, 3), "f8"))
    assert chunk_shape(spec.shape, [spec.local_block(r) for r in range(4)]) == (3, 3)
    spec = dt.DTensorSpec(dt.DeviceMesh((2, 2)), (S(0), S(0)), dt.TensorMeta((8, 3), "f8"))
    assert chunk_shape(spec.shape, [spec.local_block(r) for r in range(4)]) == (2, 3)
    spec = dt.DTensorSpec(dt.DeviceMesh((4,)), (S(0),), dt.TensorMeta((5, 0), "f8"))  # empty array
    assert chunk_shape(spec.shape, [spec.local_block(r) for r in range(4)]) == (2, 1)
    # 256 x 256 float64 in row blocks of 64: 16 KiB chunks of 32 x 64, every block a union of them
    spec = dt.DTensorSpec(dt.DeviceMesh((4,)), (S(0),), dt.TensorMeta((256, 256), "f8"))
    assert chunk_shape(spec.shape, [spec.local_block(r) for r in range(4)], 8, 16 << 10) == (32, 64)


@settings(max_examples=25)
@given(st.data())
def test_any_saved_layout_loads_onto_any_other(data):
    def layout(n: int, ndim: int):
        shape = data.draw(st.sampled_from([(n,), (1, n), (n, 1)] + ([(2, n // 2)] if n % 2 == 0 else [])))
        placements = [data.draw(st.sampled_from([R] + [S(d) for d in range(ndim)])) for _ in shape]
        return dt.DeviceMesh(shape), placements

    ndim = data.draw(st.integers(1, 3))
    full = np.arange(np.prod(shape := data.draw(st.tuples(*[st.integers(0, 6)] * ndim)), dtype=np.int64)
                     ).reshape(shape) - 7
    mesh, placements = layout(data.draw(st.integers(1, 5)), ndim)
    x = dt.distribute_tensor(full, mesh, placements)
    with tempfile.TemporaryDirectory() as root:
        dt.checkpoint.save(os.path.join(root, "c"), [x])
        mesh2, placements2 = layout(data.draw(st.integers(1, 5)), ndim)
        (y,) = dt.checkpoint.load(os.path.join(root, "c"), [dt.checkpoint.Spec(shape, full.dtype, mesh2, placements2)])
    for r, block in y.local_shards().items():
        np.testing.assert_array_equal(block, full[y.spec.local_index(r)])


def test_mismatches_raise_before_reading(tmp_path, monkeypatch):
    mesh = dt.DeviceMesh((2,))
    path = str(tmp_path / "c")
    dt.checkpoint.save(path, {"x": dt.distribute_tensor(np.ones((3, 2)), mesh, [S(0)]), "step": 1})
    monkeypatch.setattr(loading, "open_store", lambda p: pytest.fail("read data before checking the target"))
    spec = dt.checkpoint.Spec((3, 2), "float64", mesh, [S(1)])
    cases = [
        ({"x": dt.checkpoint.Spec((3, 3), "float64", mesh, [S(0)]), "step": 0}, dt.ShardingError,
         r"expected shape \(3, 3\) and dtype float64 as the target, got shape \(3, 2\)"),
        ({"x": dt.checkpoint.Spec((3, 2), "float32", mesh, [S(0)]), "step": 0}, dt.ShardingError, "dtype float32"),
        ({"x": spec}, dt.ShardingError, r"missing \['step'\], extra \[\]"),
        ({"x": spec, "step": 0, "more": 1}, dt.ShardingError, r"missing \[\], extra \['more'\]"),
        ({"x": spec, "step": 0.0}, TypeError, "expected a int target, got float"),
        ({"x": np.zeros((3, 2)), "step": 0}, TypeError, "expected a DTensor or Spec target for a saved DTensor"),
        ({"x": dt.checkpoint.Spec((3, 2), "float64", mesh, [P]), "step": 0}, dt.ShardingError,
         "expected Shard or Replicate target placements"),
    ]
    for tree, error, match in cases:
        with pytest.raises(error, match=match):
            dt.checkpoint.load(path, tree)
    with pytest.raises(dt.ShardingError, match="expected a checkpoint directory holding checkpoint.json"):
        dt.checkpoint.load(str(tmp_path), {"x": spec})
    meta = (Path(path) / "checkpoint.json").read_text()
    (Path(path) / "checkpoint.json").write_text(meta.replace('"version": 1', '"version": 99'))
    with pytest.raises(dt.ShardingError, match="expected a checkpoint format version from 1 to 1, got 99"):
        dt.checkpoint.load(path, {"x": spec, "step": 0})
    with pytest.raises(TypeError, match="checkpoint leaf 'f': expected a DTensor, an array, a number or a string"):
        dt.checkpoint.save(str(tmp_path / "d"), {"f": object()})
    with pytest.raises(dt.ShardingError, match="expected a new path or an old checkpoint to replace"):
        dt.checkpoint.save(str(tmp_path), {"step": 1})
    with pytest.raises(TypeError, match="expected str or int dict keys"):
        dt.checkpoint.save(str(tmp_path / "e"), {(1, 2): 1})
    assert not (tmp_path / "d").exists() and not (tmp_path / "e").exists()


def test_a_failed_write_raises_and_replaces_nothing(tmp_path, monkeypatch):
    path = str(tmp_path / "c")
    mesh = dt.DeviceMesh((2,))
    dt.checkpoint.save(path, {"x": dt.distribute_tensor(np.ones(3), mesh, [S(0)])})

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saving, "_write_chunk", full_disk)
    with pytest.raises(OSError, match=r"failed on this rank: .*No space left on device.*nothing was replaced"):
        dt.checkpoint.save(path, {"x": dt.distribute_tensor(np.zeros(3), mesh, [S(0)])})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["c"]  # the temporary directory is gone
    out = dt.checkpoint.load(path, {"x": dt.checkpoint.Spec((3,), "float64", mesh, [R])})["x"]
    assert out.full_tensor().tolist() == [1.0, 1.0, 1.0]


KILL_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, dtensor_np as dt
    path, step = sys.argv[1], int(sys.argv[2])
    mesh = dt.DeviceMesh((2,), backend="mpi")
    x = dt.distribute_tensor(np.arange(40.0).reshape(8, 5) * step, mesh, [dt.Shard(0)])
    dt.checkpoint.save(path, {"x": x, "step": step})
    print("saved", step, flush=True)
""")


def test_a_rank_killed_during_a_save_leaves_the_previous_checkpoint(tmp_path):
    script = tmp_path / "save.py"
    script.write_text(KILL_SCRIPT)
    path = str(tmp_path / "ckpt")
    run = [str(MPIEXEC), "-n", "2", sys.executable, str(script), path]
    ok = subprocess.run(run + ["1"], env=clean_mpi_env(), capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    env = clean_mpi_env() | {saving.KILL_RANK_ENV: "1"}
    killed = subprocess.run(run + ["2"], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode != 0 and "saved" not in killed.stdout
    assert any(".ckpt.tmp-" in name for name in os.listdir(tmp_path))  # the half-written save, never committed
    spec = dt.checkpoint.Spec((8, 5), "float64", dt.DeviceMesh((3,)), [S(1)])
    out = dt.checkpoint.load(path, {"x": spec, "step": 0})
    assert out["step"] == 1
    np.testing.assert_array_equal(out["x"].full_tensor(), np.arange(40.0).reshape(8, 5))


def test_a_crash_between_the_renames_loads_the_old_checkpoint(tmp_path):
    path = str(tmp_path / "ckpt")
    dt.checkpoint.save(path, {"step": 1})
    os.rename(path, str(tmp_path / ".ckpt.old-abc"))  # rank 0 died after moving the old one aside
    assert dt.checkpoint.load(path, {"step": 0}) == {"step": 1}


@pytest.mark.gpu
def test_cupy_shards_save_and_load_on_the_device(cupy, tmp_path):
    full = np.arange(30.0).reshape(5, 6)
    mesh = dt.DeviceMesh((4,))
    x = dt.distribute_tensor(cupy.asarray(full), mesh, [S(0)])
    handle = dt.checkpoint.save(str(tmp_path / "c"), {"x": x}, async_=True)
    handle.wait()
    like = dt.distribute_tensor(cupy.zeros((5, 6)), dt.DeviceMesh((3,)), [S(1)])
    out = dt.checkpoint.load(str(tmp_path / "c"), {"x": like})["x"]
    for r, block in out.local_shards().items():
        assert isinstance(block, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(block), full[out.spec.local_index(r)])


def test_training_resumed_on_another_mesh_reproduces_the_uninterrupted_losses(tmp_path):
    from dtensor_np.examples import train as example

    cfg = example.Config(layers=1, d_model=16, heads=2, d_ff=32, seq=8)
    kw = dict(cfg=cfg, batch_size=8, lr=3e-3, seed=0, text_chars=2000)
    m22 = dt.DeviceMesh((2, 2), ("dp", "tp"))
    whole = example.train(m22, steps=50, **kw)
    first = example.train(m22, steps=25, save=str(tmp_path / "run"), **kw)
    assert first.losses == whole.losses[:25]
    for mesh in (dt.DeviceMesh((4, 1), ("dp", "tp")), dt.DeviceMesh((1, 1), ("dp", "tp")), None):
        resumed = example.train(mesh, steps=25, resume=str(tmp_path / "run"), **kw)
        assert resumed.first_step == 25 and len(resumed.losses) == 25
        np.testing.assert_allclose(resumed.losses, whole.losses[25:], rtol=1e-12, atol=0, err_msg=str(mesh))
    # a run that differs from the saved one (here: dropout) is refused, not continued on other masks or data
    with pytest.raises(dt.ShardingError, match=r"expected dropout=0\.0 \(as saved\), got dropout=0\.1"):
        example.train(m22, steps=1, resume=str(tmp_path / "run"), dropout=0.1, **kw)
    # the command line: --save, then --resume on another mesh, each checked against one device
    args = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq", "8", "--plot", ""]
    assert example.main(args + ["--steps", "3", "--save", str(tmp_path / "cli")]) == 0
    assert example.main(args + ["--steps", "2", "--dp", "4", "--tp", "1", "--resume", str(tmp_path / "cli")]) == 0


def test_the_benchmark_runs_and_checks_its_loads(tmp_path):
    import importlib.util
    import json

    where = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_checkpoint.py"
    module_spec = importlib.util.spec_from_file_location("bench_checkpoint", where)
    bench = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(bench)
    assert bench.main(["--sizes", "64KiB", "--repeats", "1", "--dir", str(tmp_path), "--json",
                       str(tmp_path / "rows.json")]) == 0
    (row,) = json.loads((tmp_path / "rows.json").read_text())
    assert row["values_equal"] and row["ranks"] == 4 and row["reshard_read_bytes"] >= row["reshard_block_bytes"] > 0


def test_async_save_of_fsdp_buckets_overlaps_a_training_step(tmp_path):
    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(3, 5)), "w2": rng.normal(size=(5, 1))}
    x, y = rng.normal(size=(8, 3)), rng.normal(size=(8, 1))

    def loss_fn(p, x, y):
        return np.mean((np.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)

    step = dt.fsdp(loss_fn, params, x, y, mesh=dt.DeviceMesh((2, 2), ("dp", "tp")), bucket_mb=1e-6)
    opt = dt.optim.adamw(1e-2)
    flat = step.shard(params)
    state = opt.init(flat)
    handle = dt.checkpoint.save(str(tmp_path / "c"), {"flat": flat, "adam": {"step": state.step, "mu": state.mu}},
                                async_=True)
    loss, grads = step.value_and_grad(flat, x, y)  # the step runs while the thread writes
    new_flat, state = opt.update(grads, state, flat)
    handle.wait()
    target = {"flat": {k: v.spec for k, v in flat.items()}, "adam": {"step": 0, "mu": {k: v.spec for k, v in flat.items()}}}
    out = dt.checkpoint.load(str(tmp_path / "c"), target)
    assert out["adam"]["step"] == 0 and state.step == 1
    for k, v in flat.items():  # the values at the save, not after the step
        np.testing.assert_array_equal(out["flat"][k].full_tensor(), v.full_tensor())
        assert not np.array_equal(new_flat[k].full_tensor(), v.full_tensor())


@pytest.mark.parametrize("dtype", ["float64", ">f4", "int16", "bool", "complex64"])
def test_chunk_files_are_the_bytes_zarr_writes(tmp_path, dtype):
    import zarr

    full = (np.arange(35).reshape(5, 7) % 3).astype(dtype)  # 5 rows over 4 ranks: an edge chunk and an empty shard
    x = dt.distribute_tensor(full, dt.DeviceMesh((4,)), [S(0)])
    dt.checkpoint.save(str(tmp_path / "c"), {"x": x})
    ours = zarr.open_array(str(tmp_path / "c" / "leaf0"), mode="r")
    theirs = zarr.create_array(str(tmp_path / "z"), shape=full.shape, chunks=ours.chunks, dtype=ours.dtype,
                               fill_value=0, compressors=None)
    theirs[...] = full
    files = sorted(p.relative_to(tmp_path / "z") for p in (tmp_path / "z").rglob("*") if p.is_file()
                   and p.name != "zarr.json")
    assert files == sorted(p.relative_to(tmp_path / "c" / "leaf0") for p in (tmp_path / "c" / "leaf0").rglob("*")
                           if p.is_file() and p.name != "zarr.json")
    for f in files:
        assert (tmp_path / "z" / f).read_bytes() == (tmp_path / "c" / "leaf0" / f).read_bytes(), f
    np.testing.assert_array_equal(ours[...], full)
