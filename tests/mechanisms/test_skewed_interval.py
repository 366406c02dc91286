"""The normal-plus-gamma interval (estimators/skewed_interval.py) against draws of its own
model: each side misses 2.5% within the binomial band, where the symmetric interval with the
same standard error misses on one side only."""

from __future__ import annotations

import numpy as np
import pytest

from chorus_collector.estimators.skewed_interval import SKEW_THRESHOLD, normal_plus_gamma_interval
from chorus_collector.results.estimates import Z95
from helpers.support import z_threshold

ALPHA = 1e-4
DRAWS = 200_000


@pytest.mark.parametrize(("sigma", "tau", "skew"), [(1.0, 1.0, 3.0), (0.5, 2.0, 1.0),
                                                     (2.0, 1.0, 4.0)])
def test_each_side_misses_its_share_under_the_model(sigma: float, tau: float,
                                                    skew: float) -> None:
    rng = np.random.default_rng(11)
    shape = 4 / skew**2                       # a gamma's skewness is 2/√shape
    scale = tau / np.sqrt(shape)
    errors = rng.normal(0, sigma, DRAWS) + rng.gamma(shape, scale, DRAWS) - shape * scale
    third = skew * tau**3
    low, high = normal_plus_gamma_interval(errors, np.full(DRAWS, sigma), np.full(DRAWS, tau),
                                           np.full(DRAWS, third), Z95)
    band = z_threshold(ALPHA, 2) * np.sqrt(0.025 * 0.975 / DRAWS)
    above, below = (low > 0).mean(), (high < 0).mean()   # the truth is 0
    assert abs(above - 0.025) < band and abs(below - 0.025) < band, (above, below)
    # The symmetric interval with the same total SE: its misses are lopsided.
    total = np.hypot(sigma, tau)
    assert (errors - Z95 * total > 0).mean() > 0.025 + band


def test_without_skew_the_interval_is_the_symmetric_one() -> None:
    estimate = np.array([0.1, 0.2, 0.3])
    sigma, tau = np.array([0.01, 0.02, 0.03]), np.array([0.01, 0.0, 0.02])
    third = np.array([0.0, 0.0, 0.5 * SKEW_THRESHOLD]) * np.hypot(sigma, tau)**3
    low, high = normal_plus_gamma_interval(estimate, sigma, tau, third, Z95)
    total = np.hypot(sigma, tau)
    assert np.allclose(low, estimate - Z95 * total) and np.allclose(high, estimate + Z95 * total)


def test_many_candidates_sharing_their_moments_get_the_same_standardized_interval() -> None:
    """60,000 candidates, as large a query as a default sketch decodes: the solves are shared
    between candidates whose standardized moments agree to 3 decimals."""
    count = 60_000
    rng = np.random.default_rng(3)
    estimate = rng.uniform(0, 0.01, count)
    sigma = np.full(count, 1e-3)
    tau = np.full(count, 1e-3)
    third = np.full(count, 3.0 * 1e-9)
    low, high = normal_plus_gamma_interval(estimate, sigma, tau, third, Z95)
    assert np.allclose(estimate - low, (estimate - low)[0])
    assert np.allclose(high - estimate, (high - estimate)[0])
    assert (estimate - low)[0] > (high - estimate)[0]      # right skew: more room below
