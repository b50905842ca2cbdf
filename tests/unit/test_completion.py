"""Shell completion: the generated bash, zsh and fish scripts run in the real shells and complete commands,
flags and ``-o`` formats; the flag table matches each command's own ``--help``. Run names come from the
cluster (tests/integration/test_cli_read_output.py)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from agentrun import cli, completion, output

VENV_BIN = pathlib.Path(sys.executable).parent
ENV = {
    **os.environ,
    "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    "KUBECONFIG": "/nonexistent",
}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env=ENV)


def _help(command: str) -> str:
    done = _run(str(VENV_BIN / "agentrun"), command, "--help")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("command", sorted(completion.FLAGS))
def test_flag_table_matches_the_commands_help(command: str) -> None:
    shown = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", _help(command)))
    listed = {*completion.FLAGS[command], *completion.COMMON}
    assert listed <= shown, listed - shown
    # every flag the command documents is offered (the usage line repeats them, so compare the sets)
    assert shown <= listed, shown - listed


def test_every_command_completes() -> None:
    assert completion.candidates([""]) == [*cli.SUBCOMMANDS, "completion"]
    assert completion.candidates(["re"]) == ["reject", "respond", "retry", "resolve", "resume"]
    assert completion.candidates(["list", "-o", ""]) == list(output.FORMATS)
    assert completion.candidates(["trace", "x", "--output", "y"]) == ["yaml"]
    assert completion.candidates(["completion", "z"]) == ["zsh"]
    assert completion.candidates(["logs", "x", "--a"]) == ["--attempt"]
    # a positional already given: no more run names (and no cluster call)
    assert completion.candidates(["cancel", "-n", "ns", "run-1", ""]) == []


def _bash(words: list[str]) -> list[str]:
    array = " ".join(f"'{w}'" for w in ["agentrun", *words])
    script = (
        "source <(agentrun completion bash)\n"
        "complete -p agentrun kubectl-agentrun\n"
        f"COMP_WORDS=({array}); COMP_CWORD={len(words)}\n"
        '_agentrun_complete; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = _run("bash", "-c", script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "complete -F _agentrun_complete agentrun", lines
    assert lines[1] == "complete -F _agentrun_complete kubectl-agentrun", lines
    return [line for line in lines[2:] if line]


def test_bash_script_completes_commands_flags_and_formats() -> None:
    assert _bash(["su"]) == ["suspend"]
    assert _bash(["get", "x", "-o", "w"]) == ["wide"]
    assert _bash(["wait", "x", "--t"]) == ["--timeout"]
    assert _bash(["nothing-matches"]) == []


ZSH = (
    # compadd records what the script offers; the real compsys is not needed to see the candidates.
    "autoload -Uz compinit && compinit -u -D\n"
    "source <(agentrun completion zsh)\n"
    'compadd() { shift; print -l -- "$@" }\n'
    "words=(agentrun ledger x -o j); CURRENT=5; _agentrun\n"
    "words=(agentrun res); CURRENT=2; _agentrun\n"
)
FISH = (
    "agentrun completion fish | source\n"
    "complete -C 'agentrun sus'\n"
    "complete -C 'kubectl-agentrun list -o y'\n"
)
MISSING = {
    sh: pytest.mark.skipif(shutil.which(sh) is None, reason=f"{sh} is not installed")
    for sh in ("zsh", "fish")
}


@pytest.mark.parametrize(
    ("shell", "script", "offered"),
    [
        pytest.param(
            ["zsh", "-f", "-c"], ZSH, ["json", "respond", "resolve", "resume"], marks=MISSING["zsh"], id="zsh"
        ),
        pytest.param(
            ["fish", "--no-config", "-c"], FISH, ["suspend", "yaml"], marks=MISSING["fish"], id="fish"
        ),
    ],
)
def test_the_script_completes_in_a_real_shell(shell: list[str], script: str, offered: list[str]) -> None:
    done = _run(*shell, script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == offered, done.stdout


def test_unknown_shell_is_a_usage_error() -> None:
    done = _run(str(VENV_BIN / "agentrun"), "completion", "tcsh")
    assert done.returncode == 2 and "usage: agentrun completion bash|zsh|fish" in done.stderr


def test_every_user_verb_has_its_flags_listed() -> None:
    """A verb added to agentrun.cli.SUBCOMMANDS (fork, respond, ...) gets flag and run-name completion only
    once completion.FLAGS lists it: this fails until it does."""
    not_run_verbs = {"dev", "worker", "operator", "demo", "bench", "completion", "migrate"}
    assert set(cli.SUBCOMMANDS) - not_run_verbs == set(completion.FLAGS)
