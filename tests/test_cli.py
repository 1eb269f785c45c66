import subprocess
import sys

import pytest
import torch

from mpslinalg import cli
from mpslinalg._core import platform as _platform
from mpslinalg._core import registry as _registry


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "mpslinalg", *args], capture_output=True,
                          text=True, timeout=300)


def test_info_explains_why_mps_is_unusable():
    out = run_cli("info")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "mpslinalg 0.1.0" in text and f"torch     {torch.__version__}" in text
    for reason in _platform.mps_unavailable_reasons():
        assert reason in text
    if _platform.mps_unavailable_reasons():
        assert "metal on the Apple GPU not usable" in text
    assert "metal in the emulator" in text


def test_reasons_on_this_machine_are_plain_words():
    reasons = _platform.mps_unavailable_reasons()
    if sys.platform != "darwin":
        assert any("not macOS" in r for r in reasons)
    assert all(r and r[0].islower() for r in reasons)


@pytest.mark.parametrize("text, expected", [("2.13.0+cpu", (2, 13, 0)), ("2.6.0a0", (2, 6, 0)),
                                            ("15.1", (15, 1)), ("2.10.0.dev20250101", (2, 10, 0))])
def test_version_parsing(text, expected):
    assert _platform._version_tuple(text) == expected


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(_registry, "CHECKS", [])
    monkeypatch.setattr(_registry, "BENCHES", [])
    monkeypatch.setattr("mpslinalg.cases.load_all", lambda: None)
    return _registry


def test_check_with_nothing_registered(registry, capsys):
    assert cli.main(["check", "--device", "cpu"]) == 0
    assert "no checks registered" in capsys.readouterr().out


def test_check_reports_a_table_and_fails_on_any_failure(registry, capsys):
    seen_backends = []

    @registry.check_case("op_a", "easy")
    def easy(device):
        import mpslinalg

        seen_backends.append(mpslinalg.get_backend())
        return 1.5

    @registry.check_case("op_b", "too large", bound=10)
    def large(device):
        return 12.0

    @registry.check_case("op_c", "raises")
    def raises(device):
        raise ValueError("bad pivots")

    @registry.check_case("op_d", "nan")
    def nan(device):
        return float("nan")

    assert cli.main(["check", "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert seen_backends == ["metal"]  # check validates the Metal kernels by default
    assert "[1/4] op_a: easy ... pass" in out
    assert "error: ValueError: bad pivots" in out
    assert "1 passed, 3 failed" in out
    assert cli.main(["check", "--device", "cpu", "--op", "op_a", "--backend", "torch"]) == 0
    assert seen_backends == ["metal", "torch"]


def test_bench_prints_ratios(registry, capsys):
    @registry.bench_case("inverse", "4x4")
    def bench(device, repeats):
        return {"mpslinalg": 0.001, "torch": 0.004}

    assert cli.main(["bench", "--device", "cpu", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "4.00x" in out and "median ms" in out


def test_bench_with_nothing_registered(registry, capsys):
    assert cli.main(["bench", "--device", "cpu"]) == 0
    assert "no benchmarks registered" in capsys.readouterr().out


def test_median_time_runs_the_function():
    calls = []
    seconds = _registry.median_time(lambda: calls.append(1), torch.device("cpu"), repeats=3)
    assert len(calls) == 4 and seconds >= 0  # one warm-up run plus three timed runs


def test_console_script_entry_point_and_usage_error():
    out = run_cli("frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_unknown_names_and_devices_are_usage_errors(capsys):
    assert cli.main(["check", "--device", "cpu", "--op", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "no checks for bogus; choose from:" in err and "solve" in err
    assert cli.main(["bench", "--device", "cpu", "--group", "bogus"]) == 2
    assert "no benchmarks for bogus" in capsys.readouterr().err
    if not torch.backends.mps.is_available():
        assert cli.main(["check", "--device", "mps"]) == 2
        assert "MPS is not usable here" in capsys.readouterr().err


def test_error_cells_cut_at_a_word():
    assert cli._shorten("error: RuntimeError: " + "word " * 50, 40).endswith(" ...")
    assert len(cli._shorten("a " * 100, 40)) <= 40
