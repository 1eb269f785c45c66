"""The README's example and quick-start commands stay true."""

import pathlib
import re

import torch

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_example_runs(capsys):
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    torch.manual_seed(0)  # random matrices are well enough conditioned for the bound below
    exec(compile(code, "README.md", "exec"), {})
    assert float(capsys.readouterr().out.strip().removeprefix("tensor(").rstrip(")")) < 1e-2


def test_quick_start_is_two_commands_that_ci_runs():
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert len(commands) == 2
    assert "python -m mpslinalg check" in commands[0]
    ci = (pathlib.Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "python -m mpslinalg check" in ci
    assert commands[1].split()[:3] == ["python", "-m", "pytest"]
    assert " ".join(commands[1].split()[:5]) in ci
