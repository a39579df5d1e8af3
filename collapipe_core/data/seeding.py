"""Seeded random generators, one independent stream per purpose, all derived from the config seed.

Streams are named ("eval-split", "dirichlet", ...) and the name is turned into a stable integer
(CRC-32, unlike ``hash`` which changes per process), so adding a new use of randomness never shifts
the draws of an existing one. No global RNG is touched.
"""

from __future__ import annotations

import zlib

import numpy as np


def stream_rng(seed: int, stream: str) -> np.random.Generator:
    """A generator for ``stream`` under experiment ``seed``; same inputs, same draws, in any process."""
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(stream.encode("utf-8"))]))
