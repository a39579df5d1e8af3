// Activation recomputation per device. Under training.activation_checkpointing "all" every device
// that holds TEBs recomputes its blocks' activations in backward (its backward runs the forward
// again, and keeps only the blocks' inputs); under "auto" the devices the round's decision flags
// (DSSDA and optimal set `recompute` where a device's memory needs it); under "none" no device.
// The decision log, the current cut and the Gantt mark the devices that recompute.

import { get } from '../api.js';

export const RECOMPUTE_MARK = '↻';
export const RECOMPUTE_NOTE = 'recomputes its activations in backward (its backward runs the forward again)';
const KEPT_ROUNDS = 500; // decisions kept to answer without asking the API

/** training.activation_checkpointing of a run's config: 'none', 'all' or 'auto'. */
export function checkpointing(config) {
  return config?.training?.activation_checkpointing ?? 'none';
}

/**
 * The ids of the devices of ``decision`` (a stored decision: {clusters: [{cluster, devices: [{device,
 * num_blocks, recompute?}]}]}) that recompute under ``config``.
 */
export function recomputingDevices(config, decision) {
  const mode = checkpointing(config);
  const devices = new Set();
  if (mode === 'none' || !Array.isArray(decision?.clusters)) return devices;
  for (const cluster of decision.clusters) {
    for (const d of cluster.devices || []) {
      if (d.num_blocks > 0 && (mode === 'all' || d.recompute === true)) devices.add(d.device);
    }
  }
  return devices;
}

/** The devices that recompute in any stored round: from the decisions the page holds (the decision
 * log's page, live rounds), else from GET /api/runs/{id}/decisions of that round. */
export class RecomputeLookup {
  constructor(runId, config) {
    this.runId = runId;
    this.config = config;
    this.decisions = new Map(); // round -> decision
  }

  /** Keep the decisions of ``records`` (decision items or live round records: {round, decision}). */
  remember(records) {
    for (const record of records) {
      if (Number.isInteger(record.round) && record.decision?.clusters) this.decisions.set(record.round, record.decision);
    }
    if (this.decisions.size > KEPT_ROUNDS) {
      const rounds = [...this.decisions.keys()].sort((a, b) => a - b);
      rounds.slice(0, this.decisions.size - KEPT_ROUNDS).forEach((r) => this.decisions.delete(r));
    }
  }

  /** The ids of the devices that recompute in round ``round`` (asks nothing when no device can). */
  async devices(round) {
    if (checkpointing(this.config) === 'none') return new Set();
    if (!this.decisions.has(round)) {
      const page = await get(`/api/runs/${this.runId}/decisions`, { from: round, to: round, limit: 1 });
      this.remember(page.items.filter((item) => item.round === round));
    }
    return recomputingDevices(this.config, this.decisions.get(round));
  }
}
