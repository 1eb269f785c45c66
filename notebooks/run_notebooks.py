"""Execute the notebooks in this folder (kernel python3, working directory = repository root).

    python notebooks/run_notebooks.py                      # all of them, outputs written back
    python notebooks/run_notebooks.py camera_batches.ipynb  # one
    python notebooks/run_notebooks.py --check               # CI: execute, fail on any error,
                                                            # leave the files as they are

Needs the ``notebooks`` extra (``pip install -e ".[notebooks]"``: nbclient, nbformat, ipykernel,
matplotlib, SciPy). A cell that raises stops the run with a non-zero exit status.
"""
import argparse
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="execute without writing the outputs back (CI)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = parser.parse_args(argv)
    names = args.names or sorted(p.name for p in HERE.glob("*.ipynb"))
    total = time.perf_counter()
    for name in names:
        path = HERE / pathlib.Path(name).name
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        try:
            NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(ROOT)}}).execute()
        except CellExecutionError as exc:
            print(f"{path.name}: FAILED\n{exc}", file=sys.stderr)
            return 1
        if not args.check:
            nbformat.write(nb, path)
        print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s"
              + ("" if args.check else f", {path.stat().st_size / 1024:.0f} KB written"))
    print(f"{len(names)} notebooks in {time.perf_counter() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
