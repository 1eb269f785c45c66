"""The README's example and quick-start commands stay true."""

import pathlib
import re

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_example_runs_and_prints_what_the_readme_says(capsys):
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    assert "torch.manual_seed(" in code
    exec(compile(code, "README.md", "exec"), {})
    printed = float(capsys.readouterr().out.strip().rsplit(" ", 1)[-1])
    assert printed < 1e-5
    expected = re.search(r"It prints a number near ([\d.e-]+) \(`([\d.e-]+)`", README)
    assert float(expected[2]) / 10 < printed < 10 * float(expected[2])
    assert float(expected[1]) / 10 < printed < 10 * float(expected[1])


def test_quick_start_is_two_commands_that_ci_runs():
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert len(commands) == 2
    assert "python -m mpslinalg check" in commands[0]
    ci = (pathlib.Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "python -m mpslinalg check" in ci
    assert commands[1].split()[:3] == ["python", "-m", "pytest"]
    assert " ".join(commands[1].split()[:5]) in ci
