"""The Array API (2024.12) on DTensors: ``namespace(mesh, default=...)``.

A namespace belongs to one mesh and a default placement policy, which places
every array it creates without an explicit ``Sharding``:

* ``"shard_first"``: the first dim split over every mesh dim (rows of a data
  matrix, one block per rank); 0-d arrays replicated;
* ``"shard_last"``: the last dim split likewise;
* ``"replicate"``: every rank holds the whole array;
* a function ``shape -> placements``.

``device`` arguments are the mesh (``x.device``: placed by the policy) or a
:class:`~dtensor_np.Sharding` (explicit placements).  Namespaces are cached:
``namespace(mesh, policy)`` is one object, which ``x.__array_namespace__()``
returns for every array it made.

Example:
    >>> import dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> xp = namespace(mesh)
    >>> xp.__array_api_version__, xp is namespace(mesh, "shard_first")
    ('2024.12', True)
    >>> x = xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    >>> x.placements, x.__array_namespace__() is xp, x.device is mesh
    ((Shard(dim=0),), True, True)
"""

from __future__ import annotations

from .core import ArrayNamespace, namespace

__all__ = ["ArrayNamespace", "namespace"]
