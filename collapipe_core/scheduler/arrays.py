"""The per-round scheduling problem as plain arrays, and its objective in closed form.

Every scheduler works on the same numbers. For cluster n and device k (arrays (N, K)), per micro-batch
of b samples and per TEB:

- a_k  = b·Φ_F / (F_k·speed_k)            forward compute time of one TEB (backward is 2·a_k)
- e_k  = κ·f_k²·I·b·(Φ_F + Φ_B) / (FLOPs/cycle)   compute energy of one TEB for one micro-batch, per round
- P    = 8·b·s·d·bytes                     bits of one activation (or gradient) payload
- B    = 8·|θ_TEB|·bytes                   bits of one TEB's parameters (gathered at aggregation)
- U    = 8·bytes·(|θ_emb| + |θ_enc|) / r_up  the CU's upload time (the same for every decision)
- S0, c_F, c_B: sum and maxima of the CU's and the edge server's stage times (forward / backward)

With u_k = 1/r_k (seconds per bit), r_k = β_k·W·log2(1 + p_k·h_k/(β_k·W·N0)), a decision (δ, M, β, p) costs

    T^pipe_n = S0 + Σ_{δ_k>0} (3·δ_k·a_k + 2·P·u_k)
               + (M_n − 1)·[max(c_F, max_k max(δ_k·a_k, P·u_k)) + max(c_B, max_k max(2·δ_k·a_k, P·u_k))]
    R_n      = U + max_k out_k·B_opt·u'_k + max_{δ_k>0} (δ_k·B + in_k·B_opt)·u_k
    A_n      = U + max_{δ_k>0} δ_k·B·u_k
    E_k      = M_n·δ_k·e_k + p_k·u_k·(2·I·M_n·P + δ_k·B) + p'_k·out_k·B_opt·u'_k
    T        = max_n (R_n + I·T^pipe_n) + max_n A_n
    J        = penalty(T, Σ_n M_n) + Σ_k Q_k·E_k,   penalty = V·(T + λ·σ²/(b·Σ M))     (``variance``)
                                                           or V·T·(1 + B_noise/(b·Σ M))  (``noise_scale``)

R_n is the redistribution before the first iteration (the averaged model from the edge server to the CU,
the optimizer state of TEBs whose holder changes from their previous holders over their previous links
u', p', then every device's TEBs over its link; in_k, out_k the TEBs device k gains and loses against the
previous round's placement, 0 without one), B_opt the bits of one TEB's optimizer state.

which is exactly :func:`collapipe_core.costmodel.evaluate` for the GPipe schedule (the tests check it).
For 1F1B the solvers use the same closed form as their latency model (the cost model simulates 1F1B).

:func:`costs` computes the per-cluster figures and :func:`round_objective` assembles J from them: the
one place that lists the objective's terms (every solver step scores with these two).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from collapipe_core.costmodel.evaluate import (
    device_memory_bytes,
    in_flight_microbatches,
    link_rate_bps,
    penalty_terms,
)
from collapipe_core.costmodel.redistribution import holdings, model_transfer_s
from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.state import RoundState

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

IntArray = npt.NDArray[np.int64]
_T = TypeVar("_T", bound=np.generic)
_D = TypeVar("_D", bound="DataclassInstance")

quiet = np.errstate(divide="ignore", invalid="ignore", over="ignore")
"""A decorator for the solver steps: they mark infeasible candidates with ∞ (and 0·∞ = NaN along the way)
and mask them explicitly, so IEEE warnings are silenced there."""


@dataclass(frozen=True, eq=False)
class Previous:
    """Where the previous round left the encoder, per cluster (first axis N)."""

    held: BoolArray  # (N, K, L): which TEBs each device held
    sender: IntArray  # (N, L): each TEB's first holder, the one that sends its state if it moves (−1: none)
    time_per_bit: FloatArray  # (N, K): 1/r of its links (0 where unused)
    power_w: FloatArray  # (N, K)
    delta: IntArray | None  # (N, K): its segments (None after a replicated round)

    @staticmethod
    def of(state: RoundState) -> Previous | None:
        if state.previous is None:
            return None
        before = state.previous
        held = holdings(before.num_blocks, before.mode, state.profile.num_blocks)
        rate = np.asarray(before.rate_bps, dtype=np.float64)
        return Previous(
            held=held,
            sender=np.where(held.any(axis=1), np.argmax(held, axis=1), -1),
            time_per_bit=np.where(rate > 0, 1.0 / np.maximum(rate, 1e-300), 0.0),
            power_w=np.asarray(before.power_w, dtype=np.float64),
            delta=np.asarray(before.num_blocks, dtype=np.int64) if before.mode == "pipeline" else None,
        )


@dataclass(frozen=True, eq=False)
class RoundProblem:
    """Constants of one round's problem; device arrays are (N, K)."""

    num_blocks: int  # L
    available: BoolArray
    compute_s: FloatArray  # a_k
    compute_energy_j: FloatArray  # e_k
    gain: FloatArray  # h_k
    max_power_w: FloatArray
    queues: FloatArray  # Q_k
    memory_bytes: FloatArray
    block_state_bytes: float
    activation_bytes: float  # b × activations of one TEB for one micro-batch
    buffer_bytes: float  # a micro-batch's receive buffers: 2·b·s·d·bytes (activation in, gradient in)
    overhead_bytes: float
    payload_bits: float  # P
    block_bits: float  # B
    upload_s: float  # U
    chain_sum_s: float  # S0
    chain_max_forward_s: float  # c_F
    chain_max_backward_s: float  # c_B
    bandwidth_hz: float  # W
    noise_w_per_hz: float  # N0
    iterations: int  # I
    V: float
    lambda_: float
    gradient_variance: float
    microbatch_size: int
    microbatch_limit: int
    schedule: Literal["gpipe", "1f1b"]
    convergence: Literal["variance", "noise_scale"] = "variance"  # the penalty's convergence term
    noise_scale: float = 0.0  # B_noise (samples)
    latency_estimate: float = 0.0  # T̂: the latency the solver steps' noise-scale gain uses (convergence_gain)
    optimizer_bits: float = 0.0  # B_opt: one TEB's optimizer state, sent with a TEB that changes device
    previous: Previous | None = None  # the previous round's placement (None: no moves)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.available.shape[0]), int(self.available.shape[1]))

    @property
    def convergence_gain(self) -> float:
        """g with the convergence term ≈ g/Σ_n M_n for the solver steps that choose M: V·λ·σ²/b
        (``variance``, exact) or V·T̂·B_noise/b (``noise_scale``, at the latency estimate T̂; :func:`penalty`
        is exact and scores every candidate)."""
        if self.convergence == "noise_scale":
            return self.V * self.latency_estimate * self.noise_scale / self.microbatch_size
        return self.V * self.lambda_ * self.gradient_variance / self.microbatch_size

    def latency_factor(self, total_micro: npt.ArrayLike) -> FloatArray:
        """The penalty's weight of the latency at Σ_n M_n, relative to V: 1 (``variance``) or
        1 + B_noise/(b·Σ M) (``noise_scale``); the link step and the segment DP scale their weights by it."""
        total = np.asarray(total_micro, dtype=np.float64)
        if self.V <= 0:
            return np.ones(total.shape)
        return (
            penalty(self, np.ones(total.shape), total) - penalty(self, np.zeros(total.shape), total)
        ) / self.V

    def rows(self, clusters: IntArray) -> RoundProblem:
        """A problem whose "clusters" are the given clusters' devices, one row each (repeats allowed):
        a batch of independent single-cluster sub-problems solved side by side (its array fields are the
        (N, K) device arrays)."""
        previous = None if self.previous is None else indexed(self.previous, clusters)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        devices: dict[str, Any] = {k: v[clusters] for k, v in values.items() if isinstance(v, np.ndarray)}
        return dataclasses.replace(self, previous=previous, **devices)

    def memory_caps(self, micro: npt.ArrayLike) -> IntArray:
        """Most TEBs each device can hold with M micro-batches (``micro`` broadcasts against (..., N)): the
        largest δ whose :meth:`memory_bytes_of` (affine in δ) is within the device's memory. For 1F1B the
        in-flight micro-batches count every available device as scheduled (fewer stages after a device
        only lower them), so the caps are safe for every placement. Unavailable devices get 0."""
        m = np.asarray(micro, dtype=np.int64)
        shape = np.broadcast_shapes((*m.shape, 1), self.available.shape)
        fixed = self.memory_bytes_of(np.zeros(shape), np.broadcast_to(self.available, shape), m)
        per_block = self.memory_bytes_of(np.ones(shape), np.broadcast_to(self.available, shape), m) - fixed
        caps = np.floor((self.memory_bytes - fixed) / per_block)
        return np.where(self.available, np.clip(caps, 0, self.num_blocks), 0).astype(np.int64)

    def memory_limit(self, delta: IntArray) -> IntArray:
        """Largest M ≤ M_max (…, N) such that every M' ≤ M fits every scheduled device (0: not even M = 1)."""
        m = np.arange(1, self.microbatch_limit + 1)  # (M,)
        blocks = np.broadcast_to(delta[..., None, :], (*delta.shape[:-1], m.size, delta.shape[-1]))
        need = self.memory_bytes_of(blocks, blocks > 0, np.broadcast_to(m, blocks.shape[:-1]))
        fits = np.all((blocks == 0) | (need <= self.memory_bytes[..., None, :]), axis=-1)  # (..., N, M)
        return np.asarray(np.cumprod(fits, axis=-1).sum(axis=-1), dtype=np.int64)

    def memory_bytes_of(self, delta: npt.ArrayLike, scheduled: BoolArray, micro: IntArray) -> FloatArray:
        """``costmodel.device_memory_bytes`` of δ (..., K) on the devices ``scheduled`` (their chain sets
        the 1F1B in-flight micro-batches, ``costmodel.in_flight_microbatches``) with M (...)."""
        in_flight = in_flight_microbatches(scheduled.astype(np.int64), micro, self.schedule)
        return device_memory_bytes(
            delta,
            in_flight,
            np.asarray(micro)[..., None],
            self.block_state_bytes,
            self.activation_bytes,
            self.buffer_bytes,
            self.overhead_bytes,
        )

    def time_per_bit(self, beta: FloatArray, power: FloatArray) -> FloatArray:
        """u = 1/r, r = ``costmodel.link_rate_bps`` (β·W·log2(1 + p·h/(β·W·N0))); ∞ where β or p is 0 (any
        leading dimensions)."""
        rate = link_rate_bps(beta, power, self.gain, self.bandwidth_hz, self.noise_w_per_hz)
        with np.errstate(divide="ignore"):
            return np.where(rate > 0, 1.0 / rate, np.inf)


def take_last(values: npt.NDArray[_T], index: IntArray) -> npt.NDArray[_T]:
    """``np.take_along_axis(values, index, axis=-1)`` for ``values`` (..., K) broadcast to the leading shape
    of ``index`` (..., J), as one flat gather (numpy's version builds an index per axis: slow on the
    solvers' many small arrays)."""
    lead, width = index.shape[:-1], values.shape[-1]
    flat = np.broadcast_to(values, (*lead, width)).reshape(-1)
    offsets = np.arange(0, math.prod(lead) * width, width).reshape((*lead, 1))
    out: npt.NDArray[_T] = flat[index + offsets]
    return out


def indexed(arrays: _D, index: Any) -> _D:
    """A dataclass of arrays with every field indexed by ``index`` (rows, a mask, new axes); None stays."""
    values = {f.name: getattr(arrays, f.name) for f in dataclasses.fields(arrays)}
    return dataclasses.replace(arrays, **{k: v if v is None else v[index] for k, v in values.items()})


def joined(parts: list[_D]) -> _D:
    """Dataclasses of arrays joined field by field along the first axis."""
    fields = dataclasses.fields(parts[0])
    return dataclasses.replace(
        parts[0], **{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields}
    )


@dataclass(frozen=True, eq=False)
class Costs:
    """The closed-form figures of a batch of decisions (leading dims ``...``)."""

    train_s: FloatArray  # (..., N) R_n + I·T^pipe_n: the redistribution, then the iterations
    latency_s: FloatArray  # (...) T = max_n (R_n + I·T^pipe_n) + U + max_n gather_n
    gather_s: FloatArray  # (..., N) max_k δ_k·B·u_k (A_n without the upload)
    energy_j: FloatArray  # (..., N, K) E_k
    objective: FloatArray  # (...) J


def build_problem(state: RoundState) -> RoundProblem:
    sc, prof, st = state.scenario, state.profile, state.settings
    b = st.microbatch_size
    cu_f = b * prof.embedding_forward_flops / sc.cu_flops_per_s
    cu_b = b * prof.embedding_backward_flops / sc.cu_flops_per_s
    edge_f = b * prof.head_forward_flops / sc.edge_flops_per_s
    edge_b = b * prof.head_backward_flops / sc.edge_flops_per_s
    payload_bits = 8.0 * b * prof.payload_bytes
    cu_link = payload_bits / sc.cu_link_rate_bps
    edge_link = payload_bits / sc.edge_downlink_rate_bps
    flops_per_block = b * (prof.block_forward_flops + prof.block_backward_flops)
    return RoundProblem(
        num_blocks=prof.num_blocks,
        available=np.asarray(state.available, dtype=bool),
        compute_s=b * prof.block_forward_flops / (sc.flops_per_s * state.speed_factor),
        compute_energy_j=sc.kappa * sc.cpu_hz**2 * st.local_iterations * flops_per_block / sc.flops_per_cycle,
        gain=np.asarray(state.gain, dtype=np.float64),
        max_power_w=np.asarray(sc.max_power_w, dtype=np.float64),
        queues=np.asarray(state.queues, dtype=np.float64),
        memory_bytes=np.asarray(sc.memory_bytes, dtype=np.float64),
        block_state_bytes=prof.block_state_bytes,
        activation_bytes=b * prof.block_activation_bytes,
        buffer_bytes=2.0 * b * prof.payload_bytes,
        overhead_bytes=sc.runtime_overhead_bytes,
        payload_bits=payload_bits,
        block_bits=prof.block_weight_bits,
        upload_s=model_transfer_s(state),
        chain_sum_s=cu_f + cu_link + edge_f + edge_b + edge_link + cu_b,
        chain_max_forward_s=max(cu_f, cu_link, edge_f),
        chain_max_backward_s=max(cu_b, edge_link, edge_b),
        bandwidth_hz=sc.bandwidth_hz,
        noise_w_per_hz=sc.noise_density_w_per_hz,
        iterations=st.local_iterations,
        V=st.V,
        lambda_=st.lambda_,
        gradient_variance=st.gradient_variance,
        microbatch_size=b,
        microbatch_limit=st.microbatch_limit,
        schedule=st.schedule,
        convergence=st.convergence,
        noise_scale=state.noise_scale,
        optimizer_bits=prof.block_optimizer_state_bits,
        previous=Previous.of(state),
    )


def costs(
    pr: RoundProblem, delta: IntArray, micro: IntArray, time_per_bit: FloatArray, power: FloatArray
) -> Costs:
    """The model's figures for δ (..., N, K), M (..., N), u = 1/r (..., N, K; any value where δ = 0), p."""
    on = delta > 0
    m = np.asarray(micro, dtype=np.float64)
    u = np.where(on, time_per_bit, 0.0)
    compute = delta * pr.compute_s  # δ_k·a_k
    link = pr.payload_bits * u  # P·u_k
    stage_f = np.max(np.where(on, np.maximum(compute, link), 0.0), axis=-1)
    stage_b = np.max(np.where(on, np.maximum(2.0 * compute, link), 0.0), axis=-1)
    pipeline = (
        pr.chain_sum_s
        + np.sum(np.where(on, 3.0 * compute + 2.0 * link, 0.0), axis=-1)
        + (m - 1.0)
        * (np.maximum(pr.chain_max_forward_s, stage_f) + np.maximum(pr.chain_max_backward_s, stage_b))
    )
    gather = np.max(delta * pr.block_bits * u, axis=-1)
    bits = 2.0 * pr.iterations * m[..., None] * pr.payload_bits + delta * pr.block_bits
    energy = np.where(on, m[..., None] * delta * pr.compute_energy_j + power * u * bits, 0.0)
    redistribution, move_energy = transfers(pr, delta, u)
    energy = energy + move_energy
    weighted = np.sum(pr.queues * energy, axis=-1)
    train = redistribution + pr.iterations * pipeline
    objective = round_objective(pr, train, gather, weighted, m)
    return Costs(train, round_latency(pr, train, gather), gather, energy, objective)


def moved_blocks(pr: RoundProblem, delta: IntArray) -> tuple[FloatArray, FloatArray]:
    """(in_k, out_k) (..., N, K) for placements δ (..., N, K) after the previous round's: the TEBs device k
    holds now that it did not and another device did (in), and those whose state device k sends, as their
    first previous holder (out). Segments are contiguous in device order (0 without a previous round)."""
    before = pr.previous
    if before is None:
        return np.zeros(delta.shape), np.zeros(delta.shape)
    k, blocks = delta.shape[-1], before.held.shape[-1]
    ends = np.cumsum(delta, axis=-1)  # (..., N, K)
    now = np.minimum(np.sum(ends[..., :, None] <= np.arange(blocks), axis=-2), k - 1)  # (..., N, L)
    had = np.take_along_axis(
        np.broadcast_to(before.held, (*now.shape[:-1], k, blocks)), now[..., None, :], -2
    )
    moved = (before.sender >= 0) & ~had[..., 0, :]  # (..., N, L): the TEB's new device did not hold it
    devices = np.arange(k)[:, None]
    into = np.sum(moved[..., None, :] & (now[..., None, :] == devices), axis=-1)
    out = np.sum(moved[..., None, :] & (before.sender[..., None, :] == devices), axis=-1)
    return into.astype(np.float64), out.astype(np.float64)


def transfers(pr: RoundProblem, delta: IntArray, time_per_bit: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The redistribution before the first iteration, R_n (..., N), and the moved state's upload energy
    (..., N, K): the edge server sends the averaged model to the CU (U), the previous holders of moved TEBs
    upload their optimizer state to the CU over their previous links, then the CU sends each device its
    TEBs (and the moved ones' optimizer state) over the decision's links (docs/system-model.md):

        R_n = U + max_k out_k·B_opt·u'_k + max_k (δ_k·B + in_k·B_opt)·u_k,   E_k += p'_k·out_k·B_opt·u'_k

    (u', p': the previous round's links). ``time_per_bit`` is u with 0 where δ = 0."""
    into, out = moved_blocks(pr, delta)
    download = np.max((delta * pr.block_bits + into * pr.optimizer_bits) * time_per_bit, axis=-1)
    if pr.previous is None:
        return pr.upload_s + download, np.zeros(delta.shape)
    sent = np.where(out > 0, out * pr.optimizer_bits * pr.previous.time_per_bit, 0.0)
    redistribution: FloatArray = pr.upload_s + np.max(sent, axis=-1) + download
    return redistribution, pr.previous.power_w * sent


def round_objective(
    pr: RoundProblem, train_s: FloatArray, gather_s: FloatArray, queued_energy: FloatArray, micro: FloatArray
) -> FloatArray:
    """J from per-cluster figures (..., N): R_n + I·T^pipe_n, the gather time max_k δ_k·B·u_k, Σ_k Q_k·E_k
    and M_n: J = penalty(T, Σ_n M_n) + Σ_n Σ_k Q_k·E_k with T = max_n (R_n + I·T^pipe_n) + U + max_n gather_n.

    The solver steps that couple clusters (the micro-batch step, the cluster choice) score with this."""
    latency = round_latency(pr, train_s, gather_s)
    value: FloatArray = penalty(pr, latency, np.sum(micro, axis=-1)) + np.sum(queued_energy, axis=-1)
    return value


def round_latency(pr: RoundProblem, train_s: FloatArray, gather_s: FloatArray) -> FloatArray:
    """T = max_n (R_n + I·T^pipe_n) + U + max_n gather_n from per-cluster figures (..., N)."""
    latency: FloatArray = np.max(train_s, axis=-1) + np.max(gather_s, axis=-1) + pr.upload_s
    return latency


def penalty(pr: RoundProblem, latency_s: FloatArray, total_micro: FloatArray) -> FloatArray:
    """The drift-plus-penalty's penalty of a round of latency T training Σ_n M_n micro-batches
    (:func:`~collapipe_core.costmodel.evaluate.penalty_terms`): V·(T + λ·σ²/(b·Σ_n M_n)) (``variance``) or
    V·T·(1 + B_noise/(b·Σ_n M_n)) (``noise_scale``). Non-decreasing in T and non-increasing in Σ M."""
    batch = pr.microbatch_size * np.asarray(total_micro, dtype=np.float64)
    _, part = penalty_terms(
        pr.convergence, pr.V, pr.lambda_, pr.gradient_variance, pr.noise_scale, batch, latency_s
    )
    out: FloatArray = pr.V * latency_s + part
    return out
