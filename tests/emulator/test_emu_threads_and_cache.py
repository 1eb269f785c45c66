"""Concurrent launches from Python threads, and the on-disk build cache shared
by several processes (MPSLINALG_CACHE_DIR)."""

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from mpslinalg import emulator as emu

REPO = Path(__file__).resolve().parents[2]

SRC = r"""
#include <metal_stdlib>
using namespace metal;

kernel void group_sum(device const float* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      uint i [[thread_position_in_grid]],
                      uint t [[thread_index_in_threadgroup]],
                      uint n [[threads_per_threadgroup]],
                      uint g [[threadgroup_position_in_grid]]) {
    threadgroup float sh[256];
    sh[t] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 128; s > 0; s >>= 1) {
        if (t < s && t + s < n) sh[t] += sh[t + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (t == 0) out[g] = sh[0] + simd_sum(0.0f);
}

kernel void diverge(device float* out [[buffer(0)]],
                    uint t [[thread_index_in_threadgroup]]) {
    if (t == 5) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t] = 1.0f;
}

kernel void scale(device float* x [[buffer(0)]],
                  constant float& s [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    x[i] *= s;
}
"""


@pytest.fixture(scope="module")
def lib():
    return emu.compile_shader(SRC)


def expected_sums(x, group):
    return torch.stack([x[s : s + group].double().sum() for s in range(0, x.numel(), group)])


def test_two_threads_launch_at_once(lib):
    start = threading.Barrier(2)
    errors = []
    rounds = 15

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            x = torch.randint(-50, 50, (256 * 40,), generator=g).float()
            exp = expected_sums(x, 256).float()
            start.wait()
            for _ in range(rounds):
                out = torch.zeros(40)
                lib.group_sum(x, out, group_size=256)
                assert torch.equal(out, exp)
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    emu.reset_launch_counts()
    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "launch from a thread hangs"
    assert not errors, errors
    assert emu.launch_counts()["group_sum"] == 2 * rounds
    assert emu.total_launches() == 2 * rounds


def test_error_in_one_thread_does_not_disturb_another(lib):
    start = threading.Barrier(2)
    errors = []
    caught = []

    def bad():
        start.wait()
        for _ in range(20):
            try:
                lib.diverge(torch.zeros(64), group_size=64)
            except Exception as e:  # noqa: BLE001
                caught.append(e)

    def good():
        try:
            x = torch.arange(512, dtype=torch.float32)
            exp = expected_sums(x, 256).float()
            start.wait()
            for _ in range(20):
                out = torch.zeros(2)
                lib.group_sum(x, out, group_size=256)
                assert torch.equal(out, exp)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=bad), threading.Thread(target=good)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert len(caught) == 20 and all("barrier" in str(e).lower() for e in caught)


def test_many_threads_small_launches(lib):
    xs = [torch.arange(100, dtype=torch.float32) + k for k in range(4)]
    errors = []

    def work(k):
        try:
            for _ in range(50):
                lib.scale(xs[k], 1.0)
            lib.scale(xs[k], float(k + 1))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for k in range(4):
        assert torch.equal(xs[k], (torch.arange(100, dtype=torch.float32) + k) * (k + 1))


# ------------------------------------------------------------------ cache

CHILD = textwrap.dedent(r'''
    import os, sys, time
    from pathlib import Path
    import torch
    from mpslinalg import emulator as emu

    token = int(sys.argv[1])
    mode = sys.argv[2]
    src = """
    #include <metal_stdlib>
    using namespace metal;
    kernel void tagged(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        threadgroup int sh[64];
        sh[i % 64] = int(i) * %TOKEN%;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = sh[i % 64];
    }
    """.replace("%TOKEN%", str(token))
    assert Path(emu.cache_dir()).resolve() == Path(os.environ["MPSLINALG_CACHE_DIR"]).resolve(), \
        (emu.cache_dir(), os.environ["MPSLINALG_CACHE_DIR"])
    if mode.startswith("wait:"):
        # Rendezvous with the sibling process so that both compile at once.
        ready, go = mode[5:].split(",")
        Path(ready).touch()
        t0 = time.time()
        while not Path(go).exists():
            if time.time() - t0 > 60:
                raise SystemExit("no go signal")
            time.sleep(0.002)
    debug = mode == "debug"
    lib = emu.compile_shader(src, debug=debug)
    out = torch.zeros(64, dtype=torch.int32)
    lib.tagged(out, group_size=64)
    assert out.tolist() == [i * token for i in range(64)], out.tolist()
    if mode == "clear":
        emu.clear_cache()
        left = [p for p in Path(emu.cache_dir()).rglob("*") if p.is_file()]
        print("LEFT", len(left))
        lib2 = emu.compile_shader(src)
        out2 = torch.zeros(64, dtype=torch.int32)
        lib2.tagged(out2, group_size=64)
        assert torch.equal(out, out2)
    print("OK")
''')


def child_env(cache_dir, **extra):
    env = dict(os.environ)
    env["MPSLINALG_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(extra)
    return env


def run_child(tmp_path, cache_dir, token, mode="plain", **extra):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.run(
        [sys.executable, str(script), str(token), mode],
        env=child_env(cache_dir, **extra),
        capture_output=True,
        text=True,
        timeout=180,
    )


def snapshot(d):
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in Path(d).rglob("*") if p.is_file()}


def test_cache_shared_by_two_processes_compiling_at_once(tmp_path):
    token = uuid.uuid4().int % 100000 + 3
    shared = tmp_path / "shared"
    control = tmp_path / "control"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = []
    for k in range(2):
        mode = f"wait:{tmp_path / f'ready{k}'},{tmp_path / 'go'}"
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(token), mode],
                env=child_env(shared),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    t0 = time.time()
    while not all((tmp_path / f"ready{k}").exists() for k in range(2)):
        if time.time() - t0 > 120 or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.01)
    (tmp_path / "go").touch()
    results = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0 and "OK" in out, err[-3000:]

    files = snapshot(shared)
    assert files, "nothing was written to MPSLINALG_CACHE_DIR"

    # A single process on a fresh cache leaves the same files: the race left
    # no temporary or duplicate entries behind.
    r = run_child(tmp_path, control, token)
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(snapshot(control)) == set(files)

    # A third process loads from the shared cache without rebuilding.
    r = run_child(tmp_path, shared, token)
    assert r.returncode == 0, r.stderr[-3000:]
    assert snapshot(shared) == files


def test_debug_and_release_are_cached_separately(tmp_path):
    token = uuid.uuid4().int % 100000 + 3
    cache = tmp_path / "c"
    assert run_child(tmp_path, cache, token).returncode == 0
    rel = snapshot(cache)
    r = run_child(tmp_path, cache, token, "debug")
    assert r.returncode == 0, r.stderr[-3000:]
    both = snapshot(cache)
    assert set(rel) < set(both)
    r = run_child(tmp_path, cache, token)
    assert r.returncode == 0, r.stderr[-3000:]
    assert snapshot(cache) == both


def test_clear_cache(tmp_path):
    token = uuid.uuid4().int % 100000 + 3
    cache = tmp_path / "c"
    r = run_child(tmp_path, cache, token, "clear")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "LEFT 0" in r.stdout


def test_missing_compiler_is_a_clear_error(tmp_path):
    token = uuid.uuid4().int % 100000 + 3
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    r = run_child(
        tmp_path, tmp_path / "c", token, CXX=str(tmp_path / "no-such-c++"), PATH=str(empty)
    )
    assert r.returncode != 0
    tail = r.stderr[-2000:]
    assert "Traceback" in tail and "Segmentation" not in tail
    last = [line for line in tail.splitlines() if line.strip()][-1]
    assert any(w in last.lower() for w in ("compiler", "cxx", "g++", "clang")), last


def test_cache_dir_default_is_a_directory_path():
    d = Path(emu.cache_dir())
    assert d.is_absolute()
    if "MPSLINALG_CACHE_DIR" not in os.environ:
        assert "mpslinalg" in str(d).lower()


def test_two_threads_compile_the_same_new_source_at_once():
    token = uuid.uuid4().int % 100000 + 3
    src = SRC.replace("out[g] = sh[0] + simd_sum(0.0f);", f"out[g] = sh[0] + {token}.0f;")
    start = threading.Barrier(2)
    libs, errors = [], []

    def work():
        try:
            start.wait()
            libs.append(emu.compile_shader(src))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    x = torch.ones(512)
    for lib in libs:
        out = torch.zeros(2)
        lib.group_sum(x, out, group_size=256)
        assert out.tolist() == [256.0 + token] * 2


def test_a_translator_change_keeps_the_compiled_libraries(monkeypatch):
    """A compiled library's key is its C++ (with the headers and flags), so a change of the
    translator that leaves the C++ alone reuses it; the index from a Metal source to its
    library, which skips the translation, is keyed by the translator too."""
    from mpslinalg.emulator import build

    cxx = build.require_compiler()
    index_key = emu._index_key("kernel void k() {}", False, 320, cxx, False)
    shim = build.shim_hash()
    monkeypatch.setitem(build._hashes, "translator", "another translator")
    assert build.shim_hash() == shim
    assert emu._index_key("kernel void k() {}", False, 320, cxx, False) != index_key
