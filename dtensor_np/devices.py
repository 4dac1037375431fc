"""Devices in the Array API sense: a DTensor's ``device`` is its mesh; a ``Sharding`` also names placements.

Array API consumers (scikit-learn, SciPy) compare ``x.device`` of their
inputs and create new arrays with ``device=x.device``.  So the device of a
DTensor is its :class:`~dtensor_np.DeviceMesh`: equal for every array on one
mesh, whatever its placements, and an array made with ``device=mesh`` is placed
by the namespace's default policy.  A :class:`Sharding` (a mesh and
placements, like ``jax.sharding.NamedSharding``) asks for explicit placements:
``xp.zeros((8, 4), device=Sharding(mesh, [Shard(1)]))``, and
``x.to_device(Sharding(...))`` redistributes.

Example:
    >>> import dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> s = Sharding(mesh, [dt.Shard(0)])
    >>> s, s.device is mesh, Sharding(mesh, (dt.Shard(0),)) == s
    (Sharding(mesh=DeviceMesh((2,)), placements=(Shard(dim=0),)), True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .mesh import DeviceMesh
from .placements import Placement, placements_str
from .spec import normalize_placements

__all__ = ["Sharding", "mesh_of_device"]


@dataclass(frozen=True, slots=True, init=False)
class Sharding:
    """A mesh and one placement per mesh dim: a device that also says how an array is placed on it.

    Example:
        >>> import dtensor_np as dt
        >>> s = Sharding(dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> s.placements, s.device is s.mesh
        ((Shard(dim=0),), True)
    """

    mesh: DeviceMesh
    placements: tuple[Placement, ...]

    def __init__(self, mesh: DeviceMesh, placements: Sequence[Placement]) -> None:
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"Sharding needs a DeviceMesh, got {type(mesh).__name__}")
        placements = normalize_placements(placements, mesh)
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "placements", placements)

    @property
    def device(self) -> DeviceMesh:
        """The device of arrays with this sharding: the mesh."""
        return self.mesh

    def __str__(self) -> str:
        return f"{placements_str(self.placements)} on {self.mesh!r}"


def mesh_of_device(device: Any) -> DeviceMesh:
    """The mesh of an Array API ``device`` argument (a mesh or a :class:`Sharding`); TypeError otherwise."""
    if isinstance(device, DeviceMesh):
        return device
    if isinstance(device, Sharding):
        return device.mesh
    raise TypeError(f"expected a device of a dtensor_np array (a DeviceMesh or a dt.Sharding), got {device!r}")
