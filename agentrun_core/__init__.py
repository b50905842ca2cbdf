"""agentrun_core: what every agentrun process shares, and nothing that is one process's own.

- ``store``: the only package that runs SQL (Postgres: runs, ledger, checkpoints' head, approvals, metrics).
- ``kube``: the Kubernetes API client (plain JSON bodies, one error hierarchy).
- ``lease`` / ``lease_math``: the Lease engine and its pure safety arithmetic.
- ``keys`` / ``canonical``: idempotency keys, derived deterministically.
- ``errors`` / ``faults``: the shared error hierarchy and the named fault points of the chaos suite.

The rule: this package imports nothing of ``agent_worker``, ``agent_operator``, ``agentrun`` (the CLI),
``agentrun_dev`` or ``agentrun_examples`` (import-linter contract in pyproject.toml).
"""
