"""The second main job: train a small decoder-only transformer with FSDP x TP, and check it against one device.

The model is plain NumPy written for one device (``loss_fn(params, x, y)``,
torch.nn.Linear weights): token and position embeddings, ``--layers``
pre-norm blocks of causal multi-head attention and a GELU MLP (the blocks of
:mod:`dtensor_np.examples.tp_mlp`), a final layer norm and a head tied to the
embedding; the loss is the mean next-character cross-entropy.  The text is
generated (a small seeded grammar of English-like sentences), so nothing is
downloaded.

:func:`dtensor_np.fsdp` rewrites the loss and its gradient for a ``("dp",
"tp")`` mesh: the batch is split over ``dp``; q/k/v and fc1 are colwise, o
and fc2 rowwise on ``tp`` (Megatron); every parameter lives in flat buckets
of which each rank stores ``1/dp`` (FSDP), all_gathered before use and
reduce-scattered after the backward.  AdamW (:mod:`dtensor_np.optim`) updates
the flat shards with no communication.  The same program runs on one device
with ``dt.value_and_grad`` and the same AdamW, and the two loss curves are
compared step by step.

Run it::

    python -m dtensor_np.examples.train                      # 2x2 simulated ranks in this process
    mpiexec -n 4 python -m dtensor_np.examples.train         # 4 MPI processes on a 2x2 (dp, tp) mesh
    python -m dtensor_np.examples.train --dp 4 --tp 1 --steps 200 --plot loss.png

As a program it keeps freed memory for the next step (:func:`keep_freed_memory`;
``--release-memory`` does not).  It prints the loss every ``--every`` steps,
the collectives one step issues, the largest relative difference from the
single-device losses, and writes the loss curve as a PNG (``pip install -e ".[train]"`` brings matplotlib).

Example:
    >>> import numpy as np
    >>> cfg = Config(layers=1, d_model=8, heads=2, d_ff=16, seq=4)
    >>> text = corpus(200, seed=0)
    >>> vocab = sorted(set(text))
    >>> params = init_params(np.random.default_rng(0), cfg, len(vocab))
    >>> x, y = batch(text, vocab, cfg, batch_size=2, step=0, seed=0)
    >>> x.shape == y.shape == (2, 4, len(vocab)), float(loss_fn(params, x, y, cfg)) > 0
    (True, True)
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import sys
import time
import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from tqdm import tqdm

import collectives
import dtensor_np as dt
from dtensor_np.examples.tp_mlp import attention, gelu, linear
from dtensor_np.runtime import backend_for

__all__ = ["Config", "corpus", "batch", "init_params", "loss_fn", "dropout_masks", "plan", "train", "save_state",
           "load_state", "keep_freed_memory", "main"]

Params = dict[str, np.ndarray]


@dataclass(frozen=True)
class Config:
    """The transformer's sizes."""

    layers: int = 3
    d_model: int = 96
    heads: int = 4
    d_ff: int = 384
    seq: int = 32


# -- data ------------------------------------------------------------------------------
_WORDS = {
    "det": ["the", "a", "every", "one"],
    "noun": ["cat", "dog", "bird", "fox", "child", "river", "tree", "stone", "ship", "star"],
    "verb": ["sees", "follows", "finds", "likes", "watches", "carries", "meets"],
    "adj": ["small", "quiet", "red", "old", "quick", "bright"],
    "prep": ["near", "under", "over", "beside"],
}


def corpus(chars: int, seed: int = 0) -> str:
    """``chars`` characters of generated sentences (det adj? noun verb det noun (prep det noun)?.)."""
    rng = np.random.default_rng(seed)

    def pick(kind: str) -> str:
        words = _WORDS[kind]
        return words[int(rng.integers(len(words)))]

    out: list[str] = []
    size = 0
    while size < chars:
        words = [pick("det")] + ([pick("adj")] if rng.random() < 0.5 else []) + [pick("noun"), pick("verb"), pick("det"), pick("noun")]
        if rng.random() < 0.4:
            words += [pick("prep"), pick("det"), pick("noun")]
        sentence = " ".join(words) + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def batch(text: str, vocab: Sequence[str], cfg: Config, batch_size: int, step: int, seed: int = 0,
          dtype: Any = "float64") -> tuple[np.ndarray, np.ndarray]:
    """One-hot inputs and next-character targets, each ``(batch, seq, vocab)``, the same on every rank."""
    rng = np.random.default_rng((seed, step))
    index = {c: i for i, c in enumerate(vocab)}
    ids = np.array([index[c] for c in text])
    starts = rng.integers(0, len(ids) - cfg.seq - 1, size=batch_size)
    windows = np.stack([ids[s:s + cfg.seq + 1] for s in starts])
    eye = np.eye(len(vocab), dtype=dtype)
    return eye[windows[:, :-1]], eye[windows[:, 1:]]


# -- the model: plain NumPy for one device ----------------------------------------------
def init_params(rng: np.random.Generator, cfg: Config, vocab: int, dtype: Any = "float64") -> Params:
    """Every parameter, by dotted name (torch.nn.Linear weights, (out, in))."""
    d, f = cfg.d_model, cfg.d_ff

    def dense(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(dtype)

    params: Params = {
        "embed": (0.1 * rng.standard_normal((vocab, d))).astype(dtype),
        "pos": (0.1 * rng.standard_normal((cfg.seq, d))).astype(dtype),
        "ln_f.gain": np.ones(d, dtype), "ln_f.bias": np.zeros(d, dtype),
    }
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            params[p + ln + ".gain"], params[p + ln + ".bias"] = np.ones(d, dtype), np.zeros(d, dtype)
        for name in ("q", "k", "v", "o"):
            params[f"{p}attn.{name}.weight"], params[f"{p}attn.{name}.bias"] = dense(d, d), np.zeros(d, dtype)
        params[p + "mlp.fc1.weight"], params[p + "mlp.fc1.bias"] = dense(f, d), np.zeros(f, dtype)
        params[p + "mlp.fc2.weight"], params[p + "mlp.fc2.bias"] = dense(d, f), np.zeros(d, dtype)
    return params


def plan(cfg: Config) -> dict[str, Any]:
    """Megatron's tensor-parallel plan: q, k, v and fc1 colwise; o and fc2 rowwise (one all_reduce each)."""
    out: dict[str, Any] = {}
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        out.update({p + f"attn.{n}": dt.ColwiseParallel() for n in ("q", "k", "v")})
        out[p + "attn.o"] = dt.RowwiseParallel()
        out[p + "mlp.fc1"] = dt.ColwiseParallel()
        out[p + "mlp.fc2"] = dt.RowwiseParallel()
    return out


def _sub(params: Params, prefix: str) -> Params:
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


def layer_norm(params: Params, name: str, x: Any, eps: float = 1e-5) -> Any:
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * params[f"{name}.gain"] + params[f"{name}.bias"]


def logits(params: Params, x: Any, cfg: Config, drop: Any = None) -> Any:
    """``(batch, seq, vocab)`` next-character logits of one-hot inputs ``x``.

    ``drop`` (``(batch, 2 * layers, seq, d_model)``, from :func:`dropout_masks`)
    multiplies the attention and MLP outputs of each block (dropout).
    """
    h = x @ params["embed"] + params["pos"]
    for i in range(cfg.layers):
        p = f"blocks.{i}."
        a = attention(_sub(params, p + "attn."), layer_norm(params, p + "ln1", h), heads=cfg.heads)
        h = h + (a if drop is None else a * drop[:, 2 * i])
        inner = gelu(linear(params, p + "mlp.fc1", layer_norm(params, p + "ln2", h)))
        m = linear(params, p + "mlp.fc2", inner)
        h = h + (m if drop is None else m * drop[:, 2 * i + 1])
    return layer_norm(params, "ln_f", h) @ params["embed"].T


def loss_fn(params: Params, x: Any, y: Any, cfg: Config, drop: Any = None) -> Any:
    """Mean cross-entropy of the next character (``y`` one-hot), with dropout masks ``drop`` when given."""
    z = logits(params, x, cfg, drop)
    z = z - np.max(z, axis=-1, keepdims=True)
    log_probs = z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    return -np.mean(np.sum(y * log_probs, axis=-1))


def dropout_masks(key: Any, p: float, cfg: Config, batch_size: int, mesh: Optional[dt.DeviceMesh] = None) -> Any:
    """Dropout masks ``(batch, 2 * layers, seq, d_model)``: 0, or ``1 / (1 - p)`` with probability ``1 - p``.

    Drawn by :mod:`dtensor_np.random` (no communication) with the batch's
    placements on ``mesh`` (``Shard(0)`` on ``dp``): each rank draws only its
    block, and the whole equals the one-device draw (``mesh=None``).
    """
    shape = (batch_size, 2 * cfg.layers, cfg.seq, cfg.d_model)
    placements = None
    if mesh is not None:
        dp = 0 if mesh.dim_names is None else mesh.dim_index("dp")  # as dt.fsdp splits the batch
        placements = [dt.Shard(0) if i == dp else dt.Replicate() for i in range(mesh.ndim)]
    keep = dt.random.bernoulli(key, shape, np.float64, p=1.0 - p, mesh=mesh, placements=placements)
    return keep * (1.0 / (1.0 - p))


# -- training ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """What one training run measured."""

    losses: tuple[float, ...]
    collectives: dict[str, int]
    buckets: int
    seconds: float
    parameters: int = 0
    first_step: int = 0  # the step a resumed run started from (losses[i] is step first_step + i)


def train(mesh: Optional[dt.DeviceMesh], cfg: Config, steps: int, batch_size: int, lr: float, seed: int = 0,
          bucket_mb: float = 0.25, every: int = 5, show: bool = False, text_chars: int = 20_000,
          micro_batches: int = 1, reshard_after_forward: bool = False, save: Optional[str] = None,
          resume: Optional[str] = None, dropout: float = 0.0) -> Run:
    """Train for ``steps`` steps on ``mesh`` with FSDP x TP (or on one device with ``mesh=None``).

    ``micro_batches``: each step's batch runs as that many micro-batches (gradients accumulated, one
    reduce_scatter per bucket); ``reshard_after_forward``: see :func:`dtensor_np.fsdp`.  ``resume`` continues from
    the checkpoint in that directory (saved on any mesh, see :func:`save_state`); ``save`` writes the state after
    the last step there.  With ``dropout`` > 0, step ``i``'s masks are :func:`dropout_masks` of
    ``dt.random.fold_in(dt.random.key(seed), i)``, an extra batch input (``i`` counts from the first step of an
    uninterrupted run, so a resumed run draws the same masks).
    """
    text = corpus(text_chars, seed)
    vocab = sorted(set(text))
    params = init_params(np.random.default_rng(seed), cfg, len(vocab))
    fn: Any = functools.partial(loss_fn, cfg=cfg)
    opt = dt.optim.adamw(lr, weight_decay=0.01)
    x, y = batch(text, vocab, cfg, batch_size, 0, seed)
    drop: tuple[Any, ...] = ()
    if dropout:
        fn = lambda params, x, y, drop: loss_fn(params, x, y, cfg, drop)  # noqa: E731
        drop = (dropout_masks(dt.random.key(seed), dropout, cfg, batch_size),)  # an example to trace
    where = "one device" if mesh is None else f"{mesh.size()} {mesh.backend} ranks"
    if mesh is None:
        value_and_grad = dt.value_and_grad(fn)
        state_params, collectives_per_step, buckets = params, {}, 0
    else:
        tp = mesh.shape[mesh.dim_index("tp")] if "tp" in (mesh.dim_names or ()) else 1
        if dropout and micro_batches > 1:
            raise dt.ShardingError(f"expected dropout or micro-batches, got both (dropout={dropout}, "
                                f"micro_batches={micro_batches}): the masks are not split into micro-batches yet")
        rows = batch_size // micro_batches  # the step is traced for one micro-batch
        step_fn = dt.fsdp(fn, params, x[:rows], y[:rows], *drop, mesh=mesh, tp_plan=plan(cfg) if tp > 1 else None,
                          bucket_mb=bucket_mb, reshard_after_forward=reshard_after_forward)
        state_params, buckets = step_fn.shard(params), step_fn.buckets
        collectives_per_step = step_fn.collectives(micro_batches)

        def value_and_grad(flat: Any, *batch: Any) -> Any:
            return step_fn.value_and_grad(flat, *batch, micro_batches=micro_batches)

    state = opt.init(state_params)
    first = 0
    if resume:
        first, state_params, state = load_state(resume, mesh, params, None if mesh is None else step_fn,
                                                run=_run_identity(cfg, seed, batch_size, dropout))
    losses = []
    start = time.perf_counter()
    with tqdm(range(first, first + steps), desc=f"train on {where}", disable=not show, leave=False) as bar:
        for it in bar:
            x, y = batch(text, vocab, cfg, batch_size, it, seed)
            if dropout:
                drop = (dropout_masks(dt.random.fold_in(dt.random.key(seed), it), dropout, cfg, batch_size, mesh),)
            loss, grads = value_and_grad(state_params, x, y, *drop)
            state_params, state = opt.update(grads, state, state_params)
            losses.append(float(loss))
            if show and (it % every == 0 or it == steps - 1):
                bar.write(f"step {it:4d}  loss {losses[-1]:.6f}")
    seconds = time.perf_counter() - start
    if save:
        save_state(save, first + steps, state_params, state, mesh, None if mesh is None else step_fn,
                   run=_run_identity(cfg, seed, batch_size, dropout))
    return Run(tuple(losses), collectives_per_step, buckets, seconds, sum(int(v.size) for v in params.values()), first)


# -- memory between steps -------------------------------------------------------------
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's largest M_MMAP_THRESHOLD on 64-bit


def keep_freed_memory(limit_mib: int = 1024) -> bool:
    """Keep up to ``limit_mib`` MiB of freed memory in this process for the next step (glibc's malloc).

    A step frees its activations and gradients and allocates them again the
    next step.  By default glibc gives large freed blocks back to the OS
    (``munmap``, and trimming the heap's top), so every step touches new
    pages: thousands of page faults per step (the kernel zeroes each page),
    about a quarter of a one-process step of the default model
    (benchmarks/README.md, "Training step: Python share").  This keeps arrays
    of up to 32 MiB on the heap (``M_MMAP_THRESHOLD``) and trims the heap only
    above ``limit_mib`` MiB free (``M_TRIM_THRESHOLD``), as the environment
    variables ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` would.
    It changes no value a step computes.  Returns False, changing nothing,
    where the C library is not glibc.  ``python -m dtensor_np.examples.train``
    calls it (``--release-memory`` leaves glibc's defaults).

    Example:
        >>> keep_freed_memory(4096)
        Traceback (most recent call last):
        ...
        ValueError: keep_freed_memory: expected limit_mib from 1 to 2047, got 4096
    """
    if isinstance(limit_mib, bool) or not isinstance(limit_mib, (int, np.integer)):
        raise TypeError(f"keep_freed_memory: expected limit_mib as an int, got {type(limit_mib).__name__}")
    if not 1 <= limit_mib <= 2047:  # mallopt takes a C int of bytes
        raise ValueError(f"keep_freed_memory: expected limit_mib from 1 to 2047, got {limit_mib}")
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: its mallopt parameters
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # no C library to open by None (Windows), or not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(
        mallopt(_M_TRIM_THRESHOLD, int(limit_mib) * 1024 * 1024))


# -- checkpoints: the logical parameters and AdamW moments, independent of the mesh --------------------
def _run_identity(cfg: Config, seed: int, batch_size: int, dropout: float) -> dict[str, Any]:
    """What a resumed run must share with the saved one to continue it (the data, the model, the masks)."""
    return {"seed": int(seed), "batch": int(batch_size), "dropout": float(dropout), **dataclasses.asdict(cfg)}


def save_state(path: str, step: int, flat: Any, state: Any, mesh: Optional[dt.DeviceMesh],
               step_fn: Optional[dt.FSDPStep], run: Optional[dict[str, Any]] = None) -> None:
    """Save the training state after ``step`` steps with :func:`dt.checkpoint.save`, in a mesh-independent form.

    The flat FSDP buckets depend on the mesh (dp ranks, tp placements, bucket
    sizes), so the parameters and AdamW's two moments are saved as the model's
    logical arrays (``step_fn.unshard``), each a DTensor sharded on its first
    axis over every rank of ``mesh`` (one writer per chunk); the step and
    AdamW's step count are saved with them, and ``run`` (the seed, batch size, dropout and model sizes:
    :func:`load_state` refuses to continue a run that differs).

    Example:
        >>> import os, tempfile
        >>> cfg, path = Config(layers=1, d_model=8, heads=2, d_ff=16, seq=4), os.path.join(tempfile.mkdtemp(), "run")
        >>> _ = train(dt.DeviceMesh((2, 2), ("dp", "tp")), cfg, 2, 4, 1e-3, save=path, text_chars=300)
        >>> resumed = train(dt.DeviceMesh((4, 1), ("dp", "tp")), cfg, 1, 4, 1e-3, resume=path, text_chars=300)
        >>> resumed.first_step, len(resumed.losses)
        (2, 1)
    """
    if step_fn is None:  # one device: its arrays on a 1-rank mesh
        mesh, full = dt.DeviceMesh((1,)), {"params": flat, "mu": state.mu, "nu": state.nu}
    else:
        full = {"params": step_fn.unshard(flat), "mu": step_fn.unshard(state.mu), "nu": step_fn.unshard(state.nu)}
    everyone = mesh.flatten()

    def placed(a: Any) -> dt.DTensor:
        return dt.distribute_tensor(np.asarray(a), everyone, [dt.Shard(0) if np.ndim(a) else dt.Replicate()])

    tree = {k: {name: placed(a) for name, a in v.items()} for k, v in full.items()}
    dt.checkpoint.save(path, {"step": step, "adam_step": state.step, "run": dict(run or {}), **tree})


def load_state(path: str, mesh: Optional[dt.DeviceMesh], params: Params,
               step_fn: Optional[dt.FSDPStep], run: Optional[dict[str, Any]] = None) -> tuple[int, Any, Any]:
    """``(step, parameters, AdamW state)`` from a checkpoint of :func:`save_state`, laid out for this run's mesh.

    Each rank reads every logical array whole (FSDP's ``shard`` takes full
    parameters) and keeps its flat shards.

    Example:
        >>> import os, tempfile
        >>> cfg, path = Config(layers=1, d_model=8, heads=2, d_ff=16, seq=4), os.path.join(tempfile.mkdtemp(), "run")
        >>> params = init_params(np.random.default_rng(0), cfg, 5)
        >>> state = dt.optim.adamw(1e-3).init(params)
        >>> save_state(path, 7, params, state, None, None)
        >>> step, loaded, _ = load_state(path, None, params, None)
        >>> step, all(np.array_equal(loaded[k], params[k]) for k in params)
        (7, True)
    """
    run = dict(run or {})
    everyone = (dt.DeviceMesh((1,)) if mesh is None else mesh).flatten()
    like = {name: dt.checkpoint.Spec(a.shape, a.dtype, everyone, [dt.Replicate()]) for name, a in params.items()}
    out = dt.checkpoint.load(path, {"step": 0, "adam_step": 0, "run": run, "params": like, "mu": like, "nu": like})
    differ = {k: (out["run"][k], v) for k, v in run.items() if out["run"][k] != v}
    if differ:  # every rank reads the same file: the same error on every rank, before any collective
        raise dt.ShardingError("a resumed run continues the saved one: expected " + ", ".join(
            f"{k}={saved!r} (as saved)" for k, (saved, _) in differ.items()) + ", got " + ", ".join(
            f"{k}={given!r}" for k, (_, given) in differ.items()))

    def full(tree: dict[str, dt.DTensor]) -> Params:
        return {name: np.asarray(x.full_tensor()) for name, x in tree.items()}

    flat, mu, nu = full(out["params"]), full(out["mu"]), full(out["nu"])
    if step_fn is not None:
        flat, mu, nu = step_fn.shard(flat), step_fn.shard(mu), step_fn.shard(nu)
    return out["step"], flat, dt.optim.AdamState(out["adam_step"], mu, nu)


def plot(path: str, runs: dict[str, Run]) -> Optional[str]:
    """Write the loss curves as a PNG; returns why not when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 'matplotlib is not installed (pip install -e ".[train]")'
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, run in runs.items():
        ax.plot(run.losses, label=label, linestyle="--" if "one device" in label else "-")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dtensor_np.examples.train", description=__doc__.split("\n")[0])
    parser.add_argument("--dp", type=int, default=None, help="data-parallel ranks (default: ranks / tp)")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel ranks (default 2, or 1 on an odd world)")
    parser.add_argument("--backend", choices=("simulated", "mpi"), default=None, help="default: mpi under mpiexec")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (split over dp)")
    parser.add_argument("--layers", type=int, default=Config.layers)
    parser.add_argument("--d-model", type=int, default=Config.d_model)
    parser.add_argument("--heads", type=int, default=Config.heads)
    parser.add_argument("--d-ff", type=int, default=Config.d_ff)
    parser.add_argument("--seq", type=int, default=Config.seq)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--bucket-mb", type=float, default=0.25, help="MiB of parameters per flat bucket")
    parser.add_argument("--every", type=int, default=5, help="print the loss every N steps")
    parser.add_argument("--plot", default="train_loss.png", help="PNG of the loss curves ('' for none)")
    parser.add_argument("--no-compare", action="store_true", help="skip the single-device run")
    parser.add_argument("--tol", type=float, default=1e-9, help="largest relative loss difference from one device")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--micro-batches", type=int, default=1,
                        help="split each step's batch into K micro-batches (gradients accumulated)")
    parser.add_argument("--reshard-after-forward", action="store_true",
                        help="free gathered parameters after the forward, gather them again for the backward")
    parser.add_argument("--save", default=None, metavar="DIR", help="save the training state after the last step")
    parser.add_argument("--resume", default=None, metavar="DIR", help="continue from a saved state (any mesh)")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="dropout probability P (0 <= P < 1) of the attention and MLP outputs; masks by dt.random")
    parser.add_argument("--release-memory", action="store_true",
                        help="give freed memory back to the OS after each step (glibc's default; see keep_freed_memory)")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None, keep_memory: bool = False) -> int:
    """Run the example; returns the exit status (0 when the losses match the single-device run).

    ``keep_memory``: call :func:`keep_freed_memory` first (unless ``--release-memory``), as
    ``python -m dtensor_np.examples.train`` does; False by default, so that a call from Python leaves
    the process's allocator as it is.
    """
    args = _parse(argv)
    if args.steps < 1:
        print(f"error: expected --steps of at least 1, got {args.steps}", file=sys.stderr)
        return 2
    if not 0 <= args.dropout < 1:
        print(f"error: expected --dropout with 0 <= P < 1, got {args.dropout}", file=sys.stderr)
        return 2
    under_mpi = collectives.launched_by_mpiexec() and (collectives.mpi_world_size() or 1) > 1
    world = collectives.mpi_world_size() if under_mpi else None
    tp = args.tp if args.tp is not None else (2 if (world or 4) % 2 == 0 else 1)
    dp = args.dp if args.dp is not None else max(1, (world or 4) // tp)
    cfg = Config(args.layers, args.d_model, args.heads, args.d_ff, args.seq)
    try:
        mesh = dt.init_device_mesh((dp, tp), dim_names=("dp", "tp"), backend=args.backend)
    except dt.ShardingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    root = 0 in backend_for(mesh).ranks
    if keep_memory and not args.release_memory:
        keep_freed_memory()
    if args.micro_batches < 1 or args.batch % args.micro_batches:
        print(f"error: expected --micro-batches dividing --batch {args.batch}, got {args.micro_batches}",
              file=sys.stderr)
        return 2
    if args.dropout and args.micro_batches > 1:
        print("error: expected --dropout or --micro-batches, got both (masks are not split into micro-batches yet)",
              file=sys.stderr)
        return 2
    run = train(mesh, cfg, args.steps, args.batch, args.lr, args.seed, args.bucket_mb, args.every, show=root,
                micro_batches=args.micro_batches, reshard_after_forward=args.reshard_after_forward,
                save=args.save, resume=args.resume, dropout=args.dropout)
    runs = {f"FSDP x TP, {dp}x{tp} {mesh.backend}": run}
    diff = 0.0
    if not args.no_compare:
        single = train(None, cfg, run.first_step + args.steps, args.batch, args.lr, args.seed, dropout=args.dropout)
        single = Run(single.losses[run.first_step:], {}, 0, single.seconds, single.parameters, run.first_step)
        runs["one device"] = single
        diff = max(abs(a - b) / max(abs(b), 1e-300) for a, b in zip(run.losses, single.losses))
    if not root:
        return 0 if diff <= args.tol else 1
    print(f"model: {cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} heads, {run.parameters:,} parameters")
    print(f"mesh: {dp} (dp) x {tp} (tp), {mesh.backend}; {run.buckets} flat buckets")
    print(f"collectives per step: {run.collectives}")
    print(f"loss: step {run.first_step} {run.losses[0]:.6f} -> step {run.first_step + len(run.losses) - 1} "
          f"{run.losses[-1]:.6f}; "
          f"{run.seconds / len(run.losses) * 1e3:.1f} ms per step")
    if not args.no_compare:
        verdict = "OK" if diff <= args.tol else f"FAILED (tolerance {args.tol:g})"
        print(f"largest relative difference from one device over {len(run.losses)} steps: {diff:.3e}  {verdict}")
    if args.plot:
        why = plot(args.plot, runs)
        print(f"loss curve: {args.plot}" if why is None else f"no plot: {why}")
    return 0 if diff <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main(keep_memory=True))
