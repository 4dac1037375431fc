"""The checkpoint's JSON metadata: format version, tree structure, and one record per leaf.

A checkpoint is a directory holding ``checkpoint.json`` (this module) and a
Zarr v3 group with one array per DTensor leaf (``leaf<i>``).  The JSON names
the format and its version, the pytree's structure
(:class:`~dtensor_np.graph.pytree.TreeDef` as nested objects), and for every
leaf in flatten order its path and either the array's global shape, dtype,
chunk shape, and the placements and mesh shape it was saved from, or its
value (a number or string inline, a plain array as base64 bytes).

Example:
    >>> import numpy as np
    >>> meta = encode_tree({"step": 3, "key": np.arange(2, dtype=np.uint32)})
    >>> [leaf["kind"] for leaf in meta["leaves"]], decode_value(meta["leaves"][0]).tolist()
    (['ndarray', 'value'], [0, 1])
    >>> chunk_shape((5, 4), [((2, 4), (0, 0)), ((2, 4), (2, 0)), ((1, 4), (4, 0)), ((0, 4), (5, 0))])
    (2, 4)
"""

from __future__ import annotations

import base64
import json
import math
import os
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from ..errors import ShardingError
from ..graph.pytree import TreeDef, flatten, leaves_with_paths, path_name

__all__ = ["FORMAT", "FORMAT_VERSION", "METADATA_FILE", "encode_tree", "encode_value", "decode_value",
           "decode_treedef", "chunk_shape", "read_metadata", "array_name", "is_value"]

FORMAT = "dtensor_np.checkpoint"
"""The ``format`` field of every checkpoint's metadata."""
FORMAT_VERSION = 1
"""The version this library writes; it reads this one and older ones."""
METADATA_FILE = "checkpoint.json"
"""The metadata's file name inside the checkpoint directory."""

_SCALARS = (bool, int, float, str)


def array_name(index: int) -> str:
    """The Zarr array of leaf ``index``.

    Example:
        >>> array_name(3)
        'leaf3'
    """
    return f"leaf{index}"


def is_value(x: Any) -> bool:
    """True for a leaf stored in the metadata itself: a Python number or string, a NumPy scalar or array.

    Example:
        >>> is_value(3), is_value(np.ones(2)), is_value(object())
        (True, True, False)
    """
    return isinstance(x, (_SCALARS, np.ndarray, np.generic)) or type(x).__module__.startswith("cupy")


def encode_value(x: Any) -> dict[str, Any]:
    """The record of a value leaf: inline for a Python scalar, base64 bytes for an array (exact for every dtype).

    Example:
        >>> encode_value(2.5)
        {'kind': 'value', 'type': 'float', 'value': 2.5}
    """
    if isinstance(x, _SCALARS) and not isinstance(x, np.generic):  # np.float64 is a float: kept a NumPy scalar
        return {"kind": "value", "type": type(x).__name__, "value": x}
    scalar = isinstance(x, np.generic)
    host = np.array(x.get() if type(x).__module__.startswith("cupy") else x, order="C")
    if host.dtype.hasobject:
        raise TypeError(f"expected an array of numbers to save, got dtype {host.dtype}")
    return {"kind": "ndarray", "dtype": host.dtype.str, "shape": list(host.shape), "scalar": scalar,
            "data": base64.b64encode(host.tobytes()).decode("ascii")}


def decode_value(record: Mapping[str, Any]) -> Any:
    """The value a record of :func:`encode_value` stores.

    Example:
        >>> decode_value(encode_value(np.float32(1.5)))
        np.float32(1.5)
    """
    if record["kind"] == "value":
        return record["value"]
    data = np.frombuffer(base64.b64decode(record["data"]), dtype=np.dtype(record["dtype"]))
    out = data.reshape(record["shape"]).copy()
    return out[()] if record.get("scalar") else out


def _encode_treedef(t: TreeDef) -> dict[str, Any]:
    for k in t.keys:
        if not isinstance(k, (str, int)) or isinstance(k, bool):
            raise TypeError(f"expected str or int dict keys in a checkpoint's tree, got {k!r}")
    return {"kind": t.kind, "keys": list(t.keys), "children": [_encode_treedef(c) for c in t.children]}


def decode_treedef(data: Mapping[str, Any]) -> TreeDef:
    """The :class:`TreeDef` stored in the metadata's ``tree`` field.

    Example:
        >>> str(decode_treedef(encode_tree({"a": [1, 2]})["tree"]))
        "{'a': [*, *]}"
    """
    return TreeDef(data["kind"], tuple(data["keys"]), tuple(decode_treedef(c) for c in data["children"]))


def encode_tree(tree: Any, arrays: Mapping[int, Mapping[str, Any]] = {}) -> dict[str, Any]:
    """The metadata of ``tree``: its structure and a record per leaf (``arrays[i]`` for a DTensor leaf ``i``).

    Every leaf that is not in ``arrays`` must be a value (:func:`is_value`); raises TypeError otherwise.
    """
    _, treedef = flatten(tree)
    leaves = []
    for i, (path, leaf) in enumerate(leaves_with_paths(tree)):
        if i in arrays:
            record = dict(arrays[i])
        elif is_value(leaf):
            record = encode_value(leaf)
        else:
            raise TypeError(f"checkpoint leaf {path_name(path)!r}: expected a DTensor, an array, a number or a string, "
                            f"got {type(leaf).__name__}")
        leaves.append({"path": list(path), **record})
    return {"format": FORMAT, "version": FORMAT_VERSION, "tree": _encode_treedef(treedef), "leaves": leaves}


def chunk_shape(shape: Sequence[int], blocks: Sequence[tuple[Sequence[int], Sequence[int]]],
                itemsize: int = 1, max_bytes: int = 0) -> tuple[int, ...]:
    """A regular chunk grid of which every non-empty block ``(shape, offset)`` is a union of chunks.

    For torch.chunk sharding this is ``ceil(n / k)`` along each sharded dim (a
    partial last chunk), and the whole dim elsewhere; so every stored chunk has
    one writer.  With ``max_bytes``, the largest chunk dim is halved (staying
    a divisor of a sharded dim's chunk) while a chunk holds more, so a load on
    other placements reads little more than its block.

    Example:
        >>> chunk_shape((8, 6), [((4, 6), (0, 0)), ((4, 6), (4, 0))], itemsize=8, max_bytes=50)
        (2, 3)
    """
    out, cut = [], []
    for d, n in enumerate(shape):
        cuts = set()
        for size, offset in blocks:
            if size[d] > 0:
                cuts.update(c for c in (offset[d], offset[d] + size[d]) if 0 < c < n)
        out.append(math.gcd(*cuts) if cuts else max(n, 1))
        cut.append(bool(cuts))
    while max_bytes and math.prod(out) * itemsize > max_bytes:
        free = [d for d in range(len(out)) if out[d] > 1 and (not cut[d] or out[d] % 2 == 0)]
        if not free:
            break
        d = max(free, key=lambda d: out[d])
        out[d] = -(-out[d] // 2)
    return tuple(out)


def read_metadata(path: "os.PathLike[str] | str") -> dict[str, Any]:
    """The metadata of the checkpoint at ``path``; ShardingError when it is not one this library reads."""
    file = os.path.join(path, METADATA_FILE)
    if not os.path.isdir(path) or not os.path.isfile(file):
        raise ShardingError(f"expected a checkpoint directory holding {METADATA_FILE}, got {os.fspath(path)!r}")
    try:
        with open(file, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise ShardingError(f"expected readable checkpoint metadata in {file!r}, got {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ShardingError(f"expected a {FORMAT} checkpoint in {os.fspath(path)!r}, got format {got!r}")
    version = meta.get("version")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise ShardingError(f"expected a checkpoint format version from 1 to {FORMAT_VERSION}, got {version!r}")
    return meta


def path_key(path: Sequence[Hashable]) -> tuple[Hashable, ...]:
    """A leaf path as a tuple (JSON gives lists)."""
    return tuple(path)
