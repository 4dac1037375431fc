"""The README's commands and example stay true: CI runs its test command, its example runs."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", README, re.S)


def test_readme_has_the_two_set_up_commands_and_ci_runs_the_test_one():
    commands = _commands()
    assert 'pip install -e ".[mpi]" && python -m dtensor_np.examples.tp_mlp' in commands
    test_command = 'pip install -e ".[test]" && python -m pytest'
    assert test_command in commands
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_readme_has_the_docs_command_and_ci_runs_it():
    docs_command = 'pip install -e ".[docs]" && python -m sphinx -W -b html docs docs/_build/html'
    assert docs_command in _commands()
    assert docs_command in (ROOT / ".ci" / "run").read_text()
    assert "docs =" in (ROOT / "setup.cfg").read_text()


def test_readme_example_runs(tmp_path, capsys):
    code = re.search(r"## A 20-line example\n\n```python\n(.*?)```", README, re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    script = tmp_path / "example.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "Partial(reduce_op='sum')" in out and "\n1\n" in out
