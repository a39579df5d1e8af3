// Per-run facts several views need, cached: the run's detail (its config never changes) and the
// latest round figures (latency and an eval metric) for the runs list.

import { get } from './api.js';

const details = new Map();

export function runDetail(runId) {
  if (!details.has(runId)) {
    const promise = get(`/api/runs/${runId}`).catch((error) => {
      details.delete(runId);
      throw error;
    });
    details.set(runId, promise);
  }
  return details.get(runId);
}

export function forgetRun(runId) {
  details.delete(runId);
}

/**
 * Eval metrics in order of preference for a one-number summary: perplexity first (only causal LM
 * runs have it, and it says more about them than their token accuracy), then accuracy, loss and
 * error rate.
 */
export const EVAL_PREFERENCE = ['eval_perplexity', 'eval_accuracy', 'eval_loss', 'eval_error_rate'];

function last(series) {
  if (!series || !series.value.length) return null;
  return series.value[series.value.length - 1];
}

/** Latency of the latest stored round and the latest eval figure (a few rounds back if needed). */
export async function latestMetrics(runId, roundsDone) {
  const data = await get(`/api/runs/${runId}/rounds`, {
    fields: ['latency_s', ...EVAL_PREFERENCE],
    from: Math.max(0, roundsDone - 5),
    method: 'none',
  });
  const result = { latency_s: last(data.series.latency_s), evalName: null, evalValue: null };
  for (const name of EVAL_PREFERENCE) {
    const value = last(data.series[name]);
    if (value !== null) {
      result.evalName = name;
      result.evalValue = value;
      break;
    }
  }
  return result;
}
