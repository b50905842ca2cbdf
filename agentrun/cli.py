"""The ``agentrun`` console script.

Each subcommand lives in its own module exposing ``main(argv: list[str]) -> int``; they are imported lazily so
``agentrun worker`` does not pay for the dev cluster's imports and the image needs no dev dependencies.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys

# subcommand -> (module, one-line help). Modules are imported only when their subcommand runs.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "dev": ("agentrun_dev.cli", "run the local development cluster (up, env, status, down, logs)"),
    "worker": ("agent_worker.main", "run one attempt of an AgentRun (inside a worker pod)"),
    "operator": ("agent_operator.main", "run the operator (kopf, with Lease leader election)"),
    # Read commands: each prints through agentrun.output (-o table|wide|json|yaml|name).
    "get": ("agentrun.trace_cli", "show one run: phase, step, attempts, pending approval, effects"),
    "list": ("agentrun.trace_cli", "list runs with phase, step, pending approval, effects"),
    "trace": ("agentrun.trace_cli", "show a run's timeline: attempts, steps, effects, approvals"),
    "ledger": ("agentrun.trace_cli", "show a run's effect ledger"),
    "logs": ("agentrun.logs_cli", "print the worker Pod's log of an attempt (-f follows, --attempt N)"),
    "approve": ("agentrun.approve_cli", "approve the pending approval of a run"),
    "reject": ("agentrun.approve_cli", "reject the pending approval of a run"),
    "respond": ("agentrun.respond_cli", "answer the pending approval with text: NAME --id ID --message TEXT"),
    "wait": ("agentrun.steer_cli", "wait until a run finished; exit 0 if it Succeeded, non-zero otherwise"),
    "retry": ("agentrun.steer_cli", "retry a Failed / needs-human / Cancelled run from its checkpoint"),
    "resolve": ("agentrun.steer_cli", "settle an unknown effect: KEY --sent [--result JSON] | --not-sent"),
    "cancel": ("agentrun.steer_cli", "cancel a run (it stops at a step boundary)"),
    "suspend": ("agentrun.steer_cli", "stop a run's worker at a step boundary until resumed"),
    "resume": ("agentrun.steer_cli", "let a suspended run continue from its checkpoint"),
    "completion": ("agentrun.completion", "print a shell completion script: bash | zsh | fish"),
    "fork": ("agentrun.fork_cli", "a new run from a checkpoint: NAME --step S|--checkpoint ID --as NEW"),
    "migrate": ("agentrun.migrate_cli", "apply the run store's schema migrations (--dry-run lists them)"),
    "demo": ("agentrun_dev.demo", "the support-ticket demo on the dev cluster (make demo)"),
    "bench": ("bench.cli", "the benchmark suite P1-P5 against the dev cluster (README: Performance)"),
}


def available() -> dict[str, tuple[str, str]]:
    """The subcommands this installation ships: the benchmark (``bench/``) lives in the checkout, not in the
    wheel, so an installed CLI does not offer it."""
    return {
        name: entry
        for name, entry in SUBCOMMANDS.items()
        if importlib.util.find_spec(entry[0].split(".", 1)[0]) is not None
    }


def version() -> str:
    """The installed distribution's version (the wheel's metadata; an editable install has it too)."""
    try:
        return importlib.metadata.version("agentrun")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _usage() -> str:
    lines = ["usage: agentrun <command> [args...]", "       agentrun --version", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in available().items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"--version", "-V", "version"}:
        print(f"agentrun {version()}")
        return 0
    name, rest = args[0], args[1:]
    if name == "__complete":  # what the completion scripts call (agentrun.completion)
        name, rest = "completion", args
    if name not in available():
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


# Subcommands whose module ends the process itself (``exit_now(code)``) once ``main`` returned: the worker
# skips the interpreter's teardown. Only the console script does this; ``main()`` always returns (tests).
FAST_EXIT = {"worker"}


def entrypoint() -> None:
    code = main()
    if len(sys.argv) > 1 and sys.argv[1] in FAST_EXIT:
        importlib.import_module(SUBCOMMANDS[sys.argv[1]][0]).exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
