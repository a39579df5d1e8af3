"""Why a round's decision is what it is: counterfactual decisions evaluated by the same cost model on the
same round state, and a sentence that says which term decided.

Each round of a run (the runner calls :func:`explain`) keeps, with its decision:

- ``spread``: when some cluster's encoder sits on one device, the best decision with every cluster's TEBs
  over two devices or more (DSSDA with no device holding more than L − 1 TEBs: a constrained solve, not
  an evaluation; its time is ``spread_solve_s``);
- ``fewer_microbatches`` / ``more_microbatches``: the chosen placement and links with every cluster's M
  moved to the next smaller / larger choice (M ∓ 1 with a fixed micro-batch, the neighbouring divisors of
  B with a fixed batch);
- ``uniform``: the ``uniform`` baseline's decision (equal TEBs, bandwidth and power, the configured M);
- ``no_recompute``: when some device recomputes its TEBs' activations (``activation_checkpointing: auto``),
  the same decision without recomputation (it does not fit: the devices that recompute are exactly those
  whose memory needs it).

For each, how much more (or less) it costs than the chosen decision, ΔJ, split into the terms of the
objective: ``compute`` and ``links`` (the round latency's change, V-weighted, split by the critical
cluster's compute stages against its transfers — pipeline transfers and the weights sent at the round's
start and end), ``energy`` (Σ_k Q_k·ΔE_k: the energy queues) and ``convergence``; and ``memory`` when it
does not fit. The term that weighs most against a counterfactual is the reason the decision avoided it;
:func:`explain`'s sentence names it for each.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from collapipe_core.costmodel import build_problem, evaluate
from collapipe_core.costmodel.closed_form import gpipe_parts, stage_times
from collapipe_core.costmodel.evaluation import Evaluation
from collapipe_core.decision import Decision
from collapipe_core.network import device_id
from collapipe_core.scheduler import get_policy
from collapipe_core.scheduler.dssda import solve
from collapipe_core.state import RoundState

TERMS = ("compute", "links", "energy", "convergence")


def latency_parts(state: RoundState, decision: Decision, ev: Evaluation) -> dict[str, float]:
    """The round latency T split into ``compute`` and ``links``: the critical cluster's iterations by the
    kind of stage (the compute and link stages of GPipe's makespan; a 1F1B makespan in the same
    proportions), plus its redistribution and the aggregation as links."""
    if decision.mode == "replicated" or not np.isfinite(ev.latency_s):
        return {"compute": float(np.max(ev.compute_s, initial=0.0)), "links": ev.latency_s}
    pr = build_problem(state)
    delta, micro = decision.num_blocks(), decision.num_microbatches()
    pr = pr.with_recompute(pr.recompute_of(delta, decision.recompute()))
    u = np.where(delta > 0, pr.time_per_bit(decision.bandwidth_share(), decision.power_w()), 0.0)
    compute, links = gpipe_parts(stage_times(pr, delta, micro, u), micro)
    n = int(np.argmax(ev.redistribution_s + pr.iterations * ev.pipeline_s))
    share = compute[n] / max(compute[n] + links[n], 1e-300)
    iterations = pr.iterations * float(ev.pipeline_s[n])
    return {"compute": iterations * share, "links": ev.latency_s - iterations * share}


def _terms(
    state: RoundState, base: tuple[Decision, Evaluation], other: tuple[Decision, Evaluation]
) -> dict[str, float]:
    """ΔJ of ``other`` against ``base`` by term (they sum to ΔJ)."""
    st = state.settings
    (d0, e0), (d1, e1) = base, other
    p0, p1 = latency_parts(state, d0, e0), latency_parts(state, d1, e1)
    # the penalty's weight of latency: V, or V·(1 + G) with the noise-scale term (G = B_noise/B_step)
    weight = st.V * (1.0 + e0.convergence if st.convergence == "noise_scale" else 1.0)
    compute = weight * (p1["compute"] - p0["compute"])
    links = weight * (p1["links"] - p0["links"])
    energy = e1.objective_energy - e0.objective_energy
    total = e1.objective - e0.objective
    return {
        "compute": compute,
        "links": links,
        "energy": energy,
        "convergence": total - compute - links - energy,
    }


def _entry(
    state: RoundState,
    name: str,
    label: str,
    chosen: tuple[Decision, Evaluation],
    decision: Decision | None,
    note: str = "",
) -> dict[str, Any]:
    if decision is None:
        return {"name": name, "label": label, "decision": None, "note": note}
    ev = evaluate(state, decision)
    over = np.argwhere(ev.memory_bytes > state.scenario.memory_bytes)
    memory = [
        f"{device_id(int(n), int(k))} needs {ev.memory_bytes[n, k] / 2**20:.1f} MiB of "
        f"{state.scenario.memory_bytes[n, k] / 2**20:.1f} MiB"
        for n, k in over[:2]
    ]
    return {
        "name": name,
        "label": label,
        "decision": decision.to_json(),
        "note": note,
        "objective": ev.objective,
        "latency_s": ev.latency_s,
        "objective_latency": ev.objective_latency,
        "objective_convergence": ev.objective_convergence,
        "objective_energy": ev.objective_energy,
        "feasible": ev.feasible,
        "violations": list(ev.violations[:4]),
        "memory": memory,
        "delta": {
            "objective": ev.objective - chosen[1].objective,
            "latency_s": ev.latency_s - chosen[1].latency_s,
            **{k: float(v) for k, v in _terms(state, chosen, (decision, ev)).items()},
        },
    }


def _neighbouring_m(state: RoundState, decision: Decision, step: int) -> Decision | None:
    """The decision with every cluster's M moved ``step`` choices (None when no cluster can move)."""
    choices = state.settings.microbatch_choices.tolist()
    micro = decision.num_microbatches()
    moved = []
    for m in micro.tolist():
        i = choices.index(m) + step if m in choices else -1
        moved.append(choices[i] if 0 <= i < len(choices) else m)
    if moved == micro.tolist():
        return None
    return dataclasses.replace(
        decision,
        clusters=tuple(
            dataclasses.replace(c, num_microbatches=m) for c, m in zip(decision.clusters, moved, strict=True)
        ),
    )


def concentrated(decision: Decision) -> list[int]:
    """The clusters whose TEBs all sit on one device (pipeline decisions)."""
    if decision.mode != "pipeline":
        return []
    return [n for n, c in enumerate(decision.clusters) if sum(1 for d in c.num_blocks if d > 0) == 1]


def explain(state: RoundState, decision: Decision, ev: Evaluation, optimised: bool = True) -> dict[str, Any]:
    """The round's counterfactuals (module docstring), the sentence that reads them, and the time the
    constrained solve of ``spread`` took (0 when there was none). ``optimised``: the decision minimises the
    objective (DSSDA, myopic), so concentrating is a choice the ``spread`` counterfactual explains; a rule's
    decision (a baseline) is its rule."""
    chosen = (decision, ev)
    entries = []
    spread_s = 0.0
    if optimised and concentrated(decision):
        blocks = state.profile.num_blocks
        label = "the best placement over two or more devices per cluster"
        if blocks < 2:
            entries.append(_entry(state, "spread", label, chosen, None, "a single TEB cannot be split"))
        elif np.any(state.available.sum(axis=1) < 2):
            entries.append(
                _entry(state, "spread", label, chosen, None, "a cluster has a single available device")
            )
        else:
            started = time.perf_counter()
            try:
                spread, _ = solve(state, max_blocks_per_device=blocks - 1)
                entries.append(_entry(state, "spread", label, chosen, spread))
            except ValueError:
                note = "no placement over two or more devices fits in the devices' memory"
                entries.append(_entry(state, "spread", label, chosen, None, note))
            spread_s = time.perf_counter() - started
    if decision.mode == "pipeline":
        for name, step, label in (
            ("fewer_microbatches", -1, "the same placement with the next smaller M"),
            ("more_microbatches", 1, "the same placement with the next larger M"),
        ):
            other = _neighbouring_m(state, decision, step)
            note = (
                ""
                if other is not None
                else f"M is already the {'smallest' if step < 0 else 'largest'} allowed"
            )
            entries.append(_entry(state, name, label, chosen, other, note))
    uniform = get_policy("uniform").decide(state)
    entries.append(_entry(state, "uniform", "the uniform split", chosen, uniform))
    if decision.recompute().any():
        plain = dataclasses.replace(
            decision, clusters=tuple(dataclasses.replace(c, recompute=()) for c in decision.clusters)
        )
        entries.append(
            _entry(state, "no_recompute", "the same decision without recomputation", chosen, plain)
        )
    return {
        "sentence": sentence(state, decision, ev, entries),
        "counterfactuals": entries,
        "spread_solve_s": spread_s,
    }


def _placement(state: RoundState, decision: Decision) -> str:
    parts = []
    for n, c in enumerate(decision.clusters):
        held = [(k, d) for k, d in enumerate(c.num_blocks) if d > 0]
        if decision.mode == "replicated":
            where = f"the whole encoder on {len(held)} device(s)"
        elif len(held) == 1:
            where = f"all {held[0][1]} TEBs on {device_id(n, held[0][0])}"
        else:
            where = f"TEBs {'+'.join(str(d) for _, d in held)} over {len(held)} devices"
        again = [device_id(n, k) for k, r in enumerate(c.recompute) if r]
        recomputing = f", recomputing on {', '.join(again)}" if again else ""
        parts.append(f"cluster {n}: {where}, M = {c.num_microbatches}{recomputing}")
    if len(parts) > 3:
        parts = [*parts[:2], f"… {len(parts) - 2} more clusters"]
    return "; ".join(parts)


def _reason(entry: dict[str, Any], base: float) -> str:
    """One counterfactual in words: what it would cost more, and the term that weighs most."""
    if entry["decision"] is None:
        return f"{entry['label']}: {entry['note']}"
    if entry["memory"]:
        return f"{entry['label']} does not fit in memory ({entry['memory'][0]})"
    delta = entry["delta"]
    change = delta["objective"] / abs(base) if base else 0.0
    if abs(change) < 1e-6:
        return f"{entry['label']} costs the same"
    terms = {t: delta[t] for t in TERMS}
    worst = max(terms, key=lambda t: terms[t] if change > 0 else -terms[t])
    size = f"{abs(change):.1%} {'more' if change > 0 else 'less'}"
    what = {
        "compute": "in compute time",
        "links": "in link time",
        "energy": "in queue-weighted energy",
        "convergence": "in the convergence term",
    }[worst]
    return f"{entry['label']} costs {size} (mostly {what}: {terms[worst]:+.3g})"


def sentence(state: RoundState, decision: Decision, ev: Evaluation, entries: list[dict[str, Any]]) -> str:
    """What was chosen, and for each counterfactual why not."""
    reasons = [_reason(e, ev.objective) for e in entries]
    return f"{_placement(state, decision)}. " + "; ".join(reasons) + "."
