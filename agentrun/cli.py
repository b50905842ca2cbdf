"""The ``agentrun`` console script.

Each subcommand lives in its own module exposing ``main(argv: list[str]) -> int``; they are imported lazily so
``agentrun worker`` does not pay for the dev cluster's imports and the image needs no dev dependencies.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help). Modules are imported only when their subcommand runs.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("agentrun_dev.cli", "run the local development cluster (up, env, status, down, logs)"),
    "worker": ("agent_worker.main", "run one attempt of an AgentRun (inside a worker pod)"),
    "operator": ("agent_operator.main", "run the operator (kopf, with Lease leader election)"),
    "trace": ("agentrun.trace_cli", "show a run's timeline: attempts, steps, effects, approvals"),
    "ledger": ("agentrun.trace_cli", "show a run's effect ledger"),
    "list": ("agentrun.trace_cli", "list runs with phase, step, pending approval, effects"),
    "approve": ("agentrun.approve_cli", "approve the pending approval of a run"),
    "reject": ("agentrun.approve_cli", "reject the pending approval of a run"),
    "demo": ("agentrun_examples.demo", "the support-ticket demo on the dev cluster (make demo)"),
}


def _usage() -> str:
    lines = ["usage: agentrun <command> [args...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"agentrun: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    # Subcommand modules that serve several names (trace/ledger/list) receive their name first.
    if getattr(module, "MULTI_COMMAND", False):
        rest = [name, *rest]
    code: int = module.main(rest)
    return code


def kubectl_plugin_main() -> None:
    """``kubectl agentrun …`` runs this executable (``kubectl-agentrun``) with the same subcommands."""
    sys.exit(main())


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
