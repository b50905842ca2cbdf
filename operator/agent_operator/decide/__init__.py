"""Decide: pure functions from what was observed (``model.World``) to what to do (``actions.Plan``).

Nothing here does I/O or holds state between calls; ``make lint`` forbids this package the drivers, the
Kubernetes client, the Lease engine and the operator's other sub-packages.
"""
