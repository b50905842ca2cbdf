"""``agentrun trace|ledger|list`` (also ``kubectl agentrun …``).

The AgentRun comes from the Kubernetes API (KUBECONFIG, as the current user); the ledger, attempts, steps and
approvals from Postgres (``AGENTRUN_DSN``; ``agentrun dev env`` prints it for the dev cluster).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any

import psycopg

from agent_worker import store
from agentrun import cluster, render, trace

MULTI_COMMAND = True


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"agentrun {command}")
    if command != "list":
        p.add_argument("name", help="the AgentRun's name")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    if command == "list":
        p.add_argument("-A", "--all-namespaces", action="store_true", help="runs of every namespace")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    if command != "list":
        p.add_argument("--dsn", help="Postgres DSN of the ledger (default: $AGENTRUN_DSN)")
    return p


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get("AGENTRUN_DSN")
    if not dsn:
        raise cluster.CliError(
            "no ledger database: set AGENTRUN_DSN or pass --dsn (for the dev cluster: "
            'eval "$(agentrun dev env)")'
        )
    return str(dsn)


def gather(resource: dict[str, Any], dsn: str) -> trace.Inputs:
    run_id = resource["metadata"]["uid"]
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            return trace.Inputs(
                resource=resource,
                run=store.get_run(conn, run_id),
                attempts=store.list_attempts(conn, run_id),
                steps=store.list_step_events(conn, run_id),
                effects=store.list_effects(conn, run_id),
                approvals=store.list_approvals(conn, run_id),
            )
    except psycopg.Error as exc:
        raise cluster.CliError(f"cannot read the ledger: {exc}") from exc


def run(command: str, argv: list[str]) -> int:
    args = _parser(command).parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    if command == "list":
        items = cluster.list_runs(api, None if args.all_namespaces else namespace)
        if args.output == "json":
            print(json.dumps(items, indent=2, default=str))
        elif not items:
            print("No AgentRuns found" + ("" if args.all_namespaces else f" in namespace {namespace}") + ".")
        else:
            print(render.run_list(items, datetime.datetime.now(datetime.UTC), args.all_namespaces))
        return 0
    resource = cluster.get_run(api, namespace, args.name)
    data = trace.build(gather(resource, _dsn(args)))
    if data["run"]["ledgerStatus"] is None:
        print(
            f"agentrun: warning: run {args.name} (uid {data['run']['uid']}) is not in the ledger database "
            "(not admitted yet, or AGENTRUN_DSN points elsewhere)",
            file=sys.stderr,
        )
    if command == "ledger":
        if args.output == "json":
            print(json.dumps(data["effects"], indent=2, default=str))
        else:
            print(
                render.effects_table(data["effects"], wide=True)
                if data["effects"]
                else "No effects recorded."
            )
        return 0
    print(json.dumps(data, indent=2, default=str) if args.output == "json" else render.trace(data))
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"trace", "ledger", "list"}:
        print(
            "usage: agentrun trace|ledger NAME [-n NS] [-o json] | agentrun list [-n NS|-A]", file=sys.stderr
        )
        return 2
    try:
        return run(argv[0], argv[1:])
    except cluster.CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 1
