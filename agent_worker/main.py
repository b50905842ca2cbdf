"""``agentrun worker``: run one attempt of an AgentRun (configuration from the environment only).

The process ends with ``exit_now``: by the time ``main`` returns, every outcome is in Postgres, the pool is
closed and the Lease released, so the interpreter's teardown (garbage-collecting LangGraph, LangChain and
the Kubernetes client: 0.3-1.5 s measured by ``agentrun bench p3``) is skipped. It sat on every attempt's
exit, i.e. on the resume path and in the minimum length of a run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from agent_worker import runner
from agent_worker import settings as settings_mod
from agentrun_core import errors, faults
from agentrun_core.api import protocol

USAGE = """usage: agentrun worker

Runs one attempt of the AgentRun named by AGENTRUN_RUN_ID (see docs/worker.md for the environment).
Exit codes: 0 succeeded, 1 failed, 2 usage/config, 10 parked, 11 drained, 12 fenced, 13 needs a human,
14 lost to infrastructure (Postgres went away; the operator retries, never counted as a graph failure),
15 incompatible with the database's schema (docs/upgrading.md: the run waits; nothing was touched)."""


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return protocol.EXIT_SUCCEEDED
    if argv:
        print(f"agentrun worker: unexpected arguments {argv}\n\n{USAGE}", file=sys.stderr)
        return protocol.EXIT_USAGE
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        faults.configure()
        config = settings_mod.from_env()
    except (faults.FaultConfigError, errors.ConfigError) as exc:
        print(f"agentrun worker: {exc}", file=sys.stderr)
        return protocol.EXIT_USAGE
    try:
        return runner.run(config)
    except (errors.WorkerError, errors.ControlSignal) as exc:
        print(f"agentrun worker: {exc}", file=sys.stderr)
        return exc.exit_code


def exit_now(code: int) -> NoReturn:
    """Flush what was written, then end the process without the interpreter's teardown."""
    logging.shutdown()  # flushes every handler
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken pipe: nothing more to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
