"""The ratio chart of ``bench --plot``: bars start at 1 on a log axis centred at 1."""

import math

import pytest

from mpslinalg._core.timing import Timing, ratio_figure

pytest.importorskip("matplotlib", reason="the plot extra: pip install 'mpslinalg[plot]'")


def test_bars_start_at_one_and_the_axis_is_centred_there():
    ours = Timing(1.0, 1.0, 1.0, 3)
    results = [("torch slower", {"mpslinalg": ours, "torch": Timing(3.0, 3.0, 3.0, 3)}),
               ("torch faster", {"mpslinalg": ours, "torch": Timing(0.25, 0.25, 0.25, 3)})]
    ax = ratio_figure(results).axes[0]
    spans = sorted(sorted((p.get_x(), p.get_x() + p.get_width())) for p in ax.patches)
    assert spans == [pytest.approx([0.25, 1.0]), pytest.approx([1.0, 3.0])]
    low, high = ax.get_xlim()
    assert ax.get_xscale() == "log" and math.isclose(low * high, 1.0)
    assert low < 0.25 and high > 4.0
