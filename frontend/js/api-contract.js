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
  "GET /api/config/schema": [],
  "POST /api/config/validate": [],
  "POST /api/config/preflight": [],
  "GET /api/config/policies": [],
  "GET /api/config/metrics": ["[].name", "[].scope", "[].description"],
  "GET /api/files": [
    "[].name", "[].kind", "[].size_bytes", "[].modified_at", "[].files", "[].complete"
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
  "GET /api/runs/{run_id}/devices": ["metrics{}.series{}.round", "metrics{}.series{}.value"],
  "GET /api/runs/{run_id}/rounds": ["series{}.round", "series{}.value"],
  "GET /api/runs/{run_id}/decisions": [
    "items[].round", "items[].policy", "items[].objective", "items[].objective_latency",
    "items[].objective_convergence", "items[].objective_energy", "items[].num_microbatches",
    "items[].solver_iterations", "items[].solve_time_s", "items[].feasible", "items[].violations",
    "items[].decision", "items[].measured"
  ],
  "GET /api/runs/{run_id}/timeline": [
    "round", "cluster", "schedule", "num_microbatches", "makespan_s", "events[].participant",
    "events[].kind", "events[].microbatch", "events[].start_s", "events[].end_s", "events[].peer"
  ],
  "GET /api/runs/{run_id}/export": [],
  "GET /api/compare": [
    "baseline_run_id", "runs[].run_id", "runs[].name", "runs[].policy", "runs[].rounds_done",
    "runs[].mean_latency_s", "runs[].efficiency", "runs[].peak_memory_bytes",
    "runs[].mean_energy_budget_ratio", "runs[].final_eval", "runs[].ratios"
  ]
};
