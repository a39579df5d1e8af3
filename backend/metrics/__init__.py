"""Metrics: per-round and per-device series, decisions, timelines, export and comparison."""
