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


def test_bench_times_callables_interleaved_with_spread(registry, capsys):
    order = []

    @registry.bench_case("inverse", "interleaved")
    def bench(device, repeats):
        return {"mpslinalg": lambda: order.append("ours"), "torch": lambda: order.append("torch")}

    assert cli.main(["bench", "--device", "cpu", "--repeats", "4"]) == 0
    out = capsys.readouterr().out
    # one warm-up call each, then four rounds whose first contender rotates
    assert order == ["ours", "torch"] + ["ours", "torch", "torch", "ours"] * 2
    for column in ("min ms", "median ms", "max ms", "ratio"):
        assert column in out
    for field in ("torch threads", "load avg", "versions", "numpy", "scipy", "date"):
        assert field in out
    assert "* timed by the case itself" not in out


def test_bench_marks_figures_a_case_timed_itself(registry, capsys):
    registry.bench_case("inverse", "blocks")(lambda device, repeats: {"mpslinalg": 0.002,
                                                                      "torch": 0.001})
    assert cli.main(["bench", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "0.50x" in out and "2*" in out and "* timed by the case itself" in out


def test_bench_warns_when_the_machine_is_busy(registry, capsys, monkeypatch):
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (64.0 * (os.cpu_count() or 1), 1.0, 1.0))
    registry.bench_case("inverse", "x")(lambda device, repeats: {"mpslinalg": lambda: None})
    assert cli.main(["bench", "--device", "cpu", "--repeats", "1"]) == 0
    assert "timings below are unreliable" in capsys.readouterr().out


def test_bench_plot_needs_matplotlib_or_says_so(registry, capsys, tmp_path, monkeypatch):
    registry.bench_case("inverse", "x")(lambda device, repeats: {
        "mpslinalg": lambda: sum(range(100)), "torch": lambda: sum(range(200))})
    path = tmp_path / "ratios.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert cli.main(["bench", "--device", "cpu", "--plot", str(path)]) == 2
        assert "pip install 'mpslinalg[plot]'" in capsys.readouterr().err
        return
    assert cli.main(["bench", "--device", "cpu", "--repeats", "2", "--plot", str(path)]) == 0
    assert path.read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert cli.main(["bench", "--device", "cpu", "--plot", str(path)]) == 2
    assert "pip install 'mpslinalg[plot]'" in capsys.readouterr().err


def test_help_lists_ops_and_groups_and_wraps_long_cells():
    out = run_cli("check", "--help")
    assert out.returncode == 0 and "ops:" in out.stdout and "solve" in out.stdout
    out = run_cli("bench", "--help")
    assert "groups:" in out.stdout and "--plot FILE" in out.stdout
    table = cli._table(("a", "b"), [("x", "word " * 30)], width=20)
    assert all(len(line) <= 1 + 2 + 20 for line in table.splitlines())
    assert " ".join(table.split()).count("word") == 30


def test_info_does_not_load_the_case_modules(monkeypatch, capsys):
    """Only help names the registered ops and groups: a broken case module fails the commands
    that use the cases, not `info`."""
    def broken():
        raise ImportError("a broken case module")

    monkeypatch.setattr("mpslinalg.cases.load_all", broken)
    assert cli.main(["info"]) == 0
    with pytest.raises(ImportError, match="broken case module"):
        cli.main(["check", "--help"])


def test_info_prints_the_small_path_tables(monkeypatch, capsys):
    """info prints the path table of every n <= 4 op (`mpslinalg.small.paths.TABLES`): each
    row's path, dtypes, crossovers and their date, and whether it is ready here."""
    from mpslinalg.small import cpu_simd, paths

    cpu_simd.LIBRARY.wait()  # no build in flight sets the library under the test
    monkeypatch.setattr(cpu_simd.LIBRARY, "loaded", None)  # the LU kernels not built here
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for table in paths.TABLES.values():
        rows = "\n".join(f"    {row.describe()}" for row in table.rows)
        assert f"  {', '.join(table.functions)}:\n{rows}\n    otherwise: {table.fallback}\n" in out
    lu = paths.TABLES["inv"].row(paths.SIMD_CPU, "cpu").describe()
    assert lu.startswith("simd kernel on CPU  torch cpu   float32 ")
    assert " not ready " in lu
    assert lu.endswith("n = 1..4 from batch -, 1024, 1024, 1024 (measured 2026-12-01)")
