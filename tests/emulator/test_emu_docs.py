"""The example on docs/emulator.rst runs as written."""

import re
import textwrap
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "emulator.rst"


def test_docs_example_runs():
    text = DOC.read_text()
    setup = re.search(r"pick the executor once::\n\n((?:    .*\n|\n)+)", text)
    example = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", text)
    assert setup and example
    ns = {}
    exec(textwrap.dedent(setup.group(1)) + textwrap.dedent(example.group(1)), ns)  # noqa: S102
    ns["test_row_sums"]()


def test_docs_mention_every_public_function():
    from mpslinalg import emulator

    text = DOC.read_text()
    for name in emulator.__all__:
        documented = f".. function:: {name}(" in text or f".. exception:: {name}\n" in text
        assert documented, name
