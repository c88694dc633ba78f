"""Choosing LSH bands and rows for a Jaccard threshold, as datasketch does.

Two documents of Jaccard similarity ``s`` share at least one of ``b`` bands
of ``r`` rows with probability ``1 - (1 - s**r)**b``.  The false positive
weight is that probability integrated over ``s`` below the threshold; the
false negative weight is its complement integrated above.  The pair
``(b, r)`` with ``b * r <= perm`` minimising their (equally weighted) sum
is chosen: the same rule as datasketch's ``MinHashLSH`` (``_optimal_param``),
so a test can compare the two implementations on the same parameters.
"""

from __future__ import annotations

import numpy as np


def _integrate(function, low: float, high: float, steps: int = 2001) -> float:
    xs = np.linspace(low, high, steps)
    trapezoid = vars(np).get("trapezoid") or vars(np)["trapz"]  # numpy 2 renamed trapz
    return float(trapezoid(function(xs), xs))


def candidate_probability(similarity, bands: int, rows: int):
    """Probability that two documents of this Jaccard similarity share a band."""
    return 1.0 - (1.0 - np.power(similarity, rows)) ** bands


def optimal_bands_rows(threshold: float, perm: int, false_positive_weight: float = 0.5,
                       false_negative_weight: float = 0.5) -> tuple[int, int]:
    best, best_error = (1, 1), float("inf")
    for bands in range(1, perm + 1):
        for rows in range(1, perm // bands + 1):
            false_positive = _integrate(lambda s, b=bands, r=rows: candidate_probability(s, b, r), 0.0, threshold)
            false_negative = _integrate(lambda s, b=bands, r=rows: 1.0 - candidate_probability(s, b, r), threshold, 1.0)
            error = false_positive_weight * false_positive + false_negative_weight * false_negative
            if error < best_error:
                best, best_error = (bands, rows), error
    return best
