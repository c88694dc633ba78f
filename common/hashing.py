"""SplitMix64's finaliser over numpy arrays: a bijective, well-mixed hash of
uint64s, where draws or keys must depend on their input only (dedup's word
hashes, the loader's per-record mask draws)."""

from __future__ import annotations

import numpy as np


def mix64(values: np.ndarray) -> np.ndarray:
    """Every input bit moves every output bit (uint64 in, uint64 out)."""
    with np.errstate(over="ignore"):
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))
