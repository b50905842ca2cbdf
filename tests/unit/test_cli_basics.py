"""The CLI's own surface: ``--version``, the verbs an installation offers, and ``wait``'s exit codes when
it cannot find out (no cluster needed: the unreachable API server is a real closed port on loopback)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agentrun import cli, cluster, steer_cli


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == f"agentrun {cli.version()}" and cli.version()[0].isdigit(), out


def test_a_verb_whose_module_is_not_installed_is_neither_listed_nor_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(cli.SUBCOMMANDS, "ghost", ("agentrun_no_such_package.cli", "not in this wheel"))
    assert "ghost" not in cli.available() and "get" in cli.available()
    assert cli.main(["ghost"]) == 2
    assert "unknown command 'ghost'" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    assert "ghost" not in capsys.readouterr().out


def test_transient_errors_are_the_ones_worth_asking_again() -> None:
    assert cluster.transient(cluster.CliError("x", None))  # never reached the server
    assert all(cluster.transient(cluster.CliError("x", s)) for s in (429, 500, 502, 503, 504))
    assert not any(cluster.transient(cluster.CliError("x", s)) for s in (401, 403, 404, 422))
    assert not cluster.transient(cluster.CliError("a usage error of our own"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_wait_that_cannot_reach_the_server_retries_then_exits_5_not_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{_closed_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: ns}}]\n"
    )
    argv = ["wait", "run-1", "--kubeconfig", str(config), "--timeout", "2", "--interval", "0.2"]
    code = steer_cli.main(argv)
    err = capsys.readouterr().err
    assert code == steer_cli.EXIT_UNKNOWN == 5, err
    assert "cannot reach the API server" in err and "retrying" in err


def test_a_log_follow_moves_to_the_next_attempt_only_while_one_will_come() -> None:
    from agentrun import logs_cli

    pods = {1: "r-1", 2: "r-2", 3: "r-3"}
    assert logs_cli.next_attempt(pods, 1, "Running") == (2, "r-2")  # the oldest newer one first
    assert logs_cli.next_attempt(pods, 1, "Succeeded") == (2, "r-2")  # its log is still worth printing
    assert logs_cli.next_attempt({1: "r-1"}, 1, "Running") is True  # the operator is starting it: look again
    assert logs_cli.next_attempt({1: "r-1"}, 1, "Pending") is True
    for phase in ("Succeeded", "Failed", "Cancelled", "Suspended", "WaitingApproval"):
        assert logs_cli.next_attempt({1: "r-1"}, 1, phase) is False, phase


def test_the_client_waits_past_an_outcome_older_than_the_spec() -> None:
    from agentrun import client

    def run(phase: str, generation: int, observed: int) -> client.Run:
        cond = {"type": "Finished", "status": "True", "reason": phase, "observedGeneration": observed}
        meta = {"name": "r", "generation": generation}
        return client.Run.of({"metadata": meta, "status": {"phase": phase, "conditions": [cond]}})

    assert client.reached(run("Failed", 2, 2), client.FINAL_PHASES)
    assert not client.reached(run("Failed", 3, 2), client.FINAL_PHASES)  # a retry the operator has not seen
    assert client.reached(run("WaitingApproval", 3, 2), {"WaitingApproval"})  # not final: no outcome to age
    assert not client.reached(run("Running", 2, 2), client.FINAL_PHASES)


def test_as_and_as_group_are_global_options_taken_out_anywhere() -> None:
    split = cli.split_identity
    assert split(["approve", "r", "--as", "bob", "-n", "x"]) == (["approve", "r", "-n", "x"], "bob", ())
    assert split(["--as=bob", "--as-group", "g1", "get", "r", "--as-group=g2"]) == (
        ["get", "r"],
        "bob",
        ("g1", "g2"),
    )
    assert split(["get", "r"]) == (["get", "r"], None, ())
    # after "--" nothing is ours
    assert split(["get", "--", "--as", "x"]) == (["get", "--", "--as", "x"], None, ())
    for bad, why in (
        (["get", "--as"], "--as needs a value"),
        (["get", "--as="], "non-empty"),
        (["get", "--as-group", "g"], "--as-group needs --as"),
    ):
        with pytest.raises(cli.UsageError, match=why):
            split(bad)


def test_as_is_refused_where_nothing_acts_as_the_user(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["dev", "status", "--as", "bob"]) == 2
    assert "--as does not apply to 'dev'" in capsys.readouterr().err
    assert cli.main(["get", "r", "--as-group", "g"]) == 2
    assert "--as-group needs --as" in capsys.readouterr().err


def test_connect_impersonates_only_within_the_command(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: ns1}}]\n"
    )
    from agentrun_core.kube import api as kube_api

    with cluster.impersonating("bob", ("g1", "g2")):
        api, namespace = cluster.connect(str(config))
    headers = kube_api._headers(api, {"Accept": "application/json"})
    assert namespace == "ns1"
    assert list(headers.items()) == [
        ("Accept", "application/json"),
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "g1"),
        ("Impersonate-Group", "g2"),
    ]
    plain, _ = cluster.connect(str(config))
    assert kube_api._headers(plain, {"Accept": "application/json"}) == {"Accept": "application/json"}


def test_each_command_module_dispatches_its_verbs_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """``cluster.dispatch``, every command module's ``main``: an unknown verb prints the module's usage and
    exits 2; a ``CliError`` prints its message and exits 1 (or the module's own code: ``wait``'s)."""
    from agentrun import approve_cli, respond_cli, schedule_cli, trace_cli

    for main, usage in (
        (approve_cli.main, "usage: agentrun approve|reject NAME"),
        (respond_cli.main, "usage: agentrun respond NAME"),
        (schedule_cli.main, "usage: agentrun schedule "),
        (trace_cli.main, "usage: agentrun get|trace|ledger NAME"),
        (steer_cli.main, "usage: agentrun "),
    ):
        assert main(["nonsense"]) == 2 and main([]) == 2
        assert capsys.readouterr().err.startswith(usage)

    def refused(argv: list[str]) -> int:
        raise cluster.CliError(f"no: {argv}")

    assert cluster.dispatch(["verb", "x"], {"verb": refused}, "u") == 1
    assert capsys.readouterr().err == "agentrun: no: ['x']\n"
    assert cluster.dispatch(["verb"], {"verb": refused}, "u", failed=3) == 3
