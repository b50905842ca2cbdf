"""What the tests share, in one place (fixtures stay in the conftest.py files, which import from here).

* ``kube`` — AgentRuns and other objects on the real API server: create/get/patch a run, its status,
  conditions, events and Pods, RBAC bindings, ``kubectl`` as an identity, the worker ServiceAccount.
* ``waiting`` — ``wait_for`` (a condition, a generous deadline, what was last seen on timeout) and
  ``wait_phase`` (an AgentRun's phase, explained by its status, events and the operator's logs).
* ``operator_proc`` — ``agentrun operator`` as a subprocess: replicas, the leader Lease, kill/stop/restart.
* ``specs`` — AgentRun spec bodies: the test graphs' names and the spec fields most tests set alike.
* ``pg`` — small Postgres helpers (an autocommit connection, a run's effects).
"""
