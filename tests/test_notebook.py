"""Jupyter on real ranks (dtensor_np.notebook): ``%dt_cluster`` and ``%%dt`` on 2 ipyparallel MPI engines.

The magics are driven as IPython calls them (the functions the extension
registers), on one cluster started for the module; the start-up timeout test
comes last, since starting a cluster stops the running one.
notebooks/04_real_ranks.ipynb runs the same magics in a real kernel (nbmake).
"""

from __future__ import annotations

import contextlib
import io

import IPython
import pytest

from dtensor_np import notebook


class Shell:
    """What the extension needs of IPython: magic registration, and a display publisher that records."""

    def __init__(self) -> None:
        self.magics: dict[str, object] = {}
        self.published: list[dict] = []
        self.input_transformers_cleanup: list = []
        self.display_pub = self

    def register_magic_function(self, func, magic_kind, magic_name):
        self.magics[magic_name] = func

    def publish(self, data, metadata=None, **kwargs):
        self.published.append(data)


@pytest.fixture(scope="module")
def shell():
    shell = Shell()
    notebook.load_ipython_extension(shell)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        shell.magics["dt_cluster"]("2")
    shell.started = out.getvalue()
    yield shell
    notebook.unload_ipython_extension(shell)


def test_a_cell_runs_on_every_rank_and_prints_once_from_rank_0(shell, capsys):
    assert shell.started.startswith("dt_cluster: 2 MPI ranks up in ")
    shell.magics["dt"]("", "import numpy as np\nimport dtensor_np as dt\nfrom mpi4py import MPI\n"
                           "mesh = dt.init_device_mesh((2,))\n"
                           "x = dt.distribute_tensor(np.arange(6.0), mesh, [dt.Shard(0)])\n"
                           "print(mesh.backend, MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.rank + 1), x.to_local())")
    out = capsys.readouterr()
    # 1 + 2 = 3: both ranks joined the allreduce; one line: only rank 0 printed
    assert out.out == "mpi 3 [0. 1. 2.]\n" and out.err == ""


def test_all_prints_every_rank_under_its_rank(shell, capsys):
    shell.magics["dt"]("--all", "print(x.to_local())\nprint('rank', MPI.COMM_WORLD.rank)")
    assert capsys.readouterr().out == ("[rank 0] [0. 1. 2.]\n[rank 0] rank 0\n"
                                       "[rank 1] [3. 4. 5.]\n[rank 1] rank 1\n")


def test_a_cell_shows_outputs_that_arrive_after_its_replies(shell, capsys):
    """An engine's prints travel apart from its reply: without waiting for them, rank 1's output went missing
    (in 1 of 10 such cells here, in every --all cell of a kernel)."""
    for _ in range(20):
        shell.magics["dt"]("--all", "print('x' * 20000 if MPI.COMM_WORLD.rank == 1 else 'r0')")
        assert capsys.readouterr().out == "[rank 0] r0\n[rank 1] " + "x" * 20000 + "\n"


def test_an_error_on_one_rank_is_shown_with_its_rank(shell, capsys):
    with pytest.raises(notebook.RankError, match=r"^rank 1: ValueError: only on rank 1$") as caught:
        shell.magics["dt"]("", "print('before')\nif MPI.COMM_WORLD.rank == 1:\n"
                               "    raise ValueError('only on rank 1')\nprint('after')")
    assert caught.value._render_traceback_() == ["RankError: rank 1: ValueError: only on rank 1"]  # what IPython shows
    out = capsys.readouterr()
    assert out.out == "before\nafter\n"  # rank 0 ran the whole cell
    assert out.err.startswith("[rank 1] ValueError: only on rank 1\n") and "raise ValueError" in out.err


def test_rank_0s_sharding_view_and_plot_are_displayed(shell, capsys, monkeypatch):
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    shell.magics["dt"]("", "y = dt.distribute_tensor(np.arange(8.0).reshape(4, 2), mesh, [dt.Shard(0)])\n"
                           "import matplotlib.pyplot as plt\n"
                           "plt.plot(y.to_local()[:, 0]); plt.show()\n"
                           "dt.visualize_sharding(y)")
    kinds = [sorted(data) for data in shell.published]
    assert kinds == [["image/png", "text/plain"], ["text/html", "text/plain"]], kinds
    view = shell.published[1]
    lines = view["text/plain"].splitlines()
    assert lines[0] == "S(0) on mesh (2,), global shape (4, 2) float64" and "r0" in lines[2] and "r1" in lines[3]
    assert "r0" in view["text/html"] and "r1" in view["text/html"]
    assert shell.published[0]["image/png"]  # a PNG from rank 0's inline backend


def test_every_plain_cell_goes_to_the_ranks_and_a_magic_cell_stays(shell):
    """What IPython does to a cell's lines before running it, after `%dt_cluster 2` (without --explicit)."""
    assert shell.started.endswith("; every cell runs (one starting with % runs here) on every rank\n")
    [transform] = shell.input_transformers_cleanup
    assert transform(["\n", "x = 1\n"]) == ["%%dt\n", "\n", "x = 1\n"]
    for kept in (["%dt_cluster stop\n"], ["%%dt --all\n", "x\n"], ["  !ls\n"], ["\n"]):
        assert transform(kept) == kept


def test_the_magics_refuse_bad_arguments(shell):
    with pytest.raises(ValueError, match=r"^expected `%dt_cluster N .*got `%dt_cluster two`$"):
        shell.magics["dt_cluster"]("two")
    for line in ("--every", "--timeout", "--all --timeout 0", "--timeout 1 2"):
        with pytest.raises(ValueError, match=rf"^expected `%%dt \[--all\] \[--timeout SECONDS\]`, got `%%dt {line}`$"):
            shell.magics["dt"](line, "print(1)")
    with pytest.raises(ValueError, match=r"got 0$"):
        notebook.start_cluster(0)


def test_a_cell_stuck_on_one_rank_is_named_after_its_timeout_and_the_engines_stop(shell):
    with pytest.raises(notebook.RankError) as caught:
        shell.magics["dt"]("--timeout 2", "if MPI.COMM_WORLD.rank == 0:\n    MPI.COMM_WORLD.Barrier()  # rank 1 skips it")
    assert str(caught.value) == ("expected every rank to finish the cell within 2 s, got ranks [0] still running "
                                 "(a collective that another rank skipped waits forever): stopped the engines, "
                                 "%dt_cluster N starts new ones")
    assert notebook._RUNNING is None


def test_stop_then_a_cell_says_to_start_a_cluster(shell, capsys):
    shell.magics["dt_cluster"]("stop")
    assert capsys.readouterr().out == "dt_cluster: stopped\n"
    with pytest.raises(RuntimeError, match="run %dt_cluster N first"):
        shell.magics["dt"]("", "print(1)")
    assert shell.input_transformers_cleanup[0](["x = 1\n"]) == ["x = 1\n"]  # cells run in the kernel again


def test_engines_that_cannot_come_up_in_time_raise_after_the_stated_tries(shell):
    with pytest.raises(notebook.ClusterStartError) as caught:
        shell.magics["dt_cluster"]("2 --timeout 0.01 --tries 2")
    message = str(caught.value)
    assert message.startswith("expected 2 MPI engines within 0.01 s (2 tries), got none\n  try 1 (")
    assert "\n  try 2 (" in message and "TimeoutError" in message and "engine log:" in message
    assert "mpi4py" in message and "-n 2" in message and "--timeout SECONDS" in message
    assert notebook._RUNNING is None  # nothing left running
