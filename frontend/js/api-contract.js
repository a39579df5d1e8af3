// Every API operation the dashboard uses and the fields of its JSON answer the dashboard reads.
// tests/backend/test_frontend_contract.py checks each operation and field against the API's OpenAPI
// document, that every /api/ path written in frontend/js is listed here, and that every field
// listed is still named somewhere in frontend/js. A field is a path through the answer: "items[].id"
// (each item of an array), "metrics{}.unit" (each value of a map). Answers the OpenAPI leaves
// untyped (a config, a JSON Schema, the pre-flight round) and event streams list no fields.
// Keep the object below strict JSON: the test reads it as such.

export const API_CONTRACT = {
  "POST /api/auth/login": ["username", "role", "must_change_password"],
  "GET /api/auth/me": ["username", "role", "must_change_password"],
  "POST /api/auth/logout": [],
  "POST /api/auth/password": [],
  "GET /api/users": ["[].id", "[].username", "[].role", "[].active", "[].created_at"],
  "POST /api/users": ["username"],
  "PATCH /api/users/{user_id}": [],
  "POST /api/users/{user_id}/deactivate": [],
  "GET /api/tokens": [
    "[].id", "[].user_id", "[].name", "[].created_at", "[].revoked_at", "[].last_used_at"
  ],
  "POST /api/tokens": ["name", "token"],
  "DELETE /api/tokens/{token_id}": [],
  "GET /api/config/schema": [],
  "POST /api/config/validate": [],
  "POST /api/config/preflight": [],
  "POST /api/config/dataset": [
    "source", "unit", "train", "held_out", "max_samples_per_cluster", "max_eval_samples"
  ],
  "GET /api/config/checkpoint": ["architecture", "max_positions"],
  "GET /api/config/architectures": ["{}.kind", "{}.config_fields"],
  "GET /api/config/policies": [],
  "GET /api/config/metrics": ["[].name", "[].scope", "[].description"],
  "GET /api/files": [
    "[].name", "[].kind", "[].size_bytes", "[].modified_at", "[].files", "[].complete", "[].uploaded_by"
  ],
  "PUT /api/files/{name}": [],
  "DELETE /api/files/{name}": [],
  "GET /api/runs": [
    "total",
    "items[].id", "items[].name", "items[].status", "items[].rounds_done", "items[].total_rounds",
    "items[].parent_run_id", "items[].fork_round", "items[].policy", "items[].created_at",
    "items[].cancel_requested", "items[].V", "items[].num_clusters", "items[].devices_per_cluster",
    "items[].owner_name", "items[].latest_latency_s", "items[].latest_eval_round",
    "items[].latest_eval_loss", "items[].latest_eval_perplexity", "items[].latest_eval_accuracy"
  ],
  "POST /api/runs": ["id"],
  "GET /api/runs/events": [],
  "GET /api/runs/{run_id}": [
    "id", "name", "status", "rounds_done", "total_rounds", "policy", "executor", "created_at",
    "parent_run_id", "fork_round", "cancel_requested", "error", "owner_name", "config",
    "last_event_id"
  ],
  "DELETE /api/runs/{run_id}": [],
  "GET /api/runs/{run_id}/events": [],
  "POST /api/runs/{run_id}/cancel": [],
  "POST /api/runs/{run_id}/resume": [],
  "POST /api/runs/{run_id}/fork": ["id"],
  "GET /api/runs/{run_id}/model": [],
  "GET /api/runs/{run_id}/devices": [
    "metrics{}.series{}.round", "metrics{}.series{}.value", "metrics{}.series{}.elapsed_s"
  ],
  "GET /api/runs/{run_id}/rounds": ["series{}.round", "series{}.value", "series{}.elapsed_s", "elapsed_s"],
  "GET /api/runs/{run_id}/rounds/{round}/devices": ["items"],
  "GET /api/runs/{run_id}/decisions": [
    "items[].round", "items[].policy", "items[].objective", "items[].objective_latency",
    "items[].objective_convergence", "items[].objective_energy", "items[].num_microbatches",
    "items[].solver_iterations", "items[].solve_time_s", "items[].feasible", "items[].violations",
    "items[].decision", "items[].measured", "items[].blocks_moved", "items[].moves_latency_share"
  ],
  "GET /api/runs/{run_id}/timeline": [
    "round", "cluster", "schedule", "num_microbatches", "makespan_s", "redistribution_s",
    "events[].participant", "events[].kind", "events[].microbatch", "events[].start_s", "events[].end_s",
    "events[].peer", "events[].phase", "events[].label"
  ],
  "GET /api/runs/{run_id}/export": [],
  "GET /api/studies": [
    "total", "items[].id", "items[].name", "items[].progress.status", "items[].progress.runs_done",
    "items[].progress.runs_total", "items[].num_cells", "items[].owner_name", "items[].created_at"
  ],
  "POST /api/studies": ["id"],
  "GET /api/studies/presets": ["[].name", "[].description", "[].definition", "[].rounds", "[].fewer_rounds"],
  "GET /api/studies/{study_id}": [
    "name", "axes", "last_event_id", "metrics[].name", "metrics[].unit", "metrics[].description",
    "progress.status", "progress.runs_done", "progress.runs_total", "progress.rounds_done",
    "progress.rounds_total", "progress.runs_by_status", "cells[].index", "cells[].label",
    "cells[].base", "cells[].values", "cells[].baseline_cell", "cells[].ratios",
    "cells[].metrics{}.mean", "cells[].metrics{}.ci95_low", "cells[].metrics{}.ci95_high",
    "cells[].metrics{}.n", "cells[].runs[].id", "cells[].runs[].seed", "cells[].runs[].status",
    "overrides", "figure_axes[].field", "figure_axes[].numeric", "figure_axes[].log", "trains", "series_field"
  ],
  "GET /api/studies/{study_id}/series": [
    "field", "x", "unit", "fields", "cells[].index", "cells[].label", "cells[].round",
    "cells[].value", "cells[].elapsed_s"
  ],
  "POST /api/studies/{study_id}/cancel": ["runs_changed"],
  "POST /api/studies/{study_id}/resume": ["runs_changed"],
  "GET /api/studies/{study_id}/export": [],
  "GET /api/studies/{study_id}/events": [],
  "GET /api/compare": [
    "baseline_run_id", "runs[].run_id", "runs[].name", "runs[].policy", "runs[].rounds_done",
    "runs[].mean_latency_s", "runs[].efficiency", "runs[].peak_memory_bytes",
    "runs[].mean_energy_budget_ratio", "runs[].final_eval", "runs[].ratios", "target_eval_loss",
    "runs[].time_to_target_s", "runs[].rounds_to_target"
  ]
};
