"""Pytrees of dicts, lists, tuples and None: flattening to leaves and back.

A traced function takes and returns nested containers of arrays.  Dicts are
walked in sorted key order, so two dicts with the same keys flatten alike
whatever their insertion order; ``None`` is an empty container.  Every leaf
has a *path*: the keys from the root, joined with ``"."`` by :func:`path_name`,
so a nested ``{"fc1": {"weight": w}}`` and a flat ``{"fc1.weight": w}`` name
their leaf the same way.

Example:
    >>> leaves, tree = flatten({"b": [1, 2], "a": (3, None)})
    >>> leaves
    [3, 1, 2]
    >>> unflatten(tree, [30, 10, 20])
    {'a': (30, None), 'b': [10, 20]}
    >>> [path_name(p) for p, _ in leaves_with_paths({"fc1": {"weight": 0}, "x": [5]})]
    ['fc1.weight', 'x.0']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Iterator, Optional

__all__ = ["TreeDef", "flatten", "unflatten", "leaves_with_paths", "path_name", "tree_map"]

Path = tuple[Hashable, ...]


@dataclass(frozen=True, slots=True)
class TreeDef:
    """The shape of a pytree without its leaves: a kind, the dict keys, and child treedefs.

    ``kind`` is ``"leaf"``, ``"none"``, ``"dict"``, ``"list"`` or ``"tuple"``.

    Example:
        >>> flatten([1, (2, 3)])[1].num_leaves
        3
    """

    kind: str
    keys: tuple[Hashable, ...] = ()
    children: tuple[TreeDef, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.keys, self.children)) + "}"
        body = ", ".join(str(c) for c in self.children)
        if self.kind == "tuple":
            return f"({body},)" if len(self.children) == 1 else f"({body})"
        return f"[{body}]"


def _sorted_keys(d: dict) -> list[Hashable]:
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=repr)


def _children(tree: Any) -> Optional[tuple[str, tuple[Hashable, ...], list[Any]]]:
    """(kind, keys, children) of a container; None for a leaf."""
    if tree is None:
        return "none", (), []
    if type(tree) is dict:
        keys = _sorted_keys(tree)
        return "dict", tuple(keys), [tree[k] for k in keys]
    if type(tree) is list:
        return "list", tuple(range(len(tree))), list(tree)
    if type(tree) is tuple:
        return "tuple", tuple(range(len(tree))), list(tree)
    return None


_LEAF = TreeDef("leaf")
_CONTAINERS = frozenset((dict, list, tuple, type(None)))


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """The leaves of ``tree`` in order, and its :class:`TreeDef`."""
    if type(tree) is dict and _CONTAINERS.isdisjoint(map(type, tree.values())):  # a flat dict (parameters): no walk
        keys = _sorted_keys(tree)
        return [tree[k] for k in keys], TreeDef("dict", tuple(keys), (_LEAF,) * len(keys))
    leaves: list[Any] = []

    def walk(node: Any) -> TreeDef:
        found = _children(node)
        if found is None:
            leaves.append(node)
            return _LEAF
        kind, keys, children = found
        return TreeDef(kind, keys if kind == "dict" else (), tuple(walk(c) for c in children))

    return leaves, walk(tree)


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """The pytree of shape ``treedef`` holding ``leaves`` in order."""
    if treedef.kind == "dict" and type(leaves) is list and len(leaves) == len(treedef.keys) and all(
            c.kind == "leaf" for c in treedef.children):  # a flat dict: no walk
        return dict(zip(treedef.keys, leaves))
    it = iter(leaves)

    def build(t: TreeDef) -> Any:
        if t.kind == "leaf":
            return next(it)
        if t.kind == "none":
            return None
        values = [build(c) for c in t.children]
        if t.kind == "dict":
            return dict(zip(t.keys, values))
        return values if t.kind == "list" else tuple(values)

    out = build(treedef)
    if next(it, _END) is not _END:
        raise TypeError(f"too many leaves for the tree {treedef}")
    return out


_END = object()


def leaves_with_paths(tree: Any, prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every leaf with its path of keys (list and tuple positions are ints), in flatten order."""
    found = _children(tree)
    if found is None:
        yield prefix, tree
        return
    _, keys, children = found
    for k, c in zip(keys, children):
        yield from leaves_with_paths(c, prefix + (k,))


def path_name(path: Path) -> str:
    """A path as a dotted name: ``("fc1", "weight")`` -> ``"fc1.weight"``."""
    return ".".join(str(k) for k in path)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``tree`` with ``fn`` applied to every leaf."""
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(x) for x in leaves])
