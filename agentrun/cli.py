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
    "operator": ("agent_operator.serve.main", "run the operator (kopf, with Lease leader election)"),
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
    "schedule": ("agentrun.schedule_cli", "AgentRunSchedules: trigger NAME (a run now), list"),
    "completion": ("agentrun.completion", "print a shell completion script: bash | zsh | fish"),
    "fork": ("agentrun.fork_cli", "a new run from a checkpoint: NAME --step S|--checkpoint ID --name NEW"),
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


# Commands that do not talk to the API server as the person running them: kubectl's --as means nothing there.
NOT_AS_USER = frozenset({"dev", "worker", "operator", "demo", "bench", "completion"})


class UsageError(ValueError):
    pass


def split_identity(args: list[str]) -> tuple[list[str], str | None, tuple[str, ...]]:
    """kubectl's global ``--as USER`` and ``--as-group GROUP`` (repeatable), anywhere before a ``--``, taken
    out of ``args``: (the other args, user, groups). Pure; ``UsageError`` for a flag without its value or a
    group without a user (as kubectl refuses it)."""
    rest: list[str] = []
    user: str | None = None
    groups: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            rest += args[i:]
            break
        flag, eq, value = word.partition("=")
        if flag in ("--as", "--as-group"):
            if not eq:
                if i + 1 >= len(args):
                    raise UsageError(f"{flag} needs a value")
                value = args[i + 1]
                i += 1
            if not value:
                raise UsageError(f"{flag} needs a non-empty value")
            if flag == "--as":
                user = value
            else:
                groups.append(value)
        else:
            rest.append(word)
        i += 1
    if groups and user is None:
        raise UsageError("--as-group needs --as: a group is impersonated only together with a user")
    return rest, user, tuple(groups)


def _usage() -> str:
    lines = [
        "usage: agentrun <command> [args...] [--as USER [--as-group GROUP]...]",
        "       agentrun --version",
        "",
        "commands:",
    ]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in available().items()]
    lines += [
        "",
        "global options (as kubectl's):",
        "  --as USER          act as USER (impersonation: needs the RBAC verb impersonate on that user)",
        "  --as-group GROUP   with --as: act with GROUP too (repeatable)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args, user, groups = split_identity(args)
    except UsageError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 2
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
    if user is not None and name in NOT_AS_USER:
        print(
            f"agentrun: --as does not apply to {name!r} (it does not act as you on the API server)",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    # Subcommand modules that serve several names (trace/ledger/list) receive their name first.
    if getattr(module, "MULTI_COMMAND", False):
        rest = [name, *rest]
    if user is None:
        code: int = module.main(rest)
        return code
    from agentrun import cluster  # only now: `agentrun worker` never imports the CLI's client code

    with cluster.impersonating(user, groups):
        code = module.main(rest)
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
