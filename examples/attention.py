"""Causal multi-head self-attention trained by SGD, written for one machine, run unchanged on weights sharded by heads.

``forward``, ``backward`` and ``sgd`` are plain NumPy: the heads by
``np.split(q, n_heads, axis=-1)`` and joined by ``np.hstack``, a causal mask
from ``np.tri`` applied by ``np.where(mask, scores, -np.inf)``, a stable
softmax (``x - x.max(axis=-1, keepdims=True)``), gradients written out by hand,
parameters in a list updated by ``param -= lr * grad``.  None of it names
dtensor_np: ``main`` places the weights on the mesh, the query, key and value
projections sharded by columns (by heads) and the output projection by rows,
Megatron's attention layout; the tokens and the mask are plain NumPy arrays
(replicated constants).  The projections and the SGD update are local.  The
list of heads costs communication: a DTensor is laid out over every rank of
its mesh, so a head cut from the columns by ``np.split`` cannot stay on the
rank that holds it; each piece is re-cut over the ranks (an all_to_all of the
rows that change owner), each head's scores ``qh @ kh.T`` are then partial
sums (an all_reduce of an n x n matrix per head), and ``np.hstack`` puts the
heads' columns back on their ranks (an all_to_all each, of the columns that
change owner).  On 4 ranks with 4 heads a forward pass makes 16 all_to_alls
and 4 all_reduces, the backward pass 28 and 8.  (Written with the heads as a batch dim, ``q.reshape(n, heads, d).transpose(1, 0, 2)``,
each head stays on its rank and the attention itself moves nothing.)

    python examples/attention.py                      # 4 simulated ranks in this process
    python examples/attention.py --ranks 2 --steps 10
    mpiexec -n 2 python examples/attention.py
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_and_args, record, report


def forward(params: list, x: np.ndarray, n_heads: int) -> tuple[Any, dict]:
    """The logits of every position of ``x`` (tokens one-hot, with their positions), attending causally, and
    what ``backward`` needs."""
    Wq, Wk, Wv, Wo = params
    n = x.shape[0]
    q, k, v = np.dot(x, Wq), np.dot(x, Wk), np.dot(x, Wv)
    scale = 1.0 / np.sqrt(q.shape[-1] // n_heads)
    mask = np.tri(n, dtype=bool)  # position i sees positions 0..i
    probs, outs = [], []
    for qh, kh, vh in zip(np.split(q, n_heads, axis=-1), np.split(k, n_heads, axis=-1), np.split(v, n_heads, axis=-1)):
        scores = np.where(mask, np.dot(qh, kh.T) * scale, -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        probs.append(p)
        outs.append(np.dot(p, vh))
    o = np.hstack(outs)
    logits = np.dot(o, Wo)
    return logits, {"x": x, "q": q, "k": k, "v": v, "probs": probs, "o": o, "scale": scale}


def cross_entropy(logits: Any, targets: np.ndarray) -> tuple[Any, Any]:
    """The mean cross-entropy of ``targets`` under ``logits`` and the softmax probabilities."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return -np.mean(np.log(p[np.arange(len(targets)), targets])), p


def backward(params: list, cache: dict, p: Any, targets: np.ndarray, n_heads: int) -> list:
    """The gradients of the mean cross-entropy with respect to ``[Wq, Wk, Wv, Wo]``."""
    Wo = params[3]
    x, scale = cache["x"], cache["scale"]
    dlogits = np.copy(p)
    dlogits[np.arange(len(targets)), targets] -= 1
    dlogits /= len(targets)
    dWo = np.dot(cache["o"].T, dlogits)
    do = np.dot(dlogits, Wo.T)
    dqs, dks, dvs = [], [], []
    heads = zip(np.split(do, n_heads, axis=-1), cache["probs"], np.split(cache["q"], n_heads, axis=-1),
                np.split(cache["k"], n_heads, axis=-1), np.split(cache["v"], n_heads, axis=-1))
    for doh, ph, qh, kh, vh in heads:
        dvs.append(np.dot(ph.T, doh))
        dp = np.dot(doh, vh.T)
        ds = ph * (dp - (dp * ph).sum(axis=-1, keepdims=True)) * scale  # masked entries: ph is 0 there
        dqs.append(np.dot(ds, kh))
        dks.append(np.dot(ds.T, qh))
    return [np.dot(x.T, np.hstack(dqs)), np.dot(x.T, np.hstack(dks)), np.dot(x.T, np.hstack(dvs)), dWo]


def sgd(params: list, grads: list, lr: float) -> None:
    for param, grad in zip(params, grads):
        param -= lr * grad


def accuracy(logits: Any, targets: np.ndarray) -> Any:
    """The fraction of positions whose most likely token is the target."""
    return np.mean(np.argmax(logits, axis=-1) == targets)


def train(params: list, x: np.ndarray, targets: np.ndarray, n_heads: int, steps: int, lr: float = 4.0,
          on_step: Optional[Callable[..., None]] = None) -> Any:
    """``steps`` SGD steps on the cross-entropy; the last logits.  ``on_step(n, loss, params)`` sees every step."""
    for n in range(steps):
        logits, cache = forward(params, x, n_heads)
        loss, p = cross_entropy(logits, targets)
        sgd(params, backward(params, cache, p, targets, n_heads), lr)
        if on_step is not None:
            on_step(n, loss, params)
    return forward(params, x, n_heads)[0]


def task(vocab: int = 7, length: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs (each token one-hot, then its position one-hot) and targets: the token before each one (the
    first's target is itself), which only attention to the previous position finds."""
    tokens = np.random.default_rng(seed).integers(0, vocab, size=length)
    x = np.hstack([np.eye(vocab)[tokens], np.eye(length)])
    targets = np.concatenate([tokens[:1], tokens[:-1]])
    return x, targets


def init_params(d_in: int, d_model: int, vocab: int, seed: int = 1) -> list[np.ndarray]:
    """``[Wq, Wk, Wv, Wo]``."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((d_in, d_model)) / np.sqrt(d_in) for _ in range(3)] + [
        rng.standard_normal((d_model, vocab)) / np.sqrt(d_model)]


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="SGD steps")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (8 columns each)")
    mesh, args = mesh_and_args(parser, argv)
    vocab = 7
    x, targets = task(vocab)
    params_np = init_params(x.shape[1], 8 * args.heads, vocab)
    # Megatron's attention: q, k, v projections sharded by columns (heads), the output projection by rows
    placements = [dt.Shard(1), dt.Shard(1), dt.Shard(1), dt.Shard(0)]
    params = [dt.distribute_tensor(p, mesh, [placement]) for p, placement in zip(params_np, placements)]

    reference: list = []
    logits_np = train(params_np, x, targets, args.heads, args.steps, on_step=record(reference))

    logits = train(params, x, targets, args.heads, args.steps, on_step=report(reference))
    print(dt.visualize_sharding(params[0]), flush=True)
    for name, p, e in zip(("Wq", "Wk", "Wv", "Wo"), params, params_np):
        print(compare(name, p, e), flush=True)
    print(compare("logits", logits, logits_np), flush=True)
    print(compare("accuracy", float(accuracy(logits, targets)), accuracy(logits_np, targets)), flush=True)


if __name__ == "__main__":
    main()
