"""``agentrun worker``: run one attempt of an AgentRun (configuration from the environment only)."""

from __future__ import annotations

import logging
import sys

from agent_worker import errors, faults, runner
from agent_worker import settings as settings_mod

USAGE = """usage: agentrun worker

Runs one attempt of the AgentRun named by AGENTRUN_RUN_ID (see docs/worker.md for the environment).
Exit codes: 0 succeeded, 1 failed, 2 usage/config, 10 parked, 11 drained, 12 fenced, 13 needs a human."""


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv:
        print(f"agentrun worker: unexpected arguments {argv}\n\n{USAGE}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        faults.configure()
        config = settings_mod.from_env()
    except (faults.FaultConfigError, errors.ConfigError) as exc:
        print(f"agentrun worker: {exc}", file=sys.stderr)
        return 2
    try:
        return runner.run(config)
    except errors.WorkerError as exc:
        print(f"agentrun worker: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
