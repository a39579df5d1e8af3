"""Redistribution at the start of a round: the averaged model back to each CU, each device's segment
from its CU, and the optimizer state of the TEBs that changed device since the previous round.

Arrays are (N, K): cluster n, device k. B = bits of one TEB's weights (the same B as the gather for
FedAvg), B_opt = bits of one TEB's optimizer state (``ModelProfile.block_optimizer_state_bits``: AdamW
keeps 2 copies of the weights, SGD with momentum 1, plain SGD 0). Per cluster n, before its first
iteration:

- U = 8·bytes·(|θ_emb| + |θ_enc|) / r_up (:func:`model_transfer_s`): the edge server sends the
  averaged model to the CU at the CU's uplink rate used symmetrically — the time of the CU's upload
  for FedAvg.
- holders (:func:`holdings`): device k holds the TEBs of its segment, contiguous in device order
  (:func:`collapipe_core.decision.plan_segments`); a participant of a replicated round (the ``fl``
  baseline) holds every TEB.
- moves (:func:`block_moves`), against the previous round's placement (``RoundState.previous``):
  in_k = TEBs device k holds now that it did not hold in the previous round and another device did;
  out_j = TEBs device j held in the previous round that another device holds now. A TEB that
  several devices held (a replicated round's) is sent once, by the first of them in device order.
  With no previous placement (a run's first round) in_k = out_j = 0.
- the previous holders upload the moved optimizer state to the CU over their links of the previous
  round (their last allocation, in effect until the new decision's links are set up):
  upload_j = out_j·B_opt / r_prev_j, energy p_prev_j·upload_j, charged to device j in this round.
- then the CU sends every device that holds TEBs its segment's weights and the moved state, the
  links in parallel (FDMA) at the decision's rates: download_k = (δ_k·B + in_k·B_opt) / r_k.
- R_n = U + max_j upload_j + max_k download_k, and the round latency (:func:`round_latency_s`)
  T = max_n (R_n + I·T^pipe_n) + T^agg.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from collapipe_core.decision import plan_segments
from collapipe_core.network import BoolArray, FloatArray, IntArray

if TYPE_CHECKING:
    from collapipe_core.state import Placement, RoundState

Mode = Literal["pipeline", "replicated"]


@dataclass(frozen=True, eq=False)
class Redistribution:
    """The redistribution phase of one round (seconds, joules; counts of TEBs)."""

    model_s: float  # U: the averaged model, edge server → CU
    moved_in: IntArray  # (N, K) in_k: TEBs whose optimizer state device k receives
    moved_out: IntArray  # (N, K) out_j: TEBs whose optimizer state device j sends
    upload_s: FloatArray  # (N, K) out_j·B_opt / r_prev_j
    upload_energy_j: FloatArray  # (N, K) p_prev_j·upload_j
    download_s: FloatArray  # (N, K) (δ_k·B + in_k·B_opt) / r_k
    latency_s: FloatArray  # (N,) R_n
    latency_without_moves_s: FloatArray  # (N,) R_n had no TEB changed device: U + max_k δ_k·B / r_k

    @property
    def blocks_moved(self) -> IntArray:
        """(N,) TEBs whose optimizer state changed device, per cluster (Σ_j out_j)."""
        moved: IntArray = self.moved_out.sum(axis=1)
        return moved


def model_transfer_s(state: RoundState) -> float:
    """U: the embedding and encoder (what the CU uploads for FedAvg) at the CU's uplink rate."""
    prof = state.profile
    bits = 8.0 * prof.bytes_per_element * (prof.embedding_params + prof.encoder_params)
    return bits / state.scenario.cu_uplink_rate_bps


def holdings(num_blocks: IntArray, mode: Mode, total_blocks: int) -> BoolArray:
    """(N, K, L): whether device k of cluster n holds TEB l. A pipeline's segments are contiguous in
    device order (blocks past L and negative counts, which only an infeasible decision has, hold none);
    a replicated round's participants hold every TEB."""
    delta = np.asarray(num_blocks, dtype=np.int64)
    held = np.zeros((*delta.shape, total_blocks), dtype=np.bool_)
    if mode == "replicated":
        held[...] = (delta > 0)[:, :, None]
        return held
    for n, row in enumerate(np.maximum(delta, 0).tolist()):
        for k, blocks in enumerate(plan_segments(row)):
            held[n, k, blocks.start : blocks.stop] = True
    return held


def block_moves(
    previous: Placement | None, num_blocks: IntArray, mode: Mode, total_blocks: int
) -> tuple[IntArray, IntArray]:
    """(in_k, out_j), each (N, K): the TEBs whose optimizer state device k receives and device j sends
    when the segments ``num_blocks`` follow the ``previous`` placement (zeros without one)."""
    shape = np.shape(num_blocks)
    if previous is None:
        return np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    before = holdings(previous.num_blocks, previous.mode, total_blocks)
    now = holdings(num_blocks, mode, total_blocks)
    gained = now & ~before & before.any(axis=1, keepdims=True)  # (N, K, L)
    moved: BoolArray = np.any(gained, axis=1)  # (N, L): the TEB's state leaves its previous holder
    sender = before & (np.cumsum(before, axis=1) == 1)  # each TEB's first previous holder
    moved_in: IntArray = gained.sum(axis=2, dtype=np.int64)
    moved_out: IntArray = (sender & moved[:, None, :]).sum(axis=2, dtype=np.int64)
    return moved_in, moved_out


def redistribution(
    state: RoundState, num_blocks: IntArray, mode: Mode, rate_bps: FloatArray
) -> Redistribution:
    """The redistribution phase before the round's first iteration under segments ``num_blocks`` whose
    links run at ``rate_bps`` (the module docstring's formulas)."""
    prof = state.profile
    delta = np.asarray(num_blocks, dtype=np.int64)
    moved_in, moved_out = block_moves(state.previous, delta, mode, prof.num_blocks)
    model_s = model_transfer_s(state)
    up_bits = moved_out * prof.block_optimizer_state_bits
    holds = delta > 0
    weight_bits = np.where(holds, delta * prof.block_weight_bits, 0.0)
    down_bits = weight_bits + np.where(holds, moved_in * prof.block_optimizer_state_bits, 0.0)
    if state.previous is None:
        prev_rate, prev_power = np.ones(delta.shape), np.zeros(delta.shape)
    else:
        prev_rate, prev_power = state.previous.rate_bps, state.previous.power_w
    with np.errstate(divide="ignore", invalid="ignore"):
        upload = np.where(up_bits > 0, up_bits / prev_rate, 0.0)
        upload_energy = np.where((up_bits > 0) & (prev_power > 0), prev_power * upload, 0.0)
        download = np.where(holds, down_bits / rate_bps, 0.0)
        weights_only = np.where(holds, weight_bits / rate_bps, 0.0)
    return Redistribution(
        model_s=model_s,
        moved_in=moved_in,
        moved_out=moved_out,
        upload_s=upload,
        upload_energy_j=upload_energy,
        download_s=download,
        latency_s=model_s + upload.max(axis=1) + download.max(axis=1),
        latency_without_moves_s=model_s + weights_only.max(axis=1),
    )


def round_latency_s(
    moves: Redistribution, training_s: FloatArray, aggregation_s: float
) -> tuple[float, float]:
    """T = max_n (R_n + I·T^pipe_n) + T^agg (``training_s`` = I·T^pipe_n per cluster), and the part of
    T the block moves cost: T minus the same round's latency with no TEB changing device."""
    latency = float(np.max(moves.latency_s + training_s)) + aggregation_s
    without = float(np.max(moves.latency_without_moves_s + training_s)) + aggregation_s
    return latency, latency - without
