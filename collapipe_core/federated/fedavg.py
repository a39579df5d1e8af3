"""Federated averaging (FedAvg), data-size weighted: θ = Σ_n (D_n / Σ_m D_m) · θ_n."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def fedavg(
    states: Sequence[Mapping[str, torch.Tensor]], data_sizes: Sequence[int]
) -> dict[str, torch.Tensor]:
    """Average parameter dicts weighted by each participant's number of training samples.

    Every state must have the same keys and shapes; integer tensors (none in our models) would be
    refused rather than silently truncated.
    """
    if not states or len(states) != len(data_sizes):
        raise ValueError(
            f"need one data size per state, got {len(states)} states and {len(data_sizes)} sizes"
        )
    if any(n < 0 for n in data_sizes) or sum(data_sizes) <= 0:
        raise ValueError(f"data sizes must be non-negative with a positive total, got {list(data_sizes)}")
    keys = list(states[0])
    for i, state in enumerate(states[1:], start=1):
        if list(state) != keys:
            raise ValueError(f"state {i} has different parameters than state 0")
    total = float(sum(data_sizes))
    averaged: dict[str, torch.Tensor] = {}
    for key in keys:
        first = states[0][key]
        if not torch.is_floating_point(first):
            raise ValueError(f"cannot average non-floating parameter {key!r} ({first.dtype})")
        acc = torch.zeros_like(first, dtype=torch.float64)
        for state, size in zip(states, data_sizes, strict=True):
            acc += state[key].to(torch.float64) * (size / total)
        averaged[key] = acc.to(first.dtype)
    return averaged
