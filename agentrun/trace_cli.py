"""``agentrun get|list|trace|ledger`` (also ``kubectl agentrun …``): the read commands.

The AgentRun comes from the Kubernetes API (KUBECONFIG, as the current user); the ledger, attempts, steps and
approvals from Postgres (``AGENTRUN_DSN``; ``agentrun dev env`` prints it for the dev cluster). ``get`` and
``list`` need only the API server. Every command prints through ``agentrun.output`` (``-o
table|wide|json|yaml|name``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from typing import Any

from agentrun import cluster, output, render, trace, watching
from agentrun_core import kube, store
from agentrun_core.store import connect

MULTI_COMMAND = True
HELP = {
    "get": "show one run: phase, step, attempts, pending approval, effects (the API server only)",
    "list": "list runs with phase, step, pending approval, effects (the API server only)",
    "trace": "show a run's timeline: attempts, steps, effects, approvals, interventions",
    "ledger": "show a run's effect ledger (keys for `agentrun resolve`)",
}


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"agentrun {command}")
    if command != "list":
        p.add_argument("name", help="the AgentRun's name")
    p.description = HELP[command]
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    if command == "list":
        p.add_argument("-A", "--all-namespaces", action="store_true", help="runs of every namespace")
        p.add_argument("-l", "--selector", help="label selector as kubectl's (team=support,tier!=batch)")
        p.add_argument("--phase", help="only runs in these phases (Failed,WaitingApproval)")
    if command in ("list", "get"):
        p.add_argument(
            "-w", "--watch", action="store_true", help="after printing, print each change until Ctrl-C"
        )
    output.add_argument(p)
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    if command in ("trace", "ledger"):
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
        with connect.connect(dsn, timeout_seconds=5) as conn:
            return trace.Inputs(
                resource=resource,
                run=store.get_run(conn, run_id),
                attempts=store.list_attempts(conn, run_id),
                steps=store.list_step_events(conn, run_id),
                effects=store.list_effects(conn, run_id),
                approvals=store.list_approvals(conn, run_id),
                interventions=store.list_interventions(conn, run_id),
                forks=store.list_forks(conn, run_id),
                usage=store.model_usage_by_step(conn, run_id),
            )
    except connect.Error as exc:
        raise cluster.CliError(f"cannot read the ledger: {exc}") from exc


def _runs_view(items: list[dict[str, Any]], all_namespaces: bool, empty: str, single: bool) -> output.View:
    now = datetime.datetime.now(datetime.UTC)
    return output.View(
        data=items[0] if single else output.as_list(items),
        table=lambda wide: render.run_list(items, now, all_namespaces, wide=wide),
        names=[output.run_name(i["metadata"]["name"]) for i in items],
        empty=empty,
    )


def run(command: str, argv: list[str]) -> int:
    args = _parser(command).parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    if command in ("list", "get"):
        return _runs(command, args, api, namespace)
    resource = cluster.get_run(api, namespace, args.name)
    data = trace.build(gather(resource, _dsn(args)))
    if data["run"]["ledgerStatus"] is None:
        print(
            f"agentrun: warning: run {args.name} (uid {data['run']['uid']}) is not in the ledger database "
            "(not admitted yet, or AGENTRUN_DSN points elsewhere)",
            file=sys.stderr,
        )
    if command == "ledger":
        effects = data["effects"]
        # -o name lists the effect keys: what `agentrun resolve NAME KEY` takes. The ledger's table is always
        # the wide one: its full keys are what a human copies into `resolve`.
        view = output.View(
            data=effects,
            table=lambda wide: render.effects_table(effects, wide=True),
            names=[f"effect/{e['key']}" for e in effects],
            empty="No effects recorded.",
        )
    else:
        view = output.View(
            data=data,
            table=lambda wide: render.trace(data, wide=wide),
            names=[output.run_name(args.name)],
        )
    print(output.emit(args.output, view))
    return 0


def _runs(command: str, args: argparse.Namespace, api: kube.ApiClient, namespace: str) -> int:
    """``list`` and ``get``, once or (``-w``) followed by every change, each change printed as one row
    (``-o json|yaml``: one document per change, ``-o name``: its name)."""
    all_ns = command == "list" and args.all_namespaces
    where: str | None = None if all_ns else namespace
    wanted = watching.phases(getattr(args, "phase", None))
    selector = getattr(args, "selector", None)
    name = args.name if command == "get" else None
    if command == "get" and not args.watch:
        items, version = [cluster.get_run(api, namespace, args.name)], ""
    else:
        items, version = cluster.list_runs_at(api, where, selector=selector, name=name)
        if name is not None and not items:
            raise cluster.CliError(f'AgentRun "{name}" not found in namespace "{namespace}"')
    shown = watching.keep(items, wanted)
    empty = "No AgentRuns found" + ("" if all_ns else f" in namespace {namespace}") + "."
    print(output.emit(args.output, _runs_view(shown, all_ns, empty, single=command == "get")), flush=True)
    if not args.watch:
        return 0
    try:
        for obj in watching.changes(api, where, version, selector=selector, name=name):
            if not watching.keep([obj], wanted):
                continue
            text = output.emit(args.output, _runs_view([obj], all_ns, "", single=True))
            print(watching.without_header(text) if args.output in ("table", "wide") else text, flush=True)
    except KeyboardInterrupt:
        pass
    return 0


COMMANDS = tuple(HELP)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(
            "usage: agentrun get|trace|ledger NAME [-n NS] [-o FORMAT] | "
            "agentrun list [-n NS|-A] [-l SELECTOR] [--phase P,...] [-w] [-o FORMAT]",
            file=sys.stderr,
        )
        return 2
    try:
        return run(argv[0], argv[1:])
    except cluster.CliError as exc:
        print(f"agentrun: {exc}", file=sys.stderr)
        return 1
