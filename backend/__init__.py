"""The CollaPipe service: FastAPI app, SQL store, run execution seam and live streams.

collapipe_core never imports this package; workers may import its db, runs and live modules but
not ``backend.app`` or any router (they pull in FastAPI).
"""
