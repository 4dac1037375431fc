"""``save``: every rank writes the chunks it owns into a temporary directory, then rank 0 commits by rename.

The steps, the same on every rank (``save`` is collective):

1. every leaf is checked (a DTensor, a number, a string or a plain array) and
   every Partial is reduced (``redistribute`` to Replicate): TypeError or
   ShardingError on every rank before any collective;
2. rank 0 draws the temporary directory's name and shares it
   (``gather_descriptors``), creates it with each array's Zarr metadata,
   chunked on the DTensor's own sharding (:func:`.metadata.chunk_shape`);
   ``all_true`` tells every rank it exists;
3. each rank writes the blocks it holds, skipping empty ones and those of
   which a lower rank holds a replica: one writer per chunk;
4. ``all_true`` over every rank's success; rank 0 writes ``checkpoint.json``
   and renames the directory into place (an old checkpoint at ``path`` is
   renamed aside first and removed after); ``all_true`` again.

With ``async_=True`` step 3 copies the blocks to host memory and writes them
in a background thread; step 4 runs in :meth:`SaveHandle.wait`.  A rank that
dies before step 4 leaves the previous checkpoint untouched.

Example:
    >>> import numpy as np, tempfile, os, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(10.0), dt.DeviceMesh((4,)), [dt.Shard(0)])
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> save(path, {"x": x, "step": 7}).wait()
    >>> sorted(os.listdir(os.path.join(path, "leaf1", "c")))  # leaf 1 (after "step"): chunks of 3, 3, 3, 1
    ['0', '1', '2', '3']
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import threading
from typing import Any, Callable, Optional

import numpy as np

import collectives

from ..dtensor import DTensor
from ..errors import ShardingError
from ..graph.pytree import flatten
from ..placements import Partial, Replicate
from ..runtime import backend_for
from .metadata import METADATA_FILE, array_name, chunk_shape, encode_tree

__all__ = ["save", "SaveHandle", "CHUNK_BYTES", "KILL_RANK_ENV", "world_backend"]

CHUNK_BYTES = 1 << 20
"""The most bytes in one stored chunk where the sharding allows (larger blocks are split in several chunks)."""
KILL_RANK_ENV = "DTENSOR_NP_CHECKPOINT_KILL_RANK"
"""Test hook: the world rank named here kills itself (SIGKILL) after writing its first chunk of a save."""

Write = tuple[int, tuple[slice, ...], Any]  # (leaf index, the block's index, the block's data)


def world_backend(meshes: list[Any]) -> Optional["collectives.Backend"]:
    """The backend that synchronises a save or load of arrays on ``meshes``; None for a single process.

    Example:
        >>> world_backend([]) is None
        True
    """
    if meshes:
        backend = backend_for(meshes[0])
        for mesh in meshes[1:]:
            if mesh.backend != meshes[0].backend or mesh.world_size != meshes[0].world_size:
                raise ShardingError(f"expected every DTensor of a checkpoint in one world, got meshes on "
                                    f"{meshes[0].world_size} {meshes[0].backend} and {mesh.world_size} {mesh.backend} ranks")
        return backend
    if collectives.launched_by_mpiexec() and (collectives.mpi_world_size() or 1) > 1:
        return collectives.get_backend("mpi")
    return None


class SaveHandle:
    """A save in progress: :meth:`wait` (collective) finishes it; a synchronous save returns a done one.

    Example:
        >>> SaveHandle(None, lambda: None).wait()
    """

    def __init__(self, thread: Optional[threading.Thread], finish: Callable[[], None]) -> None:
        self._thread = thread
        self._finish: Optional[Callable[[], None]] = finish

    def done(self) -> bool:
        """True once :meth:`wait` has returned."""
        return self._finish is None

    def wait(self) -> None:
        """Wait for this process's writes, then commit on every rank together (raises on every rank if one failed)."""
        if self._thread is not None:
            self._thread.join()
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()


def _host(a: Any, copy: bool) -> np.ndarray:
    if collectives.is_device_array(a):
        return a.get()
    return np.array(a, copy=True) if copy else np.asarray(a)


def _plan_writes(index: int, x: DTensor, copy: bool) -> tuple[dict[str, Any], list[Write]]:
    """The Zarr array record of DTensor leaf ``index`` and the blocks this process writes."""
    spec = x.spec
    ranks = spec.mesh.all_ranks
    blocks = {r: spec.local_block(r) for r in ranks}
    writer: dict[tuple, int] = {}
    for r in ranks:
        shape, offset = blocks[r]
        if all(shape):
            writer.setdefault((shape, offset), r)
    chunks = chunk_shape(spec.shape, list(blocks.values()), spec.dtype.itemsize, CHUNK_BYTES)
    writes = []
    for r, shard in x.shards.items():
        shape, offset = blocks[r]
        if all(shape) and writer[(shape, offset)] == r:
            writes.append((index, tuple(slice(o, o + n) for o, n in zip(offset, shape)), _host(shard, copy)))
    record = {"kind": "array", "array": array_name(index), "shape": list(spec.shape), "dtype": spec.dtype.str,
              "chunks": list(chunks), "placements": str(spec), "mesh": list(spec.mesh.shape)}
    return record, writes


def _write_chunk(file: str, chunk: np.ndarray) -> None:
    """One stored chunk: its bytes, little-endian, C order (Zarr v3's ``bytes`` codec, no compression)."""
    np.ascontiguousarray(chunk, dtype=chunk.dtype.newbyteorder("<")).tofile(file)


def _write_block(folder: str, chunks: tuple[int, ...], where: tuple[slice, ...], data: np.ndarray) -> None:
    """The chunks of one block (a union of whole chunks): each written straight to its file, as Zarr reads it.

    A chunk at the array's end is padded to the whole chunk shape with the fill value 0, as Zarr stores it.
    """
    if not chunks:
        _write_chunk(os.path.join(folder, "c"), data)
        return
    made: set[str] = set()
    grid = [range(w.start // c, -(-w.stop // c)) for w, c in zip(where, chunks)]
    for index in itertools.product(*grid):
        part = data[tuple(slice(i * c - w.start, min((i + 1) * c, w.stop) - w.start)
                          for i, c, w in zip(index, chunks, where))]
        if part.shape != chunks:
            whole = np.zeros(chunks, part.dtype)
            whole[tuple(slice(0, n) for n in part.shape)] = part
            part = whole
        head = os.path.join(folder, "c", *(str(i) for i in index[:-1]))
        if head not in made:
            os.makedirs(head, exist_ok=True)
            made.add(head)
        _write_chunk(os.path.join(head, str(index[-1])), part)


def _write(root: str, records: dict[int, dict[str, Any]], writes: list[Write], errors: list[BaseException]) -> None:
    """Write the blocks (in this process; no collective), recording a failure in ``errors``.

    The files are those Zarr writes for these arrays (``bytes`` codec, no
    compression, default chunk keys ``c/i/j``); writing them directly is about
    as fast as ``np.save`` where Zarr's own path took several times longer.
    """
    try:
        kill = os.environ.get(KILL_RANK_ENV)
        for n, (index, where, data) in enumerate(writes):
            record = records[index]
            _write_block(os.path.join(root, record["array"]), tuple(record["chunks"]), where, data)
            if n == 0 and kill is not None and collectives.launched_by_mpiexec():
                if int(kill) == collectives.get_backend("mpi").rank:
                    os.kill(os.getpid(), 9)
    except BaseException as e:  # reported to every rank by the commit's all_true
        errors.append(e)


def _create(root: str, records: dict[int, dict[str, Any]]) -> None:
    import zarr
    from zarr.storage import LocalStore

    os.makedirs(root)
    store = LocalStore(root)
    zarr.open_group(store, mode="w", zarr_format=3)
    for record in records.values():
        zarr.create_array(store, name=record["array"], shape=tuple(record["shape"]), chunks=tuple(record["chunks"]),
                          dtype=np.dtype(record["dtype"]), fill_value=0, compressors=None, zarr_format=3)


def _commit(root: str, path: str, meta: dict[str, Any], token: str) -> None:
    """Rank 0: write the metadata, then rename ``root`` to ``path`` (an old checkpoint goes aside, then away)."""
    with open(os.path.join(root, METADATA_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    if os.path.lexists(path):
        old = _sibling(path, "old", token)
        os.rename(path, old)
        os.rename(root, path)
        shutil.rmtree(old)
    else:
        os.rename(root, path)


def _sibling(path: str, what: str, token: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.{what}-{token}")


def _agree(backend: Optional["collectives.Backend"], ok: bool, root_only: bool = False) -> bool:
    """True on every rank when ``ok`` holds on every rank (on rank 0 only with ``root_only``)."""
    if backend is None:
        return ok
    return backend.all_true({r: ok or (root_only and r != 0) for r in backend.ranks})


def _token(backend: Optional["collectives.Backend"]) -> str:
    """A random name for this save's temporary directory, drawn by rank 0 and known to every rank."""
    drawn = secrets.randbits(62)
    if backend is None:
        return f"{drawn:x}"
    shared = backend.gather_descriptors({r: (drawn if r == 0 else 0,) for r in backend.ranks})
    return f"{shared[0][0]:x}"


def save(path: "os.PathLike[str] | str", tree: Any, *, async_: bool = False) -> SaveHandle:
    """Save a pytree of DTensors and values to the directory ``path``, atomically (collective: every rank calls it).

    Each stored Zarr chunk has one writer; replicated blocks are written once
    and Partial DTensors reduced first.  ``path`` is replaced only when every
    rank has written its chunks.  With ``async_`` the blocks are copied to host
    memory now and written in a background thread: call ``wait()`` on the
    returned handle (on every rank) to commit.  Without, the handle returned
    is done.

    Raises:
        TypeError: a leaf that is not a DTensor, number, string or plain array, or a path that is not one.
        ShardingError: ``path`` exists and is not a checkpoint; DTensors in different worlds.

    Example:
        >>> import numpy as np, tempfile, os, dtensor_np as dt
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> w = dt.distribute_tensor(np.ones((3, 2)), dt.DeviceMesh((2,)), [dt.Partial()])
        >>> handle = save(path, {"w": w}, async_=True)
        >>> handle.wait(); handle.done(), sorted(os.listdir(path))
        (True, ['checkpoint.json', 'leaf0', 'zarr.json'])
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"expected a directory path, got {type(path).__name__}")
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path) and not os.path.isfile(os.path.join(path, METADATA_FILE)):
        raise ShardingError(f"expected a new path or an old checkpoint to replace, got {path!r}, which is neither")
    leaves, _ = flatten(tree)
    tensors = {i: x for i, x in enumerate(leaves) if isinstance(x, DTensor)}
    meta = encode_tree(tree, {i: {} for i in tensors})  # checks every other leaf before any collective
    backend = world_backend([x.mesh for x in tensors.values()])
    records, writes = {}, []
    for i, x in tensors.items():
        if any(isinstance(p, Partial) for p in x.placements):
            x = x.redistribute([Replicate() if isinstance(p, Partial) else p for p in x.placements])
        records[i], mine = _plan_writes(i, x, copy=async_)
        writes += mine
    meta = encode_tree(tree, records)
    token = _token(backend)
    root = _sibling(path, "tmp", token)
    is_root = backend is None or 0 in backend.ranks
    created = True
    if is_root:
        try:
            _create(root, records)
        except Exception:  # noqa: BLE001 - every rank raises below, none waits for rank 0 forever
            created = False
    if not _agree(backend, created, root_only=True):
        raise OSError(f"checkpoint save to {path!r}: rank 0 could not create {root!r}")
    errors: list[BaseException] = []

    def finish() -> None:
        if not _agree(backend, not errors):
            if is_root:
                shutil.rmtree(root, ignore_errors=True)
            raise OSError(f"checkpoint save to {path!r} failed on "
                          + (f"this rank: {errors[0]!r}" if errors else "another rank") + "; nothing was replaced")
        committed = True
        if is_root:
            try:
                _commit(root, path, meta, token)
            except Exception:  # noqa: BLE001 - every rank raises below
                committed = False
        if not _agree(backend, committed, root_only=True):
            raise OSError(f"checkpoint save to {path!r}: rank 0 could not commit {root!r}")

    if not async_:
        _write(root, records, writes, errors)
        finish()
        return SaveHandle(None, lambda: None)
    thread = threading.Thread(target=_write, args=(root, records, writes, errors), name="checkpoint-save", daemon=True)
    thread.start()
    return SaveHandle(thread, finish)

