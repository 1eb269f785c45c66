"""Spawn a gloo world of CPU processes that runs one scenario, with a deadline.

``python tests/distributed/dtensor_world.py SCENARIO RANK SIZE INIT_FILE`` is one rank (the
test module starts them: `run`); a scenario is a function of ``dtensor_scenarios.py`` taking
the rank and world size, after ``init_process_group`` (file:// rendezvous in the test's own
temporary directory, so concurrent xdist workers never share a port or a file).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(scenario: str, size: int, tmp_path: Path, timeout: float = 240.0) -> list[str]:
    """Run ``scenario`` on ``size`` processes; every rank's output. Fails (after killing every
    rank still running) when a rank fails or the deadline passes."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    # a fresh rendezvous file per world: a FileStore file left by an earlier world would hand
    # out that world's addresses
    init = tmp_path / f"init-{scenario}-{size}-{os.getpid()}-{time.monotonic_ns()}"
    logs = [tmp_path / f"{scenario}-{size}-{rank}.log" for rank in range(size)]
    ranks = []
    for rank in range(size):
        with open(logs[rank], "w") as log:
            ranks.append(subprocess.Popen(
                [sys.executable, __file__, scenario, str(rank), str(size), str(init)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        for process in ranks:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        pass
    late = [r for r, p in enumerate(ranks) if p.poll() is None]
    for process in ranks:
        if process.poll() is None:
            process.kill()
            process.wait()
    outputs = [log.read_text() for log in logs]
    report = "\n".join(f"--- rank {r} (exit {p.returncode})\n{outputs[r]}"
                       for r, p in enumerate(ranks))
    if late:
        raise AssertionError(f"{scenario} on {size} ranks: ranks {late} still running after "
                             f"{timeout:.0f} s, killed\n{report}")
    if any(p.returncode != 0 for p in ranks):
        raise AssertionError(f"{scenario} on {size} ranks failed\n{report}")
    return outputs


def _main() -> None:
    scenario, rank, size, init = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import dtensor_scenarios as scenarios

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=size)
    try:
        getattr(scenarios, scenario)(rank, size)
        print(f"rank {rank}: {scenario} passed", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _main()
