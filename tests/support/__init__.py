"""What the tests share, in one place (fixtures stay in the conftest.py files, which import from here).

* ``kube`` — AgentRuns and other objects on the real API server: create/get/patch a run, its status,
  conditions, events and Pods, whether it is gone, RBAC bindings and ``team`` (people bound to their
  ClusterRoles), ``kubectl`` as an identity, the worker ServiceAccount.
* ``waiting`` — ``wait_for`` (a condition, a generous deadline, what was last seen on timeout) and
  ``wait_phase`` (an AgentRun's phase, explained by its status, events and the operator's logs).
* ``operator_proc`` — ``agentrun operator`` as a subprocess: replicas, the leader Lease, kill/stop/restart.
* ``specs`` — AgentRun spec bodies: the test graphs' names and the spec fields most tests set alike.
* ``pg`` — rows as the operator and the worker write them (admit, reserve), a run's row, an agent's final
  messages read from its checkpoints.
* ``graphs`` — what the test graphs share: ``chain`` (START -> steps -> END), ``react_loop``, ``pause``,
  ``unless_404``. Their scripted chat models subclass ``agent_worker.scripted.ScriptedChatModel``.
* ``approvals`` — the approval scenes: ``scene_fixture`` (one fixture for the cluster client, the operator,
  the admin kubeconfig, the test's database and folder), the support-ticket spec, bodies created as an
  identity, the pending approval and waiting on a condition.
* ``lease_holder`` — a worker Pod that only holds its run's Lease (``holder_spec``) and a run's Lease read
  back (``lease_spec``), for the operator's ownership tests.
* ``takeover`` — ``Attempts``: a run's next attempt waited for (its worker Pod listed, its Lease held).
* ``kills`` — one repetition of a chaos test: a fresh run killed once at one fault point, driven to its end.
* ``queueing`` — runs held in the operator's start queue (started together, one seen queued, all finished).
* ``queries`` — ``one_row``: the one row a query on Postgres must return.
* ``pod_security`` — the Pod Security labels deploy/tenant/namespace.yaml asks of a tenant namespace.
* ``cli`` — ``agentrun()``: the venv's console script in a subprocess, as a user runs it.
* ``dockerfile`` — the Dockerfile as instructions and stages (its structure and its install steps).
* ``deploy`` — kubectl as the admin and kustomizations rendered into a test namespace (the deploy/ tests).
* ``seeded_run`` — ``seed_run``: a run parked on an approval after one eviction, with its ledger, written
  straight into the API server and Postgres (for the CLI's read verbs; no operator, no worker).
* ``rowmaker`` — store rows (``store.Run``, approvals, interventions) with neutral values for the fields a
  test does not name, for the operator's pure tests.
* ``trace_rows`` — a run's trace as plain rows (``inputs``, ``step``, ``effect``), for the trace tests.
* ``sockets`` — ``free_port`` (a loopback port for a server a test starts) and ``recv_until``.
* ``source_tree`` — the project's source packages and their ``.py`` files, for the tests that read the tree.
* ``worker_harness`` — real worker subprocesses against real providers, for the worker, chaos and ledger
  tests: ``Worker``, ``admit``, ``drive``, the providers and what each delivered.
"""
