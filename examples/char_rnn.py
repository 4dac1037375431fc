"""A character-level RNN (after Karpathy's min-char-rnn), written for one machine, run unchanged on sharded weights.

``loss_fun``, ``adagrad`` and ``sample`` are the NumPy program people write for
one machine: one-hot inputs from ``np.zeros((V, 1))``, forward and backward
through time with ``np.dot``, gradients clipped in place by
``np.clip(dparam, -5, 5, out=dparam)``, the parameters kept in a list and
updated by ``param += ...`` (Adagrad), the next character sampled greedily by
``p.argmax()``.  None of it names dtensor_np: ``main`` places the weights on the
mesh, each weight matrix's hidden dim sharded (``Wxh``, ``Whh`` and ``bh`` by
rows, ``Why`` by columns), and gathers the results to compare them with NumPy.
The characters and the one-hot vectors stay plain NumPy arrays (replicated
constants: no communication).  For each character of a window, the forward
pass all_gathers the hidden state for ``np.dot(Whh, h)`` (H numbers) and
all_reduces the partial logits of ``np.dot(Why, h)`` (V numbers), the collectives of
Megatron's column/row-parallel pair; the backward pass all_gathers ``h`` for
``dWhh`` and reduce_scatters ``np.dot(Whh.T, dhraw)``; the gradients keep
their weights' placements, so clipping and the Adagrad update are local.

    python examples/char_rnn.py                       # 4 simulated ranks in this process
    python examples/char_rnn.py --ranks 3 --steps 20
    mpiexec -n 2 python examples/char_rnn.py
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_and_args, record, report

TEXT = "hello world. hello mesh. the ranks say hello to the world, and the world says hello back. "


def loss_fun(params: list, inputs: list[int], targets: list[int], hprev: Any) -> tuple[Any, list, Any]:
    """Cross-entropy of ``targets`` after ``inputs`` (character indices), its gradients (clipped) and the last
    hidden state: min-char-rnn's ``lossFun``."""
    Wxh, Whh, Why, bh, by = params
    vocab_size = Wxh.shape[1]
    xs, hs, ys, ps = {}, {}, {}, {}
    hs[-1] = np.copy(hprev)
    loss = 0
    for t in range(len(inputs)):
        xs[t] = np.zeros((vocab_size, 1))  # one-hot
        xs[t][inputs[t]] = 1
        hs[t] = np.tanh(np.dot(Wxh, xs[t]) + np.dot(Whh, hs[t - 1]) + bh)
        ys[t] = np.dot(Why, hs[t]) + by  # unnormalised log probabilities of the next character
        ps[t] = np.exp(ys[t]) / np.sum(np.exp(ys[t]))
        loss += -np.log(ps[t][targets[t], 0])
    dWxh, dWhh, dWhy = np.zeros_like(Wxh), np.zeros_like(Whh), np.zeros_like(Why)
    dbh, dby = np.zeros_like(bh), np.zeros_like(by)
    dhnext = np.zeros_like(hs[0])
    for t in reversed(range(len(inputs))):
        dy = np.copy(ps[t])
        dy[targets[t]] -= 1  # backprop into y
        dWhy += np.dot(dy, hs[t].T)
        dby += dy
        dh = np.dot(Why.T, dy) + dhnext
        dhraw = (1 - hs[t] * hs[t]) * dh  # through tanh
        dbh += dhraw
        dWxh += np.dot(dhraw, xs[t].T)
        dWhh += np.dot(dhraw, hs[t - 1].T)
        dhnext = np.dot(Whh.T, dhraw)
    for dparam in [dWxh, dWhh, dWhy, dbh, dby]:
        np.clip(dparam, -5, 5, out=dparam)  # against exploding gradients
    return loss, [dWxh, dWhh, dWhy, dbh, dby], hs[len(inputs) - 1]


def adagrad(params: list, grads: list, mems: list, learning_rate: float) -> None:
    """One Adagrad update of ``params`` in place (``mems`` holds the sums of squared gradients)."""
    for param, dparam, mem in zip(params, grads, mems):
        mem += dparam * dparam
        param += -learning_rate * dparam / np.sqrt(mem + 1e-8)


def sample(params: list, h: Any, seed_ix: int, n: int) -> list:
    """``n`` character indices after ``seed_ix`` from hidden state ``h``, each the most likely next one."""
    Wxh, Whh, Why, bh, by = params
    vocab_size = Wxh.shape[1]
    x = np.zeros((vocab_size, 1))
    x[seed_ix] = 1
    ixes = []
    for t in range(n):
        h = np.tanh(np.dot(Wxh, x) + np.dot(Whh, h) + bh)
        y = np.dot(Why, h) + by
        p = np.exp(y) / np.sum(np.exp(y))
        ix = p.argmax()  # greedy: the same characters on every machine
        x = np.zeros((vocab_size, 1))
        x[ix] = 1
        ixes.append(ix)
    return ixes


def train(params: list, data: list[int], steps: int, seq_length: int = 8, learning_rate: float = 1e-1,
          on_step: Optional[Callable[..., None]] = None) -> Any:
    """``steps`` Adagrad steps over ``data`` (character indices) in windows of ``seq_length``; the last hidden
    state.  ``on_step(n, loss, params)`` sees every step."""
    mems = [np.zeros_like(param) for param in params]
    hprev = np.zeros((params[1].shape[0], 1))
    p = 0
    for n in range(steps):
        if p + seq_length + 1 >= len(data):
            hprev = np.zeros((params[1].shape[0], 1))  # back to the start of the text
            p = 0
        inputs = data[p:p + seq_length]
        targets = data[p + 1:p + seq_length + 1]
        loss, grads, hprev = loss_fun(params, inputs, targets, hprev)
        adagrad(params, grads, mems, learning_rate)
        if on_step is not None:
            on_step(n, loss, params)
        p += seq_length
    return hprev


def init_params(vocab_size: int, hidden_size: int, seed: int = 0) -> list[np.ndarray]:
    """``[Wxh, Whh, Why, bh, by]``, min-char-rnn's initialisation."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((hidden_size, vocab_size)) * 0.01, rng.standard_normal((hidden_size, hidden_size)) * 0.01,
            rng.standard_normal((vocab_size, hidden_size)) * 0.01, np.zeros((hidden_size, 1)), np.zeros((vocab_size, 1))]


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="Adagrad steps")
    parser.add_argument("--hidden", type=int, default=18, help="the hidden state's size")
    mesh, args = mesh_and_args(parser, argv)
    chars = sorted(set(TEXT))
    char_to_ix = {ch: i for i, ch in enumerate(chars)}
    data = [char_to_ix[ch] for ch in TEXT]
    params_np = init_params(len(chars), args.hidden)
    # the hidden dim sharded: Wxh, Whh and bh by rows, Why by columns; by replicated
    placements = [dt.Shard(0), dt.Shard(0), dt.Shard(1), dt.Shard(0), dt.Replicate()]
    params = [dt.distribute_tensor(p, mesh, [placement]) for p, placement in zip(params_np, placements)]

    reference: list = []
    hprev_np = train(params_np, data, args.steps, on_step=record(reference))

    hprev = train(params, data, args.steps, on_step=report(reference))
    print(dt.visualize_sharding(params[0]), flush=True)
    for name, p, e in zip(("Wxh", "Whh", "Why", "bh", "by"), params, params_np):
        print(compare(name, p, e), flush=True)
    print(compare("last hidden state", hprev, hprev_np), flush=True)
    text = "".join(chars[ix] for ix in sample(params, hprev, data[0], 40))
    text_np = "".join(chars[ix] for ix in sample(params_np, hprev_np, data[0], 40))
    print(f"greedy sample: {text!r}\n       NumPy: {text_np!r}", flush=True)
    assert text == text_np


if __name__ == "__main__":
    main()
