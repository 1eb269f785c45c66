"""Execute the notebooks in this folder in place (kernel python3, working directory = repo root).

    python notebooks/run_notebooks.py                      # all of them
    python notebooks/run_notebooks.py camera_batches.ipynb  # one
"""
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

names = sys.argv[1:] or sorted(p.name for p in HERE.glob("*.ipynb"))
for name in names:
    path = HERE / pathlib.Path(name).name
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    nbformat.write(nb, path)
    print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s, "
          f"{path.stat().st_size / 1024:.0f} KB")
