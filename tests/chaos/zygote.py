"""A pre-imported parent that forks one worker process per request (``python -m tests.chaos.zygote``).

Importing langgraph, psycopg and the kubernetes client costs ~1 s of CPU per worker process; the chaos suite
starts hundreds. The zygote imports once, then for each JSON request line on stdin forks a child that
replaces its environment, points fd 2 at the requested file, runs ``agent_worker.main.main([])`` and exits
with its code. Each worker is still its own process, killed for real by SIGKILL at its fault point. The
zygote has no threads and no connections when it forks.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import agent_worker.main
import agent_worker.positions
import agent_worker.runner
import agentrun_core.kube
import agentrun_core.lease
import tests.graphs.effect_graph  # pre-import the chaos graphs
import tests.graphs.subgraph_graph  # noqa: F401


def _child(request: dict[str, object]) -> int:
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    err = os.open(str(request["stderr"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(err, 2)
    os.dup2(null, 1)
    try:
        return agent_worker.main.main([])
    except BaseException:
        traceback.print_exc()
        return 70


def main() -> int:
    assert agent_worker.runner and agentrun_core.lease and agentrun_core.kube
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = _child(request)
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sys.stdout.write(json.dumps({"returncode": code}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
