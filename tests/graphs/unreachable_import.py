"""A graph module whose import keeps failing with an ``OSError`` (a network filesystem that never comes
back): the worker retries it with backoff (``agent_worker.graphs.IMPORT_RETRY_DELAYS``) before failing the
run as ``GraphLoadError``. Used to hold a worker on its failure path long enough to depose it."""

raise OSError("the graph's filesystem is unreachable")
