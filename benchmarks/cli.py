"""Command-line pieces the benchmarks share: sizes, ``--json``/``--sizes``/``--quick``, writing rows.

Needs only the standard library, so the PyTorch benchmark imports it in a venv without mpi4py.

Example::

    >>> parse_size("64KiB"), format_size(65536), global_shape(65536, 2)
    (65536, '64 KiB', (128, 128))
"""
from __future__ import annotations

import argparse
import json
import math
from typing import Any, Optional

DEFAULT_SIZES = ("1KiB", "64KiB", "1MiB", "16MiB", "64MiB")
QUICK_SIZES = ("1KiB", "64KiB", "1MiB")
FLOAT32_BYTES = 4


def parse_size(text: str) -> int:
    """``"64KiB"`` -> 65536 (suffixes GiB, MiB, KiB, B; a bare number is bytes)."""
    text = text.strip()
    for suffix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * scale)
    return int(text)


def format_size(nbytes: int) -> str:
    """65536 -> ``"64 KiB"``; sizes that are no whole KiB stay in bytes."""
    for suffix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {suffix}"
    return f"{nbytes} B"


def global_shape(nbytes: int, k: int) -> tuple[int, int]:
    """A (rows, cols) float32 shape of ``nbytes``, as square as possible, both divisible by ``k``."""
    n = nbytes // FLOAT32_BYTES
    if n * FLOAT32_BYTES != nbytes or n % (k * k):
        raise SystemExit(f"size {nbytes} B is not a whole number of float32 blocks of {k}x{k}")
    cols = k
    for c in range(k, math.isqrt(n) + 1, k):
        if n % c == 0 and (n // c) % k == 0:
            cols = c
    return n // cols, cols


def add_size_options(parser: argparse.ArgumentParser, quick_note: str) -> None:
    """``--json``, ``--sizes`` and ``--quick`` (whose help ends with ``quick_note``), as both benchmarks take them."""
    parser.add_argument("--json", metavar="OUT.json", help="write the rows as JSON (rank 0)")
    parser.add_argument("--sizes", help="comma-separated global sizes, e.g. 1KiB,64KiB,1MiB (default: "
                        + ",".join(DEFAULT_SIZES) + ")")
    parser.add_argument("--quick", action="store_true", help=f"short run: sizes {','.join(QUICK_SIZES)} and {quick_note}")


def chosen_sizes(args: argparse.Namespace) -> list[int]:
    """The sizes in bytes that ``--sizes`` / ``--quick`` ask for."""
    texts = args.sizes.split(",") if args.sizes else QUICK_SIZES if args.quick else DEFAULT_SIZES
    return [parse_size(t) for t in texts]


def write_rows(rows: list[dict[str, Any]], path: Optional[str]) -> None:
    """Write ``rows`` as a JSON list to ``path`` (nothing when it is None) and say so."""
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {len(rows)} rows to {path}")


AGREEMENT_MODES = {"on": (True,), "off": (False,), "both": (True, False)}


def add_agreement_option(parser: argparse.ArgumentParser) -> None:
    """``--agreement on|off|both``: the default agreement before every collective (``both``: each row twice)."""
    parser.add_argument("--agreement", choices=tuple(AGREEMENT_MODES), default="on",
                        help="the default SPMD agreement before every MPI collective (collectives.spmd): on, off, "
                        "or both (every row measured with it on, then off, in the same run; default on)")


def agreement_modes(args: argparse.Namespace) -> tuple[bool, ...]:
    """The agreement settings to measure each row with (see ``add_agreement_option``)."""
    return AGREEMENT_MODES[args.agreement]
