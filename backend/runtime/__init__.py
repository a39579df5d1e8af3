"""How runs execute, for the API and the workers alike.

- ``lifecycle``: every run transition, each one transaction with its live event (the outbox);
  ``repository``: its SQL — the only code that writes a run's status and lease.
- ``execution``: ``execute_run``, the one function that runs a run (claim, rounds, finish);
  ``segments``: forks as config segments.
- ``dispatch``: the ``RunDispatcher`` seam; ``local``: the embedded executor (one spawned process
  per run); ``celery_dispatch``/``celery_app``/``dispatch_ledger``: sending runs to Celery workers.
- ``wake``: waking live readers after a commit (nothing: readers poll); ``redis_wake``: through
  Redis pub/sub.

``backend.composition`` picks the executor and the wake-ups from the settings.
"""
