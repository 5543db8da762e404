"""``linkfit._excess_slope``, the slope that gives γ and δ, against hand-worked least squares.

Every case is small and exact in binary: with two or more distinct coefficients the slope is
the least-squares slope of ``rest ≈ c + slope·k`` with a free intercept ``c`` and the slope
held at zero or above; with one distinct coefficient it is ``(k·rest)/(k·k)``, at least 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.models.linkfit import _excess_slope


def _slope(k, rest, t=None):
    k = np.asarray(k, dtype=float)
    rest = np.asarray(rest, dtype=float)
    t = np.ones_like(k) if t is None else np.asarray(t, dtype=float)
    return _excess_slope(k, rest, t)


@pytest.mark.parametrize(
    ("k", "rest", "slope"),
    [
        ([4.0, 4.0], [8.0, 12.0], 80 / 32),  # one distinct k: (4·8 + 4·12) / (16 + 16)
        ([4.0, 4.0], [2.0, 2.0], 0.5),  # a slope under 1 stays under 1
        ([0.5], [0.125], 0.25),  # k·k = 1/4, below 1
        ([4.0, 4.0], [-2.0, -2.0], 0.0),  # a negative excess gives 0, not a negative slope
        ([0.0, 0.0], [3.0, 5.0], 0.0),  # k = 0 everywhere: nothing to divide by, 0
    ],
)
def test_one_distinct_coefficient_is_the_ratio_of_sums(k, rest, slope):
    assert _slope(k, rest) == pytest.approx(slope, rel=1e-15, abs=0.0)


def test_two_coefficients_fit_a_line_with_its_own_intercept():
    # rest = 3 + 2k exactly: slope 2 (the ratio of sums would give 19/5)
    assert _slope([1.0, 2.0], [5.0, 7.0]) == pytest.approx(2.0, rel=1e-12)


def test_a_negative_intercept_is_allowed():
    # rest = -3 + 2k: the intercept is free of sign, so the slope stays 2
    assert _slope([2.0, 3.0, 4.0], [1.0, 3.0, 5.0]) == pytest.approx(2.0, rel=1e-12)


def test_a_falling_excess_gives_slope_zero_and_the_times_only_scale():
    # rest = 7 - 2k: the best line with slope >= 0 is flat, slope 0
    assert _slope([1.0, 2.0], [5.0, 3.0]) == 0.0
    k, rest = [1.0, 2.0, 4.0], [2.5, 4.5, 8.5]  # 0.5 + 2k
    for t in ([1.0, 1.0, 1.0], [0.25, 8.0, 1024.0]):
        assert _slope(k, rest, t) == pytest.approx(2.0, rel=1e-12)
