"""Runs: lifecycle API, the execution seam (execute_run), the SQL sink and the local runner."""
