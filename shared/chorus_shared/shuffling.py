"""Privacy amplification by shuffling: the Feldman–McMillan–Talwar closed form.

When n users each send **one** report from the same ε₀-LDP randomizer through a shuffler that
releases a uniformly random permutation of the reports (and nothing else about them), the
shuffled batch is (ε, δ)-DP for any one user's input with ε much smaller than ε₀.

Source: V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones: A Simple and Nearly
Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021 (arXiv 2012.12803), in the
form of the authors' code (``apple/ml-shuffling-amplification``, ``closedformanalysis``), as
recorded in MECHANISMS-2.md §5.1. That form uses (1 − e^{−ε₀}) / (1 + e^{−ε₀−ε̃}) where the
often quoted statement of the theorem has (e^{ε₀} − 1)/(e^{ε₀} + 1); the code's factor is the
larger, so its ε is the more conservative one (n = 10⁵, ε₀ = 4, δ = 10⁻⁶: 0.5378 against
0.5346), and that is the one used here.

The numerical bound of the same paper, which is about three times tighter, needs numpy and
lives in the collector (``chorus_collector.ingest.shuffling``). This module is pure Python so that
the client side of the protocol can state the closed form too.
"""

from __future__ import annotations

import math

__all__ = ["fmt_closed_form", "fmt_closed_form_applies"]


def _check(epsilon0: float, n: int, delta: float) -> None:
    if not (math.isfinite(epsilon0) and epsilon0 > 0):
        raise ValueError(f"epsilon0 must be a positive finite number, got {epsilon0!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def fmt_closed_form_applies(epsilon0: float, n: int, delta: float) -> bool:
    """Whether (ε₀, n, δ) is in the closed form's regime: ε₀ ≤ ln(n / (16 ln(4/δ)))."""
    _check(epsilon0, n, delta)
    return epsilon0 <= math.log(n / (16 * math.log(4 / delta)))


def fmt_closed_form(epsilon0: float, n: int, delta: float) -> float:
    """Central ε of shuffling n ε₀-LDP reports, at δ, by FMT's closed form (code's form).

    With L = ln(4/δ), a = 8·√(e^{ε₀}·L/n), c = 8·e^{ε₀}/n and ε̃ = ln(1 + a + c)::

        ε = ln(1 + (1 − e^{−ε₀}) / (1 + e^{−ε₀−ε̃}) · (a + c))

    valid for ε₀ ≤ ln(n / (16·L)). Outside that regime it returns ε₀: no amplification is
    claimed. The result is never above ε₀ (shuffling cannot make a report less private).
    """
    if not fmt_closed_form_applies(epsilon0, n, delta):
        return epsilon0
    log_term = math.log(4 / delta)
    a = 8 * math.sqrt(math.exp(epsilon0) * log_term / n)
    c = 8 * math.exp(epsilon0) / n
    eps_tilde = math.log1p(a + c)
    factor = (1 - math.exp(-epsilon0)) / (1 + math.exp(-epsilon0 - eps_tilde))
    return min(epsilon0, math.log1p(factor * (a + c)))
