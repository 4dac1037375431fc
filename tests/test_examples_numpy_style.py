"""The NumPy-style examples (issue 37, item 7): ``char_rnn.py``, ``attention.py``, ``game_of_life.py``.

Each example's functions are plain NumPy written for one machine (lists of
parameters updated by ``+=``, ``np.split``/``np.hstack`` over heads, masks from
``np.tri``, ``np.copy``, ``np.clip(..., out=)``, ``np.roll``, writes through
views).  Here they run on NumPy arrays and on DTensors placed several ways
(by rows, by columns, replicated, the layout ``main`` uses, and a 2-D mesh),
with sizes that split unevenly (and leave empty shards), on 1-4 simulated
ranks and under ``mpiexec -n 2`` (the ``world`` fixture).  Every step's loss
and every parameter are compared with NumPy's (``Checks.result``: shape,
dtype, ``full_tensor()`` and each held local shard) within a tolerance of a
few hundred float64 epsilons (the sums run in another order), boards of the
Game of Life exactly.  Each ``main()`` runs simulated with few steps, and each
script under ``mpiexec -n 2`` as a user starts it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from collectives import comm_counter
from dtensor_np import Replicate, Shard
from launching import MPIEXEC, clean_mpi_env
from test_numpy_ops import Checks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import attention  # noqa: E402
from examples_common import record  # noqa: E402
import char_rnn  # noqa: E402
import game_of_life  # noqa: E402

WORLDS = pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
EPS = np.finfo(np.float64).eps
RTOL = 256 * EPS  # relative, on values and on each step's loss
S0, S1, R = Shard(0), Shard(1), Replicate()



def layouts(world: Any, count: int, megatron: list) -> list[tuple[str, dt.DeviceMesh, list]]:
    """``(name, mesh, placements of each of count arrays)``: the example's own layout, every array by rows, by
    columns, replicated, and on a 2-D mesh by rows and columns."""
    line = dt.DeviceMesh((world.size,), backend=world.kind)
    square = dt.DeviceMesh((2, world.size // 2) if world.size % 2 == 0 else (1, world.size), backend=world.kind)
    return [("as main", line, [[p] for p in megatron]), ("rows", line, [[S0]] * count),
            ("cols", line, [[S1]] * count), ("replicated", line, [[R]] * count),
            (f"2-D {square.shape}", square, [[S0, S1]] * count)]


def place(arrays: list[np.ndarray], mesh: dt.DeviceMesh, placements: list) -> list:
    return [dt.distribute_tensor(a, mesh, p) for a, p in zip(arrays, placements)]


def scale(expected: np.ndarray) -> float:
    """The absolute tolerance for ``expected``'s values: RTOL times its largest magnitude."""
    return RTOL * max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1.0)


def same_steps(checks: Checks, ctx: str, got: list, expected: list, names: tuple[str, ...]) -> None:
    """Every step's loss and parameters of ``got`` (DTensors) against NumPy's ``expected``."""
    checks.expect(len(got) == len(expected), f"{ctx}: {len(got)} steps, NumPy {len(expected)}")
    for n, ((loss, params), (loss_np, params_np)) in enumerate(zip(got, expected)):
        checks.expect(abs(loss - loss_np) <= RTOL * abs(loss_np), f"{ctx} step {n}: loss {loss!r}, NumPy {loss_np!r}")
        for name, p, e in zip(names, params, params_np):
            checks.result(f"{ctx} step {n} {name}", p, e, rtol=RTOL, atol=scale(e))


# ---------------------------------------------------------------------------------------------------------------
# char_rnn.py
# ---------------------------------------------------------------------------------------------------------------

RNN_TEXT = "hello, mesh! hello."  # 10 characters: V = 10 and H = 7 split unevenly; bh, by's 1 column: empty shards
RNN_CHARS = sorted(set(RNN_TEXT))
RNN_DATA = [RNN_CHARS.index(ch) for ch in RNN_TEXT]
RNN_NAMES = ("Wxh", "Whh", "Why", "bh", "by")
RNN_MAIN = [S0, S0, S1, S0, R]  # main's layout: the hidden dim sharded


def rnn_reference(steps: int) -> tuple[list, list, np.ndarray]:
    params = char_rnn.init_params(len(RNN_CHARS), 7, seed=3)
    history: list = []
    hprev = char_rnn.train(params, RNN_DATA, steps, seq_length=5, on_step=record(history))
    return params, history, hprev


@WORLDS
def test_char_rnn_trains_as_numpy(world):
    """4 Adagrad steps (the last one starts the text again): each step's loss and the 5 parameters, gradients
    clipped by ``np.clip(out=)`` and parameters updated by ``+=`` in a list, as NumPy's; each parameter keeps its
    placement (an in-place update does not move it); and the last hidden state."""
    _, expected, hprev_np = rnn_reference(4)
    checks = Checks(world)
    for name, mesh, placements in layouts(world, 5, RNN_MAIN):
        params = place(char_rnn.init_params(len(RNN_CHARS), 7, seed=3), mesh, placements)
        history: list = []
        hprev = char_rnn.train(params, RNN_DATA, 4, seq_length=5, on_step=record(history))
        same_steps(checks, f"char_rnn {name}", history, expected, RNN_NAMES)
        checks.result(f"char_rnn {name} last hidden state", hprev, hprev_np, rtol=RTOL, atol=scale(hprev_np))
        kept = [p.placements for p in params] == [tuple(p) for p in placements]
        checks.expect(kept, f"char_rnn {name}: placements {[p.placements for p in params]}, placed {placements}")
    checks.finish()


@WORLDS
def test_char_rnn_loss_fun_as_numpy(world):
    """One ``loss_fun`` (forward and backward through 6 characters) from a nonzero hidden state: the loss, the
    five clipped gradients (some clipped: the weights are large) and the last hidden state."""
    rng = np.random.default_rng(5)
    params_np = [3.0 * p + rng.standard_normal(p.shape) for p in char_rnn.init_params(len(RNN_CHARS), 7, seed=4)]
    h0 = rng.standard_normal((7, 1))
    loss_np, grads_np, h_np = char_rnn.loss_fun(params_np, RNN_DATA[:6], RNN_DATA[1:7], h0)
    assert any(np.any(np.abs(g) == 5) for g in grads_np)  # np.clip(out=) clipped something
    checks = Checks(world)
    for name, mesh, placements in layouts(world, 5, RNN_MAIN):
        params = place(params_np, mesh, placements)
        loss, grads, h = char_rnn.loss_fun(params, RNN_DATA[:6], RNN_DATA[1:7], dt.distribute_tensor(h0, mesh, placements[1]))
        checks.result(f"loss_fun {name} loss", loss, loss_np, rtol=RTOL, atol=0)
        for gname, g, e in zip(RNN_NAMES, grads, grads_np):
            checks.result(f"loss_fun {name} d{gname}", g, e, rtol=RTOL, atol=scale(e))
        checks.result(f"loss_fun {name} h", h, h_np, rtol=RTOL, atol=scale(h_np))
    checks.finish()


@pytest.mark.worlds(simulated=(2, 3), mpi=(2,))
def test_char_rnn_samples_as_numpy(world):
    """Greedy sampling (``p.argmax()``) after 3 steps: the same characters as NumPy."""
    params_np, _, hprev_np = rnn_reference(3)
    expected = [int(ix) for ix in char_rnn.sample(params_np, hprev_np, RNN_DATA[0], 12)]
    checks = Checks(world)
    for name, mesh, placements in layouts(world, 5, RNN_MAIN):
        params = place(params_np, mesh, placements)
        got = [int(ix) for ix in char_rnn.sample(params, dt.distribute_tensor(hprev_np, mesh, placements[1]),
                                                 RNN_DATA[0], 12)]
        checks.expect(got == expected, f"sample {name}: {got}, NumPy {expected}")
    checks.finish()


# ---------------------------------------------------------------------------------------------------------------
# attention.py
# ---------------------------------------------------------------------------------------------------------------

ATTN_HEADS = 2  # d_model 6 (3 columns a head), vocab 5, 9 positions: d_in 14; all split unevenly over 3 or 4 ranks
ATTN_NAMES = ("Wq", "Wk", "Wv", "Wo")
ATTN_MAIN = [S1, S1, S1, S0]  # main's layout: q, k, v by heads, the output projection by rows


@WORLDS
def test_attention_trains_as_numpy(world):
    """3 SGD steps with hand-written gradients: each step's loss and the 4 weights, as NumPy's; then the
    logits and the accuracy (``np.argmax``) of the trained weights."""
    x, targets = attention.task(vocab=5, length=9, seed=2)
    params_np = attention.init_params(x.shape[1], 6, 5)
    expected: list = []
    logits_np = attention.train(params_np, x, targets, ATTN_HEADS, 3, on_step=record(expected))
    accuracy_np = attention.accuracy(logits_np, targets)
    checks = Checks(world)
    for name, mesh, placements in layouts(world, 4, ATTN_MAIN):
        params = place(attention.init_params(x.shape[1], 6, 5), mesh, placements)
        history: list = []
        logits = attention.train(params, x, targets, ATTN_HEADS, 3, on_step=record(history))
        same_steps(checks, f"attention {name}", history, expected, ATTN_NAMES)
        checks.result(f"attention {name} logits", logits, logits_np, rtol=RTOL, atol=scale(logits_np))
        checks.result(f"attention {name} accuracy", attention.accuracy(logits, targets), accuracy_np, exact=True)
    checks.finish()


@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_attention_forward_masks_and_heads(world):
    """The forward pass alone on sharded inputs too (the tokens by rows): the logits, each head's attention
    probabilities (zero above the diagonal: the causal mask), the heads joined by ``np.hstack``."""
    x, _ = attention.task(vocab=5, length=9, seed=3)
    params_np = attention.init_params(x.shape[1], 6, 5, seed=4)
    logits_np, cache_np = attention.forward(params_np, x, ATTN_HEADS)
    assert all(np.all(np.triu(p, 1) == 0) for p in cache_np["probs"])
    checks = Checks(world)
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    for name, xp in (("x by rows", [S0]), ("x by cols", [S1])):
        params = place(params_np, mesh, [[p] for p in ATTN_MAIN])
        logits, cache = attention.forward(params, dt.distribute_tensor(x, mesh, xp), ATTN_HEADS)
        checks.result(f"forward {name} logits", logits, logits_np, rtol=RTOL, atol=scale(logits_np))
        checks.result(f"forward {name} o", cache["o"], cache_np["o"], rtol=RTOL, atol=scale(cache_np["o"]))
        for h, (p, e) in enumerate(zip(cache["probs"], cache_np["probs"])):
            checks.result(f"forward {name} head {h} probabilities", p, e, rtol=RTOL, atol=RTOL)
    checks.finish()


def test_attention_gradients_are_the_loss_gradients():
    """``backward`` (written by hand) against central differences of the loss, on NumPy."""
    x, targets = attention.task(vocab=4, length=6, seed=5)
    params = attention.init_params(x.shape[1], 4, 4, seed=6)

    def loss(ps: list) -> float:
        return float(attention.cross_entropy(attention.forward(ps, x, 2)[0], targets)[0])

    logits, cache = attention.forward(params, x, 2)
    grads = attention.backward(params, cache, attention.cross_entropy(logits, targets)[1], targets, 2)
    for i, (param, grad) in enumerate(zip(params, grads)):
        numeric = np.zeros_like(param)
        for idx in np.ndindex(param.shape):
            for sign in (1, -1):
                moved = [np.copy(p) for p in params]
                moved[i][idx] += sign * 1e-6
                numeric[idx] += sign * loss(moved) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8, err_msg=ATTN_NAMES[i])


# ---------------------------------------------------------------------------------------------------------------
# game_of_life.py
# ---------------------------------------------------------------------------------------------------------------

def life_layouts(world: Any) -> list[tuple[str, dt.DeviceMesh, list]]:
    return [(name, mesh, placements[0]) for name, mesh, placements in layouts(world, 1, [S0])[1:]]


@WORLDS
def test_life_steps_as_numpy(world):
    """6 generations on a torus (``np.roll``) and in a framed box (Rougier's update through a view of the
    interior), in place: every generation's board exactly NumPy's; the board keeps its placement and, sharded,
    only halo rows move (all_to_all), nothing is gathered or reduced."""
    board = game_of_life.start_board(13, 9, seed=1)  # 13 x 9 (15 x 11 framed): uneven rows and columns
    checks = Checks(world)
    for step, start in ((game_of_life.step_torus, board), (game_of_life.step_framed, np.pad(board, 1))):
        expected = [np.copy(start)]
        for _ in range(6):
            nxt = np.copy(expected[-1])
            step(nxt)
            expected.append(nxt)
        for name, mesh, placements in life_layouts(world):
            Z = dt.distribute_tensor(start, mesh, placements)
            for n in range(1, 7):
                with comm_counter() as counter:
                    step(Z)
                checks.result(f"{step.__name__} {name} generation {n}", Z, expected[n], exact=True)
                moved = {k for k, v in counter.counts.items() if v}
                checks.expect(moved <= ({"all_to_all"} if name != "replicated" else set()),
                              f"{step.__name__} {name}: {counter!r}")
            checks.expect(Z.placements == tuple(placements), f"{step.__name__} {name}: {Z.placements}")
    checks.finish()


@pytest.mark.worlds(simulated=(2, 3), mpi=(2,))
def test_life_counts_as_numpy(world):
    """``life`` on a torus: every generation's board, population and changed cells (``np.count_nonzero``)."""
    run_life(world, "wrap")


@pytest.mark.worlds(simulated=(2, 3), mpi=(2,))
def test_life_in_a_box_as_numpy(world):
    """``life`` in a box of dead cells (``np.pad`` frames the board): as NumPy's."""
    run_life(world, "dead")


def run_life(world: Any, boundary: str) -> None:
    board = game_of_life.start_board(13, 9, seed=2)
    expected: list = []
    final_np = game_of_life.life(board, 5, boundary, on_step=lambda n, Z, alive, changed: expected.append(
        (np.copy(Z), int(alive), int(changed))))
    checks = Checks(world)
    for name, mesh, placements in life_layouts(world):
        got: list = []
        final = game_of_life.life(dt.distribute_tensor(board, mesh, placements), 5, boundary,
                                  on_step=lambda n, Z, alive, changed: got.append((np.copy(Z), int(alive), int(changed))))
        for n, ((Z, alive, changed), (Z_np, alive_np, changed_np)) in enumerate(zip(got, expected)):
            checks.result(f"life {boundary} {name} generation {n}", Z, Z_np, exact=True)
            checks.expect((alive, changed) == (alive_np, changed_np),
                          f"life {boundary} {name} generation {n}: {alive, changed}, NumPy {alive_np, changed_np}")
        checks.result(f"life {boundary} {name} final", final, final_np, exact=True)
    checks.finish()


def test_collectives_as_the_docstrings_say():
    """On 4 simulated ranks, in each ``main``'s layout: what the examples' docstrings say moves."""
    mesh = dt.DeviceMesh((4,))

    def moved(call: Callable[[], Any]) -> dict[str, int]:
        with comm_counter() as counter:
            call()
        return {kind: n for kind, n in counter.counts.items() if n}

    # char_rnn: per character an all_reduce of the logits, all_gathers of h, reduce_scatters of dh; the update local
    params = place(char_rnn.init_params(len(RNN_CHARS), 9), mesh, [[p] for p in RNN_MAIN])
    h = dt.distribute_tensor(np.ones((9, 1)), mesh, [S0])
    counts = moved(lambda: char_rnn.loss_fun(params, RNN_DATA[:6], RNN_DATA[1:7], h))
    assert set(counts) == {"all_gather", "all_reduce", "reduce_scatter"} and counts["all_reduce"] == 6, counts
    assert counts["all_gather"] <= 12 and counts["reduce_scatter"] <= 6, counts
    loss, grads, h = char_rnn.loss_fun(params, RNN_DATA[:6], RNN_DATA[1:7], h)
    assert [g.placements for g in grads] == [p.placements for p in params]
    mems = [np.zeros_like(p) for p in params]
    assert moved(lambda: char_rnn.adagrad(params, grads, mems, 0.1)) == {}

    # attention, 4 heads on 4 ranks: np.split re-cuts each head, the scores are partial sums, np.hstack re-cuts back
    x, targets = attention.task()
    params = place(attention.init_params(x.shape[1], 32, 7), mesh, [[p] for p in ATTN_MAIN])
    assert moved(lambda: attention.forward(params, x, 4)) == {"all_to_all": 16, "all_reduce": 4}
    logits, cache = attention.forward(params, x, 4)
    loss, p = attention.cross_entropy(logits, targets)
    assert moved(lambda: attention.backward(params, cache, p, targets, 4)) == {
        "all_to_all": 28, "all_reduce": 8}
    grads = attention.backward(params, cache, p, targets, 4)
    assert moved(lambda: attention.sgd(params, grads, 0.1)) == {}
    q = np.dot(x, params[0])  # the heads as a batch dim instead: each stays on its rank
    assert moved(lambda: np.matmul(q.reshape(24, 4, 8).transpose(1, 0, 2), q.reshape(24, 4, 8).transpose(1, 2, 0))) == {}

    # game_of_life on a row-sharded board: halos only
    board = game_of_life.start_board()
    Z = dt.distribute_tensor(board, mesh, [S0])
    assert moved(lambda: game_of_life.step_torus(Z)) == {"all_to_all": 6}  # one halo exchange a roll along rows
    Z = dt.distribute_tensor(np.pad(board, 1), mesh, [S0])
    assert moved(lambda: game_of_life.step_framed(Z)) == {"all_to_all": 9}


# ---------------------------------------------------------------------------------------------------------------
# the scripts
# ---------------------------------------------------------------------------------------------------------------

SCRIPTS = {
    "char_rnn": (char_rnn, ["--steps", "3", "--hidden", "9"]),
    "attention": (attention, ["--steps", "3"]),
    "game_of_life": (game_of_life, ["--generations", "4"]),
}


def script_cases(extra: Callable[[str], list]) -> list:
    return [pytest.param(name, args + extra(name), id=name) for name, (_, args) in SCRIPTS.items()]


@pytest.mark.parametrize(("name", "args"), script_cases(lambda name: ["--ranks", "3"]))
def test_example_main_runs_simulated(name, args, capsys):
    SCRIPTS[name][0].main(args)
    out = capsys.readouterr().out
    assert "step   2:" in out or "generation   3:" in out  # progress per step
    assert "max |DTensor - NumPy|" in out and "on mesh (" in out  # the sharding, then the comparison


mpiexec_only = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed next to this Python")


@mpiexec_only
@pytest.mark.parametrize(("name", "args"), script_cases(lambda name: []))
def test_example_script_under_mpiexec(name, args):
    result = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, "-W", "ignore::RuntimeWarning", str(EXAMPLES / f"{name}.py"), *args],
        env=clean_mpi_env(), capture_output=True, text=True, timeout=240,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "backend='mpi'" in result.stdout and result.stdout.count("max |DTensor - NumPy|") >= 2, out[-3000:]
