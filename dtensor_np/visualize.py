"""Looking at shardings and plans: which rank holds which block, and what a redistribute moves.

``visualize_sharding`` returns a view that prints as a text grid in a
terminal and renders as coloured HTML blocks in a notebook (like JAX's
``visualize_array_sharding``).  ``plan_view`` shows a redistribute plan: the
chain of states and, for every collective, the bytes each rank sends and
receives.

Example:
    >>> import dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2, 2))
    >>> spec = dt.DTensorSpec(mesh, (dt.Shard(0), dt.Shard(1)), dt.TensorMeta((4, 6), "float32"))
    >>> print(visualize_sharding(spec))  # doctest: +NORMALIZE_WHITESPACE
    S(0)S(1) on mesh (2, 2), global shape (4, 6) float32
             [0:3]   [3:6]
    [0:2]    r0      r1
    [2:4]    r2      r3
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from .placements import Partial
from .planner import Step, explain, plan_redistribute
from .spec import DTensorSpec

__all__ = ["visualize_sharding", "ShardingView", "plan_view", "PlanView", "sharding_table"]

_COLORS = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#fabfd2", "#b6992d", "#499894", "#8cd17d",
)


def _spec_of(x: Any) -> DTensorSpec:
    if isinstance(x, DTensorSpec):
        return x
    spec = getattr(x, "spec", None)
    if not isinstance(spec, DTensorSpec):
        raise TypeError(f"expected a DTensor or a DTensorSpec to show its sharding, got {type(x).__module__}."
                        f"{type(x).__name__} (a plain array is on one device: distribute it first)")
    return spec


def sharding_table(x: Any) -> list[dict[str, Any]]:
    """One row per rank: its mesh coordinate, local shape and the global slice it holds.

    Example:
        >>> import dtensor_np as dt
        >>> spec = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((3,), "f4"))
        >>> [row["slice"] for row in sharding_table(spec)]
        ['[0:2]', '[2:3]']
    """
    spec = _spec_of(x)
    rows = []
    for rank in spec.mesh.all_ranks:
        shape, offset = spec.local_block(rank)
        rows.append(
            {
                "rank": rank,
                "coordinate": spec.mesh.coordinate_of(rank),
                "local_shape": shape,
                "slice": "[" + ", ".join(f"{o}:{o + n}" for o, n in zip(offset, shape)) + "]",
            }
        )
    return rows


@dataclass(frozen=True, slots=True)
class ShardingView:
    """A sharding to look at: ``str()`` gives a text grid, notebooks render ``_repr_html_``."""

    spec: DTensorSpec

    def _header(self) -> str:
        spec = self.spec
        text = f"{spec} on mesh {spec.mesh.shape}, global shape {spec.shape} {spec.dtype}"
        partial = [f"pending {p.reduce_op} over mesh dim {m}" for m, p in enumerate(spec.placements) if isinstance(p, Partial)]
        return text + (f" ({'; '.join(partial)})" if partial else "")

    def _grid(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]], dict[tuple[int, int], list[int]]]:
        """Row and column intervals of the first two dims, and the ranks holding each cell."""
        spec = self.spec
        shape = spec.shape if spec.ndim >= 1 else (1,)
        rows_n = shape[0]
        cols_n = shape[1] if len(shape) > 1 else 1
        blocks = {}
        row_cuts, col_cuts = {0, rows_n}, {0, cols_n}
        for rank in spec.mesh.all_ranks:
            local, offset = spec.local_block(rank)
            local, offset = (tuple(local) + (1, 1))[:2], (tuple(offset) + (0, 0))[:2]
            if spec.ndim == 1:
                local, offset = (local[0], 1), (offset[0], 0)
            if spec.ndim == 0:
                local, offset = (1, 1), (0, 0)
            blocks[rank] = (offset, local)
            row_cuts |= {offset[0], offset[0] + local[0]}
            col_cuts |= {offset[1], offset[1] + local[1]}
        rows = _intervals(sorted(row_cuts))
        cols = _intervals(sorted(col_cuts))
        cells: dict[tuple[int, int], list[int]] = {}
        for rank, ((r0, c0), (rn, cn)) in blocks.items():
            for i, (a, b) in enumerate(rows):
                for j, (c, d) in enumerate(cols):
                    if r0 <= a and b <= r0 + rn and c0 <= c and d <= c0 + cn:
                        cells.setdefault((i, j), []).append(rank)
        return rows, cols, cells

    def __str__(self) -> str:
        rows, cols, cells = self._grid()
        labels = [[_ranks_label(cells.get((i, j), [])) for j in range(len(cols))] for i in range(len(rows))]
        row_heads = [f"[{a}:{b}]" for a, b in rows]
        col_heads = [f"[{c}:{d}]" for c, d in cols] if self.spec.ndim >= 2 else [""]
        width = max([len(h) for h in col_heads] + [len(l) for r in labels for l in r] + [1]) + 2
        head_w = max(len(h) for h in row_heads) + 2
        lines = [self._header()]
        if self.spec.ndim >= 2:
            lines.append(" " * head_w + "".join(h.ljust(width) for h in col_heads).rstrip())
        for head, row in zip(row_heads, labels):
            lines.append(head.ljust(head_w) + "".join(l.ljust(width) for l in row).rstrip())
        if self.spec.ndim > 2:
            lines.append(f"(first two of {self.spec.ndim} dims; see sharding_table() for every dim)")
        empty = self._empty_ranks()
        if empty:
            lines.append("empty shards (uneven torch.chunk split): " + ", ".join(f"r{r}" for r in empty))
        return "\n".join(lines)

    def _empty_ranks(self) -> list[int]:
        spec = self.spec
        return [
            r
            for r in spec.mesh.all_ranks
            if 0 in spec.local_shape_of_rank(r)
            and 0 not in spec.shape
        ]

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows, cols, cells = self._grid()
        total_r = max(1, sum(b - a for a, b in rows))
        total_c = max(1, sum(d - c for c, d in cols))
        parts = [f"<div style='font-family:monospace'><div>{html.escape(self._header())}</div>"]
        parts.append("<table style='border-collapse:collapse;margin-top:4px'>")
        for i, (a, b) in enumerate(rows):
            height = max(18, int(160 * max(b - a, 1) / total_r))
            parts.append("<tr>")
            for j, (c, d) in enumerate(cols):
                ranks = cells.get((i, j), [])
                color = _COLORS[ranks[0] % len(_COLORS)] if ranks else "#eeeeee"
                width = max(30, int(320 * max(d - c, 1) / total_c))
                parts.append(
                    f"<td style='background:{color};color:white;border:1px solid white;text-align:center;"
                    f"width:{width}px;height:{height}px' title='rows {a}:{b}, cols {c}:{d}'>"
                    f"{html.escape(_ranks_label(ranks))}</td>"
                )
            parts.append("</tr>")
        parts.append("</table>")
        empty = self._empty_ranks()
        if empty:
            parts.append(f"<div>empty shards: {', '.join(f'r{r}' for r in empty)}</div>")
        parts.append("</div>")
        return "".join(parts)


def _intervals(cuts: list[int]) -> list[tuple[int, int]]:
    out = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
    return out or [(0, 0)]


def _ranks_label(ranks: list[int]) -> str:
    if not ranks:
        return "-"
    if len(ranks) > 4:
        return f"r{ranks[0]}..r{ranks[-1]} ({len(ranks)})"
    return ",".join(f"r{r}" for r in ranks)


def visualize_sharding(x: Any) -> ShardingView:
    """A view of which rank holds which block of a DTensor (or spec): text in a terminal, HTML in Jupyter.

    Example:
        >>> import dtensor_np as dt
        >>> spec = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((4,), "f4"))
        >>> print(visualize_sharding(spec))
        S(0) on mesh (2,), global shape (4,) float32
        [0:2]  r0
        [2:4]  r1
    """
    return ShardingView(_spec_of(x))


@dataclass(frozen=True, slots=True)
class PlanView:
    """A redistribute plan to look at: the state chain and bytes moved per rank for every step."""

    src: DTensorSpec
    dst: DTensorSpec
    plan: tuple[Step, ...]

    def rows(self) -> list[dict[str, Any]]:
        """One row per step: kind, mesh dims, and per-rank bytes sent and received."""
        out = []
        itemsize = self.src.dtype.itemsize
        mesh = self.src.mesh
        for step in self.plan:
            before = {r: step.before.local_shape_of_rank(r) for r in mesh.all_ranks}
            after = {r: step.after.local_shape_of_rank(r) for r in mesh.all_ranks}
            sent, received = {}, {}
            for group in mesh.groups(step.mesh_dims):
                k = len(group)
                for r in group:
                    n_in = int(np.prod(before[r])) * itemsize
                    n_out = int(np.prod(after[r])) * itemsize
                    if step.kind == "all_gather":
                        sent[r], received[r] = n_in * (k - 1), n_out - n_in
                    elif step.kind in ("reduce_scatter", "all_to_all"):
                        keep = n_out if step.kind == "reduce_scatter" else n_in // max(k, 1)
                        sent[r] = n_in - keep
                        received[r] = n_out * (k - 1) if step.kind == "reduce_scatter" else n_out - keep
                    elif step.kind == "all_reduce":
                        sent[r] = received[r] = 2 * n_in * (k - 1) // k
                    else:
                        sent[r] = received[r] = 0
            out.append({"step": str(step), "kind": step.kind, "mesh_dims": step.mesh_dims, "sent": sent, "received": received})
        return out

    def __str__(self) -> str:
        lines = [f"{explain(self.plan, self.src)}   ({sum(s.is_collective for s in self.plan)} collectives)"]
        for row in self.rows():
            per_rank = ", ".join(
                f"r{r}: {_fmt(row['sent'][r])} out / {_fmt(row['received'][r])} in" for r in sorted(row["sent"])
            )
            lines.append(f"  {row['step']}: {per_rank}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        head = f"<div style='font-family:monospace'><b>{html.escape(explain(self.plan, self.src))}</b>"
        table = ["<table><tr><th>step</th><th>rank</th><th>sends</th><th>receives</th></tr>"]
        for row in self.rows():
            for r in sorted(row["sent"]):
                table.append(
                    f"<tr><td>{html.escape(row['step'])}</td><td>r{r}</td>"
                    f"<td>{_fmt(row['sent'][r])}</td><td>{_fmt(row['received'][r])}</td></tr>"
                )
        return head + "".join(table) + "</table></div>"


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def plan_view(src: Any, dst: Union[DTensorSpec, Any], placements: Optional[Any] = None) -> PlanView:
    """The plan from ``src`` to ``dst`` (specs, or a DTensor and target placements) to look at.

    Example:
        >>> import dtensor_np as dt
        >>> spec = dt.DTensorSpec(dt.DeviceMesh((2,)), (dt.Shard(0),), dt.TensorMeta((4,), "f4"))
        >>> print(plan_view(spec, spec.with_placements((dt.Replicate(),))))
        S(0)->R   (1 collectives)
          all_gather S(0)->R on mesh dim 0: r0: 8 B out / 8 B in, r1: 8 B out / 8 B in
    """
    src_spec = _spec_of(src)
    dst_spec = dst if isinstance(dst, DTensorSpec) else src_spec.with_placements(tuple(dst))
    return PlanView(src_spec, dst_spec, plan_redistribute(src_spec, dst_spec))

