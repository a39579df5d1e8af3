"""The per-round scheduling problem as plain arrays: the constants of evaluate()'s model, vectorised.

Every scheduler works on the same numbers. For cluster n and device k (arrays (N, K)), per micro-batch
of b samples and per TEB:

- a_k  = b·Φ_F / (F_k·speed_k)            forward compute time of one TEB (backward is 2·a_k)
- e_k  = κ·f_k²·I·b·(Φ_F + Φ_B) / (FLOPs/cycle)   compute energy of one TEB for one micro-batch, per round
- P    = 8·b·s·d·bytes                     bits of one activation (or gradient) payload
- B    = 8·|θ_TEB|·bytes                   bits of one TEB's parameters (gathered at aggregation)
- U    = 8·bytes·(|θ_emb| + |θ_enc|) / r_up  the CU's upload time (the same for every decision)
- S0, c_F, c_B: sum and maxima of the CU's and the edge server's stage times (forward / backward)

With u_k = 1/r_k (seconds per bit) a decision (δ, M, β, p) costs

    T^pipe_n = S0 + Σ_{δ_k>0} (3·δ_k·a_k + 2·P·u_k)
               + (M_n − 1)·[max(c_F, max_k max(δ_k·a_k, P·u_k)) + max(c_B, max_k max(2·δ_k·a_k, P·u_k))]
    A_n      = U + max_{δ_k>0} δ_k·B·u_k
    E_k      = M_n·δ_k·e_k + p_k·u_k·(2·I·M_n·P + δ_k·B)
    J        = V·(max_n I·T^pipe_n + max_n A_n + λ·σ²/(b·Σ_n M_n)) + Σ_k Q_k·E_k

which is exactly :func:`collapipe_core.costmodel.evaluate` for the GPipe schedule (the tests check it).
For 1F1B the solvers use the same closed form as their latency model (the cost model simulates 1F1B).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Literal, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.state import RoundState

IntArray = npt.NDArray[np.int64]
_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T", bound=np.generic)


def quiet(step: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run a solver step without IEEE warnings: the steps mark infeasible candidates with ∞ (and 0·∞ = NaN
    along the way) and mask them out explicitly. A step called from inside another quiet step runs as it
    is (the outer step's error state already holds; entering np.errstate costs several numpy calls)."""

    @wraps(step)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if getattr(_QUIET, "active", False):
            return step(*args, **kwargs)
        _QUIET.active = True
        try:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return step(*args, **kwargs)
        finally:
            _QUIET.active = False

    return run


_QUIET = threading.local()  # .active: this thread is inside a quiet step


DEVICE_FIELDS = (  # the (N, K) arrays of a RoundProblem
    "available",
    "compute_s",
    "compute_energy_j",
    "gain",
    "max_power_w",
    "queues",
    "memory_bytes",
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

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.available.shape[0]), int(self.available.shape[1]))

    def with_queues(self, queues: FloatArray) -> RoundProblem:
        return dataclasses.replace(self, queues=np.asarray(queues, dtype=np.float64))

    def cluster(self, n: int) -> RoundProblem:
        """Cluster n alone (a one-cluster problem with the same constants)."""
        return self.rows(np.array([n]))

    def rows(self, clusters: IntArray) -> RoundProblem:
        """A problem whose "clusters" are the given clusters' devices, one row each (repeats allowed):
        a batch of independent single-cluster sub-problems solved side by side. (A copy with the device
        arrays replaced: what dataclasses.replace gives, without re-running __init__ over every field.)"""
        rows = copy.copy(self)
        for name in DEVICE_FIELDS:
            object.__setattr__(rows, name, getattr(self, name)[clusters])
        return rows

    def memory_caps(self, micro: npt.ArrayLike) -> IntArray:
        """Most TEBs each device can hold with M micro-batches (``micro`` broadcasts against (..., N)).

        GPipe keeps all M micro-batches' activations. For 1F1B device k keeps min(j + 2, M), j = scheduled
        devices after it; the caps use j = available devices after it, an upper bound, so they are safe
        for every placement. Unavailable devices get 0.
        """
        m = np.asarray(micro, dtype=np.float64)[..., None]
        in_flight = np.broadcast_to(m, (*m.shape[:-1], self.shape[1]))
        if self.schedule == "1f1b":
            after: FloatArray = np.cumsum(self.available[:, ::-1], axis=1)[:, ::-1] - self.available
            in_flight = np.minimum(in_flight, after + 2.0)
        per_block = self.block_state_bytes + in_flight * self.activation_bytes
        fixed = (
            self.overhead_bytes + self.activation_bytes + m * self.buffer_bytes
        )  # costmodel.device_memory_bytes
        caps = np.floor((self.memory_bytes - fixed) / per_block)
        return np.where(self.available, np.clip(caps, 0, self.num_blocks), 0).astype(np.int64)

    @quiet
    def rate_bps(self, beta: FloatArray, power: FloatArray) -> FloatArray:
        """r = βW·log2(1 + p·h/(βW·N0)), 0 where β or p is 0 (any leading batch dimensions)."""
        bw = np.maximum(beta, 0.0) * self.bandwidth_hz
        snr = np.where(bw > 0, np.maximum(power, 0.0) * self.gain / (bw * self.noise_w_per_hz), 0.0)
        return np.where(bw > 0, bw * np.log2(1.0 + snr), 0.0)


def take_last(values: npt.NDArray[_T], index: IntArray) -> npt.NDArray[_T]:
    """``np.take_along_axis(values, index, axis=-1)`` for arrays with the same leading shape, by one flat
    gather (numpy's general version builds an index per axis in Python: slow on the solvers' small arrays)."""
    offsets: IntArray = row_offsets(index.shape[:-1], values.shape[-1])
    out: npt.NDArray[_T] = np.asarray(values).reshape(-1)[index + offsets]
    return out


@functools.lru_cache(maxsize=256)
def row_offsets(lead: tuple[int, ...], width: int) -> IntArray:
    """The flat offset of each row's first element, (*lead, 1); cached (read-only): the shapes repeat."""
    offsets = np.arange(0, math.prod(lead) * width, width).reshape((*lead, 1))
    offsets.flags.writeable = False
    return offsets


@dataclass(frozen=True, eq=False)
class Costs:
    """The closed-form figures of a batch of decisions (leading dims ``...``)."""

    pipeline_s: FloatArray  # (..., N) one iteration
    gather_s: FloatArray  # (..., N) max_k δ_k·B·u_k (without the upload)
    energy_j: FloatArray  # (..., N, K)
    objective: FloatArray  # (...)


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
    upload_bits = 8.0 * prof.bytes_per_element * (prof.embedding_params + prof.encoder_params)
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
        block_bits=8.0 * prof.block_params * prof.bytes_per_element,
        upload_s=upload_bits / sc.cu_uplink_rate_bps,
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
    )


def costs(
    problem: RoundProblem, delta: IntArray, micro: IntArray, time_per_bit: FloatArray, power: FloatArray
) -> Costs:
    """The model's figures for δ (..., N, K), M (..., N), u = 1/r (..., N, K; any value where δ = 0), p.

    The formulas are those of this module's docstring, computed per decision by the compiled
    :func:`~collapipe_core.scheduler.kernels.costs.decision_costs`."""
    # imported here rather than at the top: the kernels import this module
    from collapipe_core.scheduler.kernels.costs import decision_costs

    pr = problem
    lead = delta.shape[:-2]
    n, k = pr.shape
    flat = (math.prod(lead), n, k)
    devices = np.stack([pr.compute_s, pr.compute_energy_j, pr.queues])
    constants = np.array(
        [
            pr.chain_sum_s,
            pr.chain_max_forward_s,
            pr.chain_max_backward_s,
            pr.payload_bits,
            pr.block_bits,
            pr.iterations,
            pr.upload_s,
            pr.V,
            pr.lambda_,
            pr.gradient_variance,
            pr.microbatch_size,
        ]
    )
    pipeline, gather, energy, objective = decision_costs(
        delta.reshape(flat),
        _shaped(micro, (*lead, n)).reshape(flat[:2]),
        _shaped(time_per_bit, delta.shape).reshape(flat),
        _shaped(power, delta.shape).reshape(flat),
        devices,
        constants,
    )
    return Costs(
        pipeline_s=pipeline.reshape((*lead, n)),
        gather_s=gather.reshape((*lead, n)),
        energy_j=energy.reshape(delta.shape),
        objective=objective.reshape(lead),
    )


def _shaped(x: npt.NDArray[_T], shape: tuple[int, ...]) -> npt.NDArray[_T]:
    """x broadcast to ``shape`` (np.broadcast_to costs microseconds even when nothing is to be done)."""
    return x if x.shape == shape else np.broadcast_to(x, shape)
