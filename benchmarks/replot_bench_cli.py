"""Redraw the figure of a recorded ``python -m mpslinalg bench`` run from its printed output.

``python benchmarks/replot_bench_cli.py benchmarks/results/bench_cli.md FIGURE.png`` reads
the first run recorded in the file (its header and its table of min / median / max) and
draws it as ``bench --plot`` does, without timing anything again.
"""

from __future__ import annotations

import argparse
import re

from mpslinalg._core.timing import Timing, plot_ratios


def recorded_run(text: str) -> tuple[str, list[tuple[str, dict[str, Timing]]]]:
    """The ``--plot`` title and the results of the first bench output in ``text``."""
    run = text[text.index("$ python -m mpslinalg bench"):]
    run = run[:run.index("```")]
    date = re.search(r"^date +(.+)$", run, re.M)[1]
    machine = re.search(r"^machine +(.+)$", run, re.M)[1]
    rounds = int(re.search(r"; (\d+) rounds", run)[1])
    results: dict[str, dict[str, Timing]] = {}
    row = re.compile(r"^(\S+(?: \S+)*) {2,}(.+?) {2,}(\S+) +([\d.]+) +([\d.]+) +([\d.]+)", re.M)
    for group, case, contender, low, median, high in row.findall(run):
        results.setdefault(f"{group}: {case}", {})[contender] = Timing(
            float(low) * 1e-3, float(median) * 1e-3, float(high) * 1e-3, rounds)
    return f"{machine}; {date}", list(results.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recorded", help="a results file holding the bench output")
    parser.add_argument("figure", help="the image to write")
    args = parser.parse_args()
    with open(args.recorded) as f:
        title, results = recorded_run(f.read())
    plot_ratios(results, args.figure, title=title)
    print(f"{len(results)} cases drawn to {args.figure}")


if __name__ == "__main__":
    main()
