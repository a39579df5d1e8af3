// Eval figures in one order of preference, for the one-number summaries of a run: the run view's
// eval tile, the runs list's Eval column and the compare page's first choice of eval curve.

/**
 * Eval metrics in order of preference for a one-number summary: perplexity first (only causal LM
 * runs have it, and it says more about them than their token accuracy), then accuracy, loss and
 * error rate.
 */
export const EVAL_PREFERENCE = ['eval_perplexity', 'eval_accuracy', 'eval_loss', 'eval_error_rate'];

/** A listed run's eval figure (GET /api/runs: its latest evaluated round's), the first in
 * EVAL_PREFERENCE's order it has: {name, value, round}, or null before its first evaluation. */
export function listedEval(run) {
  const values = {
    eval_perplexity: run.latest_eval_perplexity,
    eval_accuracy: run.latest_eval_accuracy,
    eval_loss: run.latest_eval_loss,
  };
  for (const name of EVAL_PREFERENCE) {
    const value = values[name];
    if (value !== null && value !== undefined) return { name, value, round: run.latest_eval_round };
  }
  return null;
}
