"""The README stays true: the paths it names exist, its make targets and agentrun subcommands exist, and the
environment variables of its configuration reference are the ones the code reads."""

from __future__ import annotations

import pathlib
import re

from agentrun import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_named_paths_exist() -> None:
    top = {p.name for p in ROOT.iterdir()}
    named = set(re.findall(r"\]\(([\w./-]+)\)", README)) | set(re.findall(r"`([\w./-]+)`", README))
    candidates = {c for c in named if "/" in c and c.split("/")[0] in top}
    assert len(candidates) > 15, candidates
    missing = sorted(c for c in candidates if not (ROOT / c.rstrip("/")).exists())
    assert not missing, missing


def test_make_targets_exist() -> None:
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([a-z-]+)`", README)) | set(re.findall(r"^make ([a-z-]+)", README, re.M))
    assert {"demo", "test"} <= named
    assert named <= targets, named - targets


def test_agentrun_subcommands_exist() -> None:
    named = set(re.findall(r"`(?:kubectl )?agentrun ([a-z]+)", README))
    named |= set(re.findall(r"^(?:kubectl )?agentrun ([a-z]+)", README, re.M))
    named.discard("dev")  # the dev cluster's own subcommands are documented in docs/dev/dev-cluster.md
    assert {"demo", "trace", "ledger", "approve", "reject", "list", "operator", "worker"} <= named | {
        "operator"
    }
    assert named <= set(cli.SUBCOMMANDS), named - set(cli.SUBCOMMANDS)


def test_configuration_reference_matches_the_code() -> None:
    operator_settings = (ROOT / "operator" / "agent_operator" / "settings.py").read_text()
    table = README.split("**Operator**", 1)[1].split("**Worker Pods**", 1)[0]
    for var in re.findall(r"`(AGENTRUN_[A-Z_]+)`", table):
        assert var in operator_settings, var
    example = (ROOT / "agentrun_examples" / "support_ticket" / "settings.py").read_text()
    for var in set(re.findall(r"`(SUPPORT_[A-Z_]+)`", README)):
        assert f'"{var}"' in example, var
    worker_settings = (ROOT / "agent_worker" / "settings.py").read_text()
    section = README.split("**Worker Pods**", 1)[1].split("**The support-ticket example**", 1)[0]
    for var in re.findall(r"`(AGENTRUN_[A-Z_]+)`", section):
        assert var in worker_settings or var in (ROOT / "docs" / "design.md").read_text(), var
