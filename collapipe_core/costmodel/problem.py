"""One round of the system model as plain arrays: the constants every cost formula reads.

:func:`build_problem` turns a :class:`~collapipe_core.state.RoundState` into a :class:`RoundProblem`;
:mod:`~collapipe_core.costmodel.closed_form` evaluates decisions on it (the cost model's
:func:`~collapipe_core.costmodel.evaluate.evaluate` and every scheduler call the same functions).
Device arrays are (N, K): cluster n, device k.

**What a micro-batch costs.** A micro-batch holds b samples: ``training.microbatch_size`` when the batch
is read per micro-batch (M·b samples per step), or b = B/M when ``training.batch_size`` fixes the batch
B of a step and M splits it (the step's gradient does not depend on M). :meth:`RoundProblem.micro_costs`
gives every per-micro-batch constant at the given M (for the fixed micro-batch reading they do not
depend on M):

- a_k   = (b·Φ_F + Φ_0)/F'_k             forward time of one TEB (F'_k = F_k·speed_k; Φ_0 the fixed work
  of a TEB's pass per micro-batch, ``network.block_overhead_flops``: kernel launches and small-batch
  inefficiency, counted in the device's effective FLOPs); backward ρ·a_k = (b·Φ_B + Φ_0B)/F'_k, so
  ρ = (b·Φ_B + Φ_0B)/(b·Φ_F + Φ_0) (Φ_B/Φ_F without fixed work; the same on every device of a cluster)
- e_k   = κ·f_k²·I·(b·(Φ_F + Φ_B) + Φ_0 + Φ_0B)/(FLOPs/cycle)   compute energy of one TEB for one
  micro-batch, per round
- P     = 8·b·s·d·bytes                   bits of one activation (or gradient) payload
- τ     = ``network.link_latency_s``      the fixed latency of every transfer (protocol and propagation)
- S0, c_F, c_B: the sum and the forward / backward maxima of the chain's fixed stages — CU compute,
  the CU's link to the first device (P/r_CU + τ), the edge server's link to the last device (P/r_edge + τ),
  the edge server's compute
- the memory constants: what a micro-batch keeps through one TEB, a micro-batch's receive buffers 2·P/8.

Memory of a scheduled device (:func:`device_memory_bytes`, ``in_flight_microbatches``):
δ_k·(S + n_k·A_k) + W_k + 2·M·P/8 + runtime overhead, with S = a TEB's weights as stored + the trainable
ones' gradients and optimizer state, A_k what one micro-batch keeps through one TEB until its backward
(b·a + a_0 measured; with recomputation b·a' + a'_0, the TEB's inputs), W_k the working set of the TEB
whose backward runs — W = b·a + a_0, and 2·W on a device that recomputes: the TEB's activations are
rematerialised beside its backward's own working set (the distributed ranks' measured peaks,
docs/distributed.md) —, n_k the micro-batches in flight (GPipe M, 1F1B min(C − i, M) for the device at
chain position i of C compute stages).

**Activation recomputation** (``training.activation_checkpointing``; :attr:`RoundProblem.recompute`, the
devices that recompute, (..., N, K)): a recomputing device's TEB keeps A' instead of A and its backward
runs the forward again, x_k = (b·(Φ'_B − Φ_B) + Φ_0)/F'_k more per TEB and micro-batch (Φ'_B the measured
backward of a checkpointed TEB), with its energy. ``none``: no device; ``all``: every scheduled device;
``auto``: the decision's flags, which DSSDA and ``optimal`` set by :meth:`RoundProblem.recompute_needed`
(exactly the devices whose memory without it exceeds their capacity: recomputing only adds time and energy,
so any other flags cost more or do not fit).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from collapipe_core.network import BoolArray, FloatArray, IntArray

if TYPE_CHECKING:  # the state is built on this package's profile
    from collapipe_core.state import Placement, RoundState

_Frozen = TypeVar("_Frozen", "RoundProblem", "MicroCosts")


def link_rate_bps(
    bandwidth_share: npt.ArrayLike,
    power_w: npt.ArrayLike,
    gain: npt.ArrayLike,
    bandwidth_hz: float,
    noise: float,
) -> FloatArray:
    """Shannon rate r = βW·log2(1 + p·h/(βW·N0)); 0 where β = 0 or p = 0."""
    bw = np.asarray(bandwidth_share, dtype=np.float64) * bandwidth_hz
    with np.errstate(divide="ignore", invalid="ignore"):
        snr = np.where(bw > 0, np.asarray(power_w) * np.asarray(gain) / (bw * noise), 0.0)
    rate: FloatArray = np.where(bw > 0, bw * np.log2(1.0 + snr), 0.0)
    return rate


def device_memory_bytes(
    delta: npt.ArrayLike,
    in_flight: npt.ArrayLike,
    micro: npt.ArrayLike,
    state_bytes: float,
    activation_bytes: npt.ArrayLike,
    buffer_bytes: npt.ArrayLike,
    overhead_bytes: float,
    working_bytes: npt.ArrayLike | None = None,
) -> FloatArray:
    """Memory of a scheduled device holding ``delta`` TEBs (the module docstring's formula):
    ``activation_bytes`` what one micro-batch keeps through one TEB (A_k), ``working_bytes`` the working set
    of the TEB whose backward runs (W; ``activation_bytes`` when None), ``buffer_bytes`` one micro-batch's
    receive buffers; the arguments broadcast."""
    d, n, m = (np.asarray(x, dtype=np.float64) for x in (delta, in_flight, micro))
    act, buf = np.asarray(activation_bytes), np.asarray(buffer_bytes)
    working = act if working_bytes is None else np.asarray(working_bytes)
    result: FloatArray = d * (state_bytes + n * act) + working + m * buf + overhead_bytes
    return result


def in_flight_microbatches(num_blocks: IntArray, num_microbatches: npt.ArrayLike, schedule: str) -> IntArray:
    """Micro-batches whose activations a device holds at its peak (GPipe: M; 1F1B: min(C − i, M)), for
    δ (..., K) and M (...).

    C counts the compute stages of the cluster's chain (CU, scheduled devices, edge server) and i is
    the device's 0-based position in it (the CU is position 0).
    """
    micro = np.broadcast_to(np.asarray(num_microbatches)[..., None], num_blocks.shape)
    if schedule == "gpipe":
        return np.asarray(micro, dtype=np.int64)
    scheduled = num_blocks > 0
    position = np.cumsum(scheduled, axis=-1)  # 1-based among scheduled devices = chain index
    stages = scheduled.sum(axis=-1, keepdims=True) + 2
    return np.asarray(np.minimum(stages - position, micro), dtype=np.int64)


def penalty_terms(
    convergence: str,
    V: float,
    lambda_: float,
    variance: float,
    noise_scale: float,
    batch: FloatArray | float,
    latency: FloatArray | float,
) -> tuple[FloatArray, FloatArray]:
    """(G, the convergence part of the penalty) of rounds of latency T training a batch of B_step samples
    per step over all clusters (b·Σ_n M_n, or N·B with a fixed batch; any broadcast shapes); the penalty is
    V·T + that part:

    - ``variance``:    G = σ²/B_step,       part V·λ·G
    - ``noise_scale``: G = B_noise/B_step,  part V·T·G  (penalty V·T/progress, progress =
      B_step/(B_step + B_noise): a step of batch B makes B/(B + B_noise) of the progress of an infinitely
      large one, McCandlish et al. 2018, "An Empirical Model of Large-Batch Training")
    """
    b = np.asarray(batch, dtype=np.float64)
    if convergence == "noise_scale":
        g = noise_scale / b
        return g, V * np.asarray(latency, dtype=np.float64) * g
    g = variance / b
    return g, V * lambda_ * g


@dataclass(frozen=True, eq=False)
class Previous:
    """Where the previous round left the encoder, per cluster (first axis N)."""

    held: BoolArray  # (N, K, L): which TEBs each device held
    sender: IntArray  # (N, L): each TEB's first holder, the one that sends its state if it moves (−1: none)
    time_per_bit: FloatArray  # (N, K): 1/r of its links (0 where unused)
    power_w: FloatArray  # (N, K)
    delta: IntArray | None  # (N, K): its segments (None after a replicated round)

    @staticmethod
    def of(placement: Placement | None, num_blocks: int) -> Previous | None:
        if placement is None:
            return None
        held = holdings(placement.num_blocks, placement.mode == "replicated", num_blocks)
        rate = np.asarray(placement.rate_bps, dtype=np.float64)
        return Previous(
            held=held,
            sender=np.where(held.any(axis=1), np.argmax(held, axis=1), -1),
            time_per_bit=np.where(rate > 0, 1.0 / np.maximum(rate, 1e-300), 0.0),
            power_w=np.asarray(placement.power_w, dtype=np.float64),
            delta=None
            if placement.mode == "replicated"
            else np.asarray(placement.num_blocks, dtype=np.int64),
        )


def holdings(num_blocks: npt.ArrayLike, replicated: bool, total_blocks: int) -> BoolArray:
    """(..., K, L): whether device k holds TEB l. A pipeline's segments are contiguous in device order
    (``decision.plan_segments``; blocks past L and negative counts, which only an infeasible decision has,
    hold none); a replicated round's participants hold every TEB."""
    delta = np.asarray(num_blocks, dtype=np.int64)
    if replicated:
        return np.broadcast_to((delta > 0)[..., None], (*delta.shape, total_blocks)).copy()
    ends = np.cumsum(np.maximum(delta, 0), axis=-1)
    starts = ends - np.maximum(delta, 0)
    blocks = np.arange(total_blocks)
    held: BoolArray = (blocks >= starts[..., None]) & (blocks < ends[..., None])
    return held


@dataclass(frozen=True, eq=False)
class MicroCosts:
    """Every per-micro-batch constant at some M (the module docstring's symbols). Device fields broadcast
    against (..., N, K), cluster fields against (..., N) — the shape of the M they were taken at, or plain
    (N, K) arrays and numbers when they do not depend on M."""

    samples: FloatArray | float  # b
    compute_s: FloatArray  # a_k
    backward_ratio: FloatArray | float  # ρ: a TEB's backward time over its forward time
    compute_energy_j: FloatArray  # e_k
    payload_bits: FloatArray | float  # P
    chain_sum_s: FloatArray | float  # S0
    chain_max_forward_s: FloatArray | float  # c_F
    chain_max_backward_s: FloatArray | float  # c_B
    activation_bytes: FloatArray | float  # A_k: what a micro-batch keeps through one TEB (device-level)
    working_bytes: FloatArray | float  # W = b·a + a_0: the working set of one TEB's backward
    buffer_bytes: FloatArray | float  # 2·b·s·d·bytes
    recompute_s: FloatArray | float  # x_k on recomputing devices, else 0: a TEB's extra backward time
    recompute_energy_j: FloatArray | float  # its energy per micro-batch and round (I passes)

    def backward_s(self, delta: npt.ArrayLike) -> FloatArray:
        """δ_k·(ρ·a_k + x_k) (..., N, K): the backward time of a device's TEBs for one micro-batch."""
        d = np.asarray(delta, dtype=np.float64)
        out: FloatArray = d * (np.asarray(self.backward_ratio)[..., None] * self.compute_s + self.recompute_s)
        return out

    def energy_per_block_j(self) -> FloatArray:
        """e_k + e'_k (..., N, K): one TEB's compute energy for one micro-batch over the round."""
        out: FloatArray = np.asarray(self.compute_energy_j + self.recompute_energy_j)
        return out


@dataclass(frozen=True, eq=False)
class RoundProblem:
    """Constants of one round's problem; device arrays are (N, K)."""

    num_blocks: int  # L
    available: BoolArray
    flops_per_s: FloatArray  # F'_k = F_k·speed_k
    cycle_energy_j: FloatArray  # κ·f_k²: the energy of one cycle
    cpu_hz: FloatArray  # f_k
    flops_per_cycle: FloatArray
    gain: FloatArray  # h_k
    max_power_w: FloatArray
    queues: FloatArray  # Q_k
    memory_bytes: FloatArray
    block_forward_flops: float  # Φ_F per sample
    block_backward_flops: float  # Φ_B per sample
    block_overhead_flops: float  # Φ_0
    block_backward_overhead_flops: float  # Φ_0B
    block_state_bytes: float  # S
    block_activation_bytes: float  # a per sample
    payload_bytes: float  # s·d·bytes per sample
    overhead_bytes: float
    block_bits: float  # B
    upload_s: float  # U (+ τ): the averaged model edge server → CU, and the CU's upload for FedAvg
    chain_flops: tuple[
        float, float, float, float
    ]  # per sample: CU forward, CU backward, edge forward, backward
    cu_flops_per_s: float
    edge_flops_per_s: float
    cu_link_rate_bps: float
    edge_downlink_rate_bps: float
    link_latency_s: float  # τ
    bandwidth_hz: float  # W
    noise_w_per_hz: float  # N0
    iterations: int  # I
    V: float
    lambda_: float
    gradient_variance: float
    microbatch_size: int | None  # b of the fixed micro-batch reading (None: the batch is fixed)
    batch_size: int | None  # B of the fixed batch reading
    microbatch_choices: IntArray  # the M a decision may take, ascending
    schedule: Literal["gpipe", "1f1b"]
    convergence: Literal["variance", "noise_scale"] = "variance"  # the penalty's convergence term
    noise_scale: float = 0.0  # B_noise (samples)
    latency_estimate: float = 0.0  # T̂: the latency the solver steps' noise-scale gain uses (convergence_gain)
    optimizer_bits: float = 0.0  # B_opt: one TEB's optimizer state, sent with a TEB that changes device
    previous: Previous | None = None  # the previous round's placement (None: no moves)
    num_clusters: int = 1  # N of the round (a problem's rows may be fewer or repeated clusters)
    max_blocks_per_device: int | None = None  # a cap on δ_k besides memory (None: L)
    frozen_bits: float = 0.0  # a TEB's frozen weights, sent to a device that gains it (adapters; else 0)
    activation_fixed_bytes: float = 0.0  # a_0: kept per micro-batch whatever its size
    recompute_backward_flops: float = 0.0  # Φ'_B per sample: the backward of a recomputed TEB
    recompute_activation_bytes: float = 0.0  # a' per sample: what a recomputed TEB keeps
    recompute_activation_fixed_bytes: float = 0.0  # a'_0
    checkpointing: Literal["none", "all", "auto"] = "none"
    recompute: BoolArray | None = None  # (..., N, K) the devices that recompute (None: none)
    fixed: MicroCosts | None = None  # the micro-batch constants of the fixed micro-batch reading

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.available.shape[0]), int(self.available.shape[1]))

    @property
    def microbatch_limit(self) -> int:
        return int(self.microbatch_choices[-1])

    @property
    def lightest_micro(self) -> int:
        """The M that needs the least memory: 1 (b samples in flight per micro-batch), or with a fixed
        batch the most micro-batches (B/M samples each)."""
        return int(self.microbatch_choices[0 if self.batch_size is None else -1])

    def with_recompute(self, recompute: npt.ArrayLike | None) -> RoundProblem:
        """The problem with the devices ``recompute`` (any shape broadcasting against (..., N, K); None: no
        device) recomputing their TEBs' activations in backward."""
        flags = None if recompute is None else np.asarray(recompute, dtype=bool)
        if flags is not None and not flags.any():
            flags = None
        out = dataclasses.replace(self, recompute=flags, fixed=None)
        if self.microbatch_size is None:
            return out
        return dataclasses.replace(out, fixed=_micro_costs(out, self.microbatch_size))

    def recompute_needed(self, delta: IntArray, micro: npt.ArrayLike) -> BoolArray:
        """The devices of δ (..., N, K) at M (..., N) whose memory without recomputation exceeds their
        capacity: where ``auto`` recomputes."""
        plain = self.with_recompute(None)
        need = plain.memory_bytes_of(delta, delta > 0, np.asarray(micro))
        out: BoolArray = (delta > 0) & (need > self.memory_bytes)
        return out

    def recompute_of(self, delta: IntArray, chosen: npt.ArrayLike | None = None) -> BoolArray | None:
        """The devices that recompute under ``training.activation_checkpointing`` for δ (..., N, K): none,
        every scheduled device (``all``), or under ``auto`` the decision's ``chosen`` flags where
        scheduled."""
        if self.checkpointing == "all":
            return np.asarray(delta > 0)
        if self.checkpointing == "auto" and chosen is not None:
            flags: BoolArray = np.asarray(chosen, dtype=bool) & (delta > 0)
            return flags if flags.any() else None
        return None

    def micro_costs(self, micro: npt.ArrayLike) -> MicroCosts:
        """The per-micro-batch constants at M (..., N) (module docstring)."""
        if self.fixed is not None:
            return self.fixed
        return _micro_costs(self, self.samples(micro))

    def samples(self, micro: npt.ArrayLike) -> FloatArray | int:
        """b at M (any shape): the fixed micro-batch size, or B/M."""
        if self.batch_size is None:
            assert self.microbatch_size is not None
            return self.microbatch_size
        out: FloatArray = self.batch_size / np.asarray(micro, dtype=np.float64)
        return out

    def step_samples(self, total_micro: npt.ArrayLike) -> FloatArray:
        """Samples per local step over every cluster: b·Σ_n M_n, or N·B with a fixed batch."""
        total = np.asarray(total_micro, dtype=np.float64)
        if self.batch_size is not None:
            return np.full(total.shape, float(self.batch_size * self.num_clusters))
        assert self.microbatch_size is not None
        out: FloatArray = self.microbatch_size * total
        return out

    @property
    def convergence_gain(self) -> float:
        """g with the convergence term ≈ g/Σ_n M_n for the solver steps that choose M: V·λ·σ²/b
        (``variance``, exact) or V·T̂·B_noise/b (``noise_scale``, at the latency estimate T̂; :func:`penalty`
        is exact and scores every candidate); 0 with a fixed batch (the term does not depend on M)."""
        if self.microbatch_size is None:
            return 0.0
        if self.convergence == "noise_scale":
            return self.V * self.latency_estimate * self.noise_scale / self.microbatch_size
        return self.V * self.lambda_ * self.gradient_variance / self.microbatch_size

    def rows(self, clusters: IntArray) -> RoundProblem:
        """A problem whose "clusters" are the given clusters' devices, one row each (repeats allowed):
        a batch of independent single-cluster sub-problems solved side by side (its array fields are the
        (N, K) device arrays)."""
        previous = None if self.previous is None else _indexed(self.previous, clusters)
        devices: dict[str, Any] = {
            k: v[clusters]
            for k, v in vars(self).items()
            if isinstance(v, np.ndarray) and k != "microbatch_choices"
        }
        fixed = None
        if self.fixed is not None:
            fixed = _copied(
                self.fixed, {k: v[clusters] for k, v in vars(self.fixed).items() if np.ndim(v) == 2}
            )
        return _copied(self, devices | {"previous": previous, "fixed": fixed})

    def microbatch_problem(self, micro: int) -> str | None:
        """Why M = ``micro`` is not a choice of the round (None when it is)."""
        if micro in self.microbatch_choices:
            return None
        if self.batch_size is None:
            return f"{micro} micro-batches, allowed 1..{self.microbatch_limit}"
        allowed = ", ".join(str(m) for m in self.microbatch_choices)
        return (
            f"{micro} micro-batches do not split the batch of {self.batch_size} samples into equal "
            "micro-batches "
            f"within the limit; allowed {allowed}"
        )

    def memory_bytes_of(
        self, delta: npt.ArrayLike, scheduled: BoolArray, micro: IntArray, recompute: BoolArray | None = None
    ) -> FloatArray:
        """:func:`device_memory_bytes` of δ (..., K) on the devices ``scheduled`` (their chain sets the 1F1B
        in-flight micro-batches, :func:`in_flight_microbatches`) with M (...); ``recompute`` (broadcasting
        against δ; default :attr:`recompute`) the devices that keep only their TEBs' inputs and
        rematerialise one TEB's activations in backward."""
        m = np.asarray(micro)
        b = np.asarray(self.samples(m))[..., None]
        in_flight = in_flight_microbatches(scheduled.astype(np.int64), m, self.schedule)
        flags = self.recompute if recompute is None else recompute
        working = b * self.block_activation_bytes + self.activation_fixed_bytes
        kept = working
        if flags is not None:
            again = b * self.recompute_activation_bytes + self.recompute_activation_fixed_bytes
            kept = np.where(flags, again, working)
            working = np.where(flags, 2.0 * working, working)
        return device_memory_bytes(
            delta,
            in_flight,
            m[..., None],
            self.block_state_bytes,
            kept,
            2.0 * b * self.payload_bytes,
            self.overhead_bytes,
            working,
        )

    def memory_caps(self, micro: npt.ArrayLike) -> IntArray:
        """Most TEBs each device can hold with M micro-batches (``micro`` broadcasts against (..., N)): the
        largest δ whose :meth:`memory_bytes_of` (affine in δ) is within the device's memory. For 1F1B the
        in-flight micro-batches count every available device as scheduled (fewer stages after a device
        only lower them), so the caps are safe for every placement. Unavailable devices get 0."""
        fixed, per_block = self.memory_line(micro)
        caps = np.floor((self.memory_bytes - fixed) / per_block)
        most = self.num_blocks if self.max_blocks_per_device is None else self.max_blocks_per_device
        return np.where(self.available, np.clip(caps, 0, most), 0).astype(np.int64)

    def memory_line(self, micro: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(memory without TEBs, memory per TEB) of every device (..., N, K) with M micro-batches (``micro``
        broadcasts against (..., N)): :meth:`memory_bytes_of` is affine in δ; for 1F1B every available device
        counts as scheduled (:meth:`memory_caps`)."""
        m = np.asarray(micro, dtype=np.int64)
        shape = np.broadcast_shapes((*m.shape, 1), self.available.shape)
        m = np.broadcast_to(m, shape[:-1])
        scheduled = np.broadcast_to(self.available, shape)
        fixed = self.memory_bytes_of(np.zeros(shape), scheduled, m)
        return fixed, self.memory_bytes_of(np.ones(shape), scheduled, m) - fixed

    def memory_fits(self, delta: IntArray) -> BoolArray:
        """(..., N, C): whether every scheduled device of δ (..., N, K) fits its memory at each choice of M
        (:attr:`microbatch_choices`, C of them)."""
        m = self.microbatch_choices  # (C,)
        blocks = np.broadcast_to(delta[..., None, :], (*delta.shape[:-1], m.size, delta.shape[-1]))
        flags = None if self.recompute is None else np.asarray(self.recompute)[..., None, :]
        need = self.memory_bytes_of(blocks, blocks > 0, np.broadcast_to(m, blocks.shape[:-1]), flags)
        fits: BoolArray = np.all((blocks == 0) | (need <= self.memory_bytes[..., None, :]), axis=-1)
        return fits

    def memory_limit(self, delta: IntArray) -> IntArray:
        """Largest M ≤ M_max (…, N) such that every M' ≤ M fits every scheduled device (0: not even M = 1);
        with a fixed micro-batch the memory grows with M, so these are all the M that fit."""
        return np.asarray(np.cumprod(self.memory_fits(delta), axis=-1).sum(axis=-1), dtype=np.int64)

    def time_per_bit(self, beta: FloatArray, power: FloatArray) -> FloatArray:
        """u = 1/r, r = :func:`link_rate_bps` (β·W·log2(1 + p·h/(β·W·N0))); ∞ where β or p is 0 (any
        leading dimensions)."""
        rate = link_rate_bps(beta, power, self.gain, self.bandwidth_hz, self.noise_w_per_hz)
        with np.errstate(divide="ignore"):
            return np.where(rate > 0, 1.0 / rate, np.inf)


def _copied(value: _Frozen, changes: dict[str, Any]) -> _Frozen:
    """``dataclasses.replace(value, **changes)`` without running ``__init__`` again (these dataclasses only
    store their fields): the solvers take rows of a problem thousands of times a decision."""
    out: _Frozen = object.__new__(type(value))
    vars(out).update(vars(value), **changes)
    return out


def _indexed(previous: Previous, index: Any) -> Previous:
    return Previous(
        held=previous.held[index],
        sender=previous.sender[index],
        time_per_bit=previous.time_per_bit[index],
        power_w=previous.power_w[index],
        delta=None if previous.delta is None else previous.delta[index],
    )


def _micro_costs(pr: RoundProblem, samples: FloatArray | float) -> MicroCosts:
    """The per-micro-batch constants of micro-batches of ``samples`` (b: a number, or (..., N))."""
    b = np.asarray(samples, dtype=np.float64)[..., None] if np.ndim(samples) else samples
    fixed, fixed_b = pr.block_overhead_flops, pr.block_backward_overhead_flops
    forward, backward = pr.block_forward_flops, pr.block_backward_flops
    rho: FloatArray | float
    if fixed or fixed_b:
        compute = (b * forward + fixed) / pr.flops_per_s
        rho = (np.asarray(samples) * backward + fixed_b) / (np.asarray(samples) * forward + fixed)
        flops = b * (forward + backward) + (fixed + fixed_b)
    else:
        compute = b * forward / pr.flops_per_s
        rho = backward / forward if forward > 0 else 2.0
        flops = b * (forward + backward)
    energy = pr.cycle_energy_j * pr.iterations * flops / pr.flops_per_cycle
    cu_f, cu_b, edge_f, edge_b = (samples * f for f in pr.chain_flops)
    cu_f, cu_b = cu_f / pr.cu_flops_per_s, cu_b / pr.cu_flops_per_s
    edge_f, edge_b = edge_f / pr.edge_flops_per_s, edge_b / pr.edge_flops_per_s
    payload_bits = 8.0 * samples * pr.payload_bytes
    cu_link = payload_bits / pr.cu_link_rate_bps + pr.link_latency_s
    edge_link = payload_bits / pr.edge_downlink_rate_bps + pr.link_latency_s
    working = b * pr.block_activation_bytes + pr.activation_fixed_bytes
    kept: FloatArray | float = working
    again_s: FloatArray | float = 0.0
    again_j: FloatArray | float = 0.0
    if pr.recompute is not None:  # the forward again: x_k = (b·(Φ'_B − Φ_B) + Φ_0)/F'_k
        again = b * (pr.recompute_backward_flops - backward) + fixed
        flags = pr.recompute
        again_s = np.where(flags, again / pr.flops_per_s, 0.0)
        again_j = np.where(flags, pr.cycle_energy_j * pr.iterations * again / pr.flops_per_cycle, 0.0)
        kept = np.where(
            flags, b * pr.recompute_activation_bytes + pr.recompute_activation_fixed_bytes, working
        )
    return MicroCosts(
        samples=samples,
        compute_s=compute,
        backward_ratio=rho,
        compute_energy_j=energy,
        payload_bits=payload_bits,
        chain_sum_s=cu_f + cu_link + edge_f + edge_b + edge_link + cu_b,
        chain_max_forward_s=np.maximum(np.maximum(cu_f, cu_link), edge_f),
        chain_max_backward_s=np.maximum(np.maximum(cu_b, edge_link), edge_b),
        activation_bytes=kept,
        working_bytes=working,
        buffer_bytes=2.0 * samples * pr.payload_bytes,
        recompute_s=again_s,
        recompute_energy_j=again_j,
    )


def microbatch_choices(batch_size: int | None, limit: int) -> IntArray:
    """The M a decision may take: 1..limit, or with a fixed batch B the divisors of B up to the limit
    (every micro-batch holds exactly B/M samples)."""
    m = np.arange(1, max(limit, 1) + 1, dtype=np.int64)
    return m if batch_size is None else m[batch_size % m == 0]


def build_problem(state: RoundState) -> RoundProblem:
    """The constants of ``state``'s round."""
    sc, prof, st = state.scenario, state.profile, state.settings
    fpc = np.asarray(sc.flops_per_cycle, dtype=np.float64)
    forward = prof.block_forward_flops
    pr = RoundProblem(
        num_blocks=prof.num_blocks,
        available=np.asarray(state.available, dtype=bool),
        flops_per_s=sc.flops_per_s * state.speed_factor,
        cycle_energy_j=sc.kappa * sc.cpu_hz**2,
        cpu_hz=np.asarray(sc.cpu_hz, dtype=np.float64),
        flops_per_cycle=fpc,
        gain=np.asarray(state.gain, dtype=np.float64),
        max_power_w=np.asarray(sc.max_power_w, dtype=np.float64),
        queues=np.asarray(state.queues, dtype=np.float64),
        memory_bytes=np.asarray(sc.memory_bytes, dtype=np.float64),
        block_forward_flops=forward,
        block_backward_flops=prof.block_backward_flops,
        block_overhead_flops=sc.block_overhead_flops,
        block_backward_overhead_flops=sc.block_backward_overhead_flops,
        block_state_bytes=prof.block_state_bytes,
        block_activation_bytes=prof.block_activation_bytes,
        payload_bytes=prof.payload_bytes,
        overhead_bytes=sc.runtime_overhead_bytes,
        block_bits=prof.block_update_bits,
        upload_s=prof.update_bits / sc.cu_uplink_rate_bps + sc.link_latency_s,
        chain_flops=(
            prof.embedding_forward_flops,
            prof.embedding_backward_flops,
            prof.head_forward_flops,
            prof.head_backward_flops,
        ),
        cu_flops_per_s=sc.cu_flops_per_s,
        edge_flops_per_s=sc.edge_flops_per_s,
        cu_link_rate_bps=sc.cu_link_rate_bps,
        edge_downlink_rate_bps=sc.edge_downlink_rate_bps,
        link_latency_s=sc.link_latency_s,
        bandwidth_hz=sc.bandwidth_hz,
        noise_w_per_hz=sc.noise_density_w_per_hz,
        iterations=st.local_iterations,
        V=st.V,
        lambda_=st.lambda_,
        gradient_variance=st.gradient_variance,
        microbatch_size=st.microbatch_size,
        batch_size=st.batch_size,
        microbatch_choices=st.microbatch_choices,
        schedule=st.schedule,
        convergence=st.convergence,
        noise_scale=state.noise_scale,
        optimizer_bits=prof.block_optimizer_state_bits,
        previous=Previous.of(state.previous, prof.num_blocks),
        num_clusters=sc.num_clusters,
        frozen_bits=prof.block_frozen_bits,
        activation_fixed_bytes=prof.block_activation_fixed_bytes,
        recompute_backward_flops=prof.block_recompute_backward_flops,
        recompute_activation_bytes=prof.block_recompute_activation_bytes,
        recompute_activation_fixed_bytes=prof.block_recompute_activation_fixed_bytes,
        checkpointing=st.checkpointing,
    )
    return pr.with_recompute(pr.available if st.checkpointing == "all" else None)
