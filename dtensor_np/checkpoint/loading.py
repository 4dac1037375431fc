"""``load``: each rank reads, from the Zarr chunks, only the block its target placement gives it.

The target says where every array goes: a DTensor (its mesh, placements
and array library: CuPy shards load onto the device) or a :class:`Spec`
(or a :class:`~dtensor_np.DTensorSpec`), on any mesh and world size.  The
metadata is checked against the whole target first (the same file on every
rank, so the same error on every rank, and no collective at all); then each
rank slices its blocks out of the Zarr arrays, which reads only the chunks
that intersect them.

Example:
    >>> import numpy as np, tempfile, os, dtensor_np as dt
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> x = dt.distribute_tensor(np.arange(12.0).reshape(3, 4), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> dt.checkpoint.save(path, {"x": x, "step": 5})  # doctest: +ELLIPSIS
    <...SaveHandle object at ...>
    >>> target = {"x": Spec((3, 4), "float64", dt.DeviceMesh((3,)), [dt.Shard(1)]), "step": 0}
    >>> out = load(path, target)
    >>> out["step"], out["x"].local_shards()[1].tolist(), out["x"].local_shards()[2].shape
    (5, [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]], (3, 0))
    >>> bool((out["x"].full_tensor() == x.full_tensor()).all())
    True
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

import collectives

from ..dtensor import DTensor
from ..errors import ShardingError
from ..graph.pytree import flatten, leaves_with_paths, path_name, unflatten
from ..mesh import DeviceMesh
from ..placements import Partial, Placement
from ..runtime import backend_for
from ..spec import DTensorSpec, TensorMeta
from .metadata import decode_value, read_metadata

__all__ = ["Spec", "load", "open_store"]


@dataclass(frozen=True)
class Spec:
    """Where and how to load one array: global shape, dtype, mesh and placements (a DTensor without data).

    Example:
        >>> import dtensor_np as dt
        >>> str(Spec((4, 2), "float32", dt.DeviceMesh((2,)), [dt.Shard(0)]).dtensor_spec())
        'S(0)'
    """

    shape: tuple[int, ...]
    dtype: Any
    mesh: DeviceMesh
    placements: Sequence[Placement]

    def dtensor_spec(self) -> DTensorSpec:
        """The :class:`~dtensor_np.DTensorSpec` of this target."""
        if not isinstance(self.mesh, DeviceMesh):
            raise TypeError(f"expected a DeviceMesh in a checkpoint Spec, got {type(self.mesh).__name__}")
        return DTensorSpec(self.mesh, tuple(self.placements), TensorMeta(tuple(self.shape), self.dtype))


def open_store(path: str) -> Any:
    """The read-only Zarr store of the checkpoint directory ``path`` (a test wraps it to count the bytes read).

    Example:
        >>> open_store(".").read_only
        True
    """
    from zarr.storage import LocalStore

    return LocalStore(path, read_only=True)


def _resolve(path: str) -> str:
    """``path``, or, where a crash between rank 0's two renames left none, the complete checkpoint set aside."""
    if os.path.lexists(path):
        return path
    head, name = os.path.split(path)
    aside = sorted(glob.glob(os.path.join(glob.escape(head), f".{glob.escape(name)}.old-*")), key=os.path.getmtime)
    return aside[-1] if aside else path


def _target_spec(leaf: Any) -> DTensorSpec | None:
    if isinstance(leaf, DTensor):
        return leaf.spec
    if isinstance(leaf, DTensorSpec):
        return leaf
    if isinstance(leaf, Spec):
        return leaf.dtensor_spec()
    return None


def _check(name: str, record: dict[str, Any], leaf: Any, spec: DTensorSpec | None) -> None:
    """Raise when the saved leaf ``record`` cannot load into the target ``leaf``."""
    kind = record["kind"]
    if spec is not None:
        if kind != "array":
            raise TypeError(f"checkpoint leaf {name!r}: expected a saved DTensor for a DTensor target, got a {kind}")
        if any(isinstance(p, Partial) for p in spec.placements):
            raise ShardingError(f"checkpoint leaf {name!r}: expected Shard or Replicate target placements, got {spec}")
        saved = (tuple(record["shape"]), np.dtype(record["dtype"]))
        if saved != (spec.shape, spec.dtype):
            raise ShardingError(f"checkpoint leaf {name!r}: expected shape {spec.shape} and dtype {spec.dtype} "
                                f"as the target, got shape {saved[0]} and dtype {saved[1]} in the checkpoint")
        return
    if kind == "array":
        raise TypeError(f"checkpoint leaf {name!r}: expected a DTensor or Spec target for a saved DTensor, "
                        f"got {type(leaf).__name__}")
    if kind == "value":
        if type(leaf).__name__ != record["type"]:
            raise TypeError(f"checkpoint leaf {name!r}: expected a {record['type']} target, got {type(leaf).__name__}")
        return
    value = decode_value(record)
    if not isinstance(leaf, (np.ndarray, np.generic)) and not collectives.is_device_array(leaf):
        raise TypeError(f"checkpoint leaf {name!r}: expected an array target, got {type(leaf).__name__}")
    if (np.shape(leaf), np.dtype(leaf.dtype)) != (value.shape, value.dtype):
        raise ShardingError(f"checkpoint leaf {name!r}: expected shape {np.shape(leaf)} and dtype {leaf.dtype} "
                            f"as the target, got shape {value.shape} and dtype {value.dtype}")


def _read(array: Any, spec: DTensorSpec, ranks: Sequence[int], like: Any) -> dict[int, Any]:
    """Each rank's block of the Zarr ``array`` (replicas share one read; an empty block reads nothing)."""
    out: dict[int, Any] = {}
    seen: dict[tuple, Any] = {}
    for r in ranks:
        shape, offset = spec.local_block(r)
        key = (shape, offset)
        if key not in seen:
            if all(shape):
                block = array[tuple(slice(o, o + n) for o, n in zip(offset, shape)) or ...]
                block = np.asarray(block).reshape(shape)
            else:
                block = np.empty(shape, spec.dtype)
            seen[key] = collectives.on_device_of(like, block) if like is not None else block
        out[r] = seen[key]
    return out


def load(path: "os.PathLike[str] | str", target: Any) -> Any:
    """The checkpoint at ``path`` loaded into the structure, meshes and placements of ``target``.

    ``target`` is a pytree like the saved one: DTensors or :class:`Spec`
    (or ``DTensorSpec``) leaves where DTensors were saved, and where values
    were saved a value of the same type (an array of the same shape and
    dtype) standing for the saved one.  No collective: each process reads its
    own ranks' blocks.

    Raises:
        ShardingError: ``path`` is not a checkpoint (or of a newer format version); a key is missing from or extra
            to the target; a shape or dtype differs; a Partial target placement.
        TypeError: a target leaf of the wrong kind.

    Example:
        >>> import numpy as np, tempfile, os, dtensor_np as dt
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> _ = dt.checkpoint.save(path, {"w": np.float32(2.0)})
        >>> load(path, {"w": np.float32(0)})
        {'w': np.float32(2.0)}
        >>> load(path, {"v": np.float32(0)})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        dtensor_np.errors.ShardingError: checkpoint ... missing ['w'], extra ['v'] in the target
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"expected a checkpoint directory path, got {type(path).__name__}")
    path = _resolve(os.path.abspath(os.fspath(path)))
    meta = read_metadata(path)
    saved = {tuple(leaf["path"]): leaf for leaf in meta["leaves"]}
    paths = [(p, leaf) for p, leaf in leaves_with_paths(target)]
    wanted = {p for p, _ in paths}
    if wanted != set(saved):
        missing = sorted(path_name(p) for p in set(saved) - wanted)
        extra = sorted(path_name(p) for p in wanted - set(saved))
        raise ShardingError(f"checkpoint {path!r}: expected the target to hold the saved leaves, "
                            f"missing {missing}, extra {extra} in the target")
    specs = []
    for p, leaf in paths:
        spec = _target_spec(leaf)
        _check(path_name(p), saved[p], leaf, spec)
        specs.append(spec)
    store = open_store(path) if any(s is not None for s in specs) else None
    out = []
    for (p, leaf), spec in zip(paths, specs):
        record = saved[p]
        if spec is None:
            out.append(decode_value(record))
            continue
        import zarr

        array = zarr.open_array(store, path=record["array"], mode="r")
        if isinstance(leaf, DTensor):
            ranks, like = list(leaf.shards), next(iter(leaf.shards.values()), None)
            like = like if collectives.is_device_array(like) else None
        else:
            ranks, like = list(backend_for(spec.mesh).ranks), None
        out.append(DTensor(_read(array, spec, ranks, like), spec))
    return unflatten(flatten(target)[1], out)
