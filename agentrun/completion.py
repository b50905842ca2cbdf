"""Shell completion: ``agentrun completion bash|zsh|fish`` and the ``kubectl_complete-agentrun`` helper.

Rule: the shells know nothing about agentrun. Each generated script asks the CLI itself
(``agentrun __complete WORD... PARTIAL``) for the candidates, so the commands (``agentrun.cli.SUBCOMMANDS``,
the one registry a new verb is added to), their flags and the run names (listed from the API server as the
current user, in the namespace given by ``-n``) come from one place. kubectl (1.26+) completes
``kubectl agentrun <TAB>`` by running ``kubectl_complete-agentrun ARGS... PARTIAL`` and reading Cobra's
protocol: one candidate per line, then ``:<directive>`` (4 = do not fall back to file names).
"""

from __future__ import annotations

import contextlib
import sys

from agentrun import output

COMMON = ("-n", "--namespace", "--kubeconfig", "--context", "-h", "--help")
# Flags per command beyond COMMON. tests/unit/test_completion.py checks each against the command's --help, so
# a flag added to a parser and forgotten here (or the reverse) fails a test.
FLAGS: dict[str, tuple[str, ...]] = {
    "get": ("-o", "--output", "-w", "--watch"),
    "list": ("-o", "--output", "-A", "--all-namespaces", "-l", "--selector", "--phase", "-w", "--watch"),
    "trace": ("-o", "--output", "--dsn"),
    "ledger": ("-o", "--output", "--dsn"),
    "logs": ("-f", "--follow", "--attempt", "--tail"),
    "wait": ("--timeout",),
    "retry": ("--image", "--wait"),
    "resolve": ("--sent", "--not-sent", "--result"),
    "cancel": (),
    "suspend": (),
    "resume": (),
    "approve": ("--id", "--comment", "--yes", "--set", "--edits", "--reject", "--respond", "--decisions"),
    "reject": ("--id", "--comment", "--yes", "--decisions"),
    "respond": ("--id", "--message", "--comment"),
    "fork": ("--checkpoint", "--step", "--name", "--set", "--set-json", "--approve", "--timeout"),
    "schedule": (),
}
# Commands whose first positional is an AgentRun's name (completed from the cluster).
TAKES_RUN = frozenset(c for c in FLAGS if c not in ("list", "schedule"))  # schedule: its verb comes first
SHELLS = ("bash", "zsh", "fish")
NAMESPACE_FLAGS = ("-n", "--namespace")
DIRECTIVE_NO_FILES = 4


def _commands() -> list[str]:
    from agentrun.cli import available  # the registry; imported late (cli imports nothing of ours eagerly)

    return [*available(), "completion"]


def _namespace(words: list[str]) -> str | None:
    for i, word in enumerate(words[:-1]):
        if word in NAMESPACE_FLAGS and i + 1 < len(words) - 1:
            return words[i + 1]
        if word.startswith("--namespace="):
            return word.split("=", 1)[1]
    return None


def _run_names(namespace: str | None) -> list[str]:
    """Names of the AgentRuns the user can list; nothing (never an error on the terminal) when the cluster
    cannot be reached or refuses."""
    from agentrun import cluster

    with contextlib.suppress(Exception):
        api, default_ns = cluster.connect()
        return [i["metadata"]["name"] for i in cluster.list_runs(api, namespace or default_ns)]
    return []


def _namespaces() -> list[str]:
    from agentrun import cluster
    from agentrun_core import kube

    with contextlib.suppress(Exception):
        api, _ = cluster.connect()
        items = kube.objects.list_namespaces(api, timeout=5)
        return [str(ns["metadata"]["name"]) for ns in items if ns.get("metadata") is not None]
    return []


# Flags that take a value: the word after one is that value, not a positional.
_VALUED = frozenset(
    {
        "-o",
        "--output",
        "-n",
        "--namespace",
        "--kubeconfig",
        "--context",
        "--dsn",
        "--attempt",
        "--tail",
        "--timeout",
        "--result",
        "--id",
        "--comment",
        "--image",
    }
)


def _positionals(words: list[str]) -> list[str]:
    """Words before the partial one (the last) that are neither flags nor flag values."""
    out, skip = [], False
    for word in words[:-1]:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _VALUED
        else:
            out.append(word)
    return out


def candidates(words: list[str]) -> list[str]:
    """Completions of ``words[-1]`` given the words before it (``words[0]`` is the command). Reads the
    cluster only for run and namespace names."""
    partial = words[-1] if words else ""
    options: list[str]
    if len(words) <= 1:
        options = _commands()
    elif words[0] == "completion":
        options = list(SHELLS) if len(words) == 2 else []
    elif words[-2] in ("-o", "--output"):
        options = list(output.FORMATS)
    elif words[-2] in NAMESPACE_FLAGS:
        options = _namespaces()
    elif partial.startswith("-"):
        options = [*FLAGS.get(words[0], ()), *COMMON]
    elif words[0] in TAKES_RUN and not _positionals(words[1:]):
        options = _run_names(_namespace(words))
    else:
        options = []
    return [o for o in options if o.startswith(partial)]


BASH = """# agentrun bash completion: source <(agentrun completion bash)
_agentrun_complete() {
    local IFS=$'\\n'
    COMPREPLY=($(agentrun __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -F _agentrun_complete agentrun kubectl-agentrun
"""

ZSH = """#compdef agentrun kubectl-agentrun
# agentrun zsh completion: source <(agentrun completion zsh)  (after compinit)
_agentrun() {
    local -a candidates
    candidates=("${(@f)$(agentrun __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    compadd -- "${(@)candidates:#}"
}
compdef _agentrun agentrun kubectl-agentrun
"""

FISH = """# agentrun fish completion: agentrun completion fish | source
function __agentrun_complete
    set -l words (commandline -opc) (commandline -ct)
    agentrun __complete $words[2..-1] 2>/dev/null
end
complete -c agentrun -f -a '(__agentrun_complete)'
complete -c kubectl-agentrun -f -a '(__agentrun_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def main(argv: list[str]) -> int:
    """``agentrun completion SHELL`` prints the script; ``agentrun __complete WORDS...`` the candidates."""
    if argv and argv[0] == "__complete":
        print("\n".join(candidates(argv[1:] or [""])))
        return 0
    if len(argv) != 1 or argv[0] not in SCRIPTS:
        print(
            "usage: agentrun completion bash|zsh|fish\n"
            "  bash: source <(agentrun completion bash)\n"
            "  zsh:  source <(agentrun completion zsh)\n"
            "  fish: agentrun completion fish | source",
            file=sys.stderr,
        )
        return 2
    print(SCRIPTS[argv[0]], end="")
    return 0


def kubectl_complete() -> None:
    """``kubectl_complete-agentrun ARGS... PARTIAL``: kubectl's plugin completion protocol (Cobra's)."""
    args = sys.argv[1:] or [""]
    for candidate in candidates(args):
        print(candidate)
    print(f":{DIRECTIVE_NO_FILES}")
    sys.exit(0)
