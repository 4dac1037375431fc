"""Sharded checkpoints: ``save`` a pytree of DTensors to Zarr v3, ``load`` it onto any mesh and placements.

A checkpoint is a directory: ``checkpoint.json`` (format version, tree
structure, every leaf's shape, dtype and the placements it was saved from;
numbers, strings and small plain arrays inline) and one Zarr array per
DTensor, chunked on its own sharding so that each chunk has one writer.  A
save writes a temporary directory and renames it into place once every rank
has finished; a load reads, on each rank, only the chunks its target block
needs, on any mesh, placements and world size.

Example:
    >>> import numpy as np, tempfile, os, dtensor_np as dt
    >>> path = os.path.join(tempfile.mkdtemp(), "run")
    >>> w = dt.distribute_tensor(np.arange(10.0), dt.DeviceMesh((4,)), [dt.Shard(0)])
    >>> dt.checkpoint.save(path, {"w": w, "step": 25}).wait()
    >>> target = {"w": dt.checkpoint.Spec((10,), "float64", dt.DeviceMesh((3,)), [dt.Shard(0)]), "step": 0}
    >>> state = dt.checkpoint.load(path, target)
    >>> state["step"], state["w"].local_shards()[2].tolist()
    (25, [8.0, 9.0])

``FORMAT_VERSION`` is the version this library writes (and the newest it reads):

    >>> dt.checkpoint.FORMAT_VERSION
    1
"""

from .loading import Spec, load
from .metadata import FORMAT_VERSION
from .saving import SaveHandle, save

__all__ = ["save", "load", "Spec", "SaveHandle", "FORMAT_VERSION"]
