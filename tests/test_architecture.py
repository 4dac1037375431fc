"""The layering rules of the packages, checked by reading their imports.

* Every module sits in one layer of :data:`LAYERS` and imports only from its
  own layer or those below (never upward), counting imports inside functions
  too (the usual way to hide an upward import) and leaving out only those
  under ``if TYPE_CHECKING:``.
* No import cycles among the modules of ``dtensor_np`` and ``collectives``.
* No module imports a leading-underscore name from another module.
* ``collectives`` (the lower layer) imports nothing from ``dtensor_np``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dtensor_np", "collectives")

LAYERS: tuple[tuple[str, ...], ...] = (
    # the ground floor: MPI, device memory, caches and cache keys
    ("collectives",),
    # values with no behaviour of their own
    ("errors", "int_tuple", "native", "cost_model", "interning", "local_tensor", "sharded", "arrays", "layout",
     "strides", "conversion"),
    # meshes, placements, specs and where they run
    ("placements", "mesh", "spec", "devices", "runtime"),
    # the redistribute planner: pure functions of specs
    ("cython_shim", "plan_graph", "plan_core", "plan_problem", "plan_rewrites", "plan_search", "planner"),
    # sharding rules, plan runners, construction from local shards and from plain arrays, the call cache
    ("propagation", "redistribute", "from_local", "constants", "fast_path"),
    # running a NumPy call on DTensors
    ("dispatch",),
    # the array a user holds
    ("indexing", "dtensor", "views", "visualize"),
    # programs over arrays: graphs, passes, transformations, the Array API namespace
    ("graph", "passes", "optim", "tensor_parallel", "autodiff", "array_api", "fsdp", "numpy_catalogue", "random",
     "functions", "checkpoint", "testing"),
    # the package's face, its example programs and its Jupyter extension
    ("dtensor_np", "examples", "notebook"),
)
"""The layers, lowest first: a group is a top-level module or subpackage of ``dtensor_np`` (``collectives`` is one)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every import statement of a module, including in functions, skipping ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            stack.append(child)


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (``from pkg import submodule`` counts as the submodule)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(name, path, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle_and_an_underscore_import(tmp_path):
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("from .spec import _local_block\nif TYPE_CHECKING:\n    from .x import y\ndef f():\n    from .z import w\n")
    names = [(n.module, [a.name for a in n.names]) for n in _imports(tree)]
    assert ("spec", ["_local_block"]) in names and ("z", ["w"]) in names and ("x", ["y"]) not in names


def test_no_import_cycles():
    assert _cycles(_edges(_modules())) == []


def test_no_module_imports_a_private_name_from_another():
    offenders = []
    modules = _modules()
    for name, path in modules.items():
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    offenders.append(f"{name} imports {private} from {_resolve(name, path, node)}")
            else:
                private = [a.name for a in node.names if any(p.startswith("_") for p in a.name.split("."))]
                if private:
                    offenders.append(f"{name} imports {private}")
    assert offenders == []


def _group(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "collectives":
        return "collectives"
    return parts[1] if len(parts) > 1 else parts[0]


def _layer_of() -> dict[str, int]:
    return {group: i for i, groups in enumerate(LAYERS) for group in groups}


def test_every_module_sits_in_a_layer():
    layer = _layer_of()
    assert sorted({_group(m) for m in _modules()} - set(layer)) == []


def test_no_module_imports_upward():
    layer = _layer_of()
    edges = _edges(_modules())
    upward = sorted(f"{v} (layer {layer[_group(v)]}) imports {w} (layer {layer[_group(w)]})"
                    for v, ws in edges.items() for w in ws
                    if _group(v) in layer and _group(w) in layer and layer[_group(w)] > layer[_group(v)])
    assert upward == []


def test_the_checker_finds_an_upward_import():
    layer = _layer_of()
    assert layer[_group("dtensor_np.propagation.common")] < layer[_group("dtensor_np.dispatch")]
    assert layer[_group("collectives.caches")] == 0 and layer[_group("dtensor_np")] == len(LAYERS) - 1


@pytest.mark.parametrize("package", ["collectives"])
def test_collectives_imports_nothing_from_dtensor_np(package):
    edges = _edges(_modules())
    offenders = {v: sorted(w for w in ws if w.startswith("dtensor_np")) for v, ws in edges.items() if v.startswith(package)}
    assert {v: ws for v, ws in offenders.items() if ws} == {}


def test_the_planner_search_has_one_source():
    """The planner's search is one text: dtensor_np/plan_core.py, run as Python or compiled by Cython from
    that very file (its C types in plan_core.pxd, which holds declarations only).  No .pyx (or other
    second implementation) in the packages; the search's functions are defined in plan_core.py alone;
    every module dtensor_np.native lists for compiling (with Cython or mypyc) is a .py of the package,
    and a build of it that the package runs was compiled from that .py (its SOURCE_SHA256,
    dtensor_np.native.source_hash)."""
    import re
    import sys

    from dtensor_np import native

    seconds = [path for package in PACKAGES for pattern in ("*.pyx", "*.pxi")
               for path in sorted((ROOT / package).rglob(pattern))]
    assert seconds == []
    search = {"bound_of", "tight", "successors", "reductions", "astar", "probes"}
    defined: dict[str, list[str]] = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and (node.name in search or node.name == "Core"):
                defined.setdefault(node.name, []).append(name)
    assert defined == {name: ["dtensor_np.plan_core"] for name in search | {"Core"}}
    for pxd in sorted((ROOT / "dtensor_np").rglob("*.pxd")):
        assert pxd.with_suffix(".py").exists(), pxd
        # declarations only: a struct, enum or class header ends a line with ':', a function never does
        bodies = [line for line in pxd.read_text().splitlines()
                  if re.match(r"\s*(cdef|cpdef|def)\b", line) and line.rstrip().endswith(":")
                  and not re.match(r"\s*cdef\s+(struct|enum|class|extern|union)\b", line)]
        assert bodies == [], (pxd, bodies)
    assert ".pyx" not in (ROOT / "setup.py").read_text()
    assert sorted(native.COMPILED) == sorted(native.CYTHON + native.MYPYC)
    for name in native.COMPILED:
        assert (ROOT / Path(*name.split(".")).with_suffix(".py")).exists(), name
        module = sys.modules.get(name)
        if module is not None and not module.__file__.endswith(".py"):
            assert module.SOURCE_SHA256 == native.source_hash(name), name
