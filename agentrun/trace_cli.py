"""``agentrun get|list|trace|ledger`` (also ``kubectl agentrun …``): the read commands.

Everything is read as the current kubeconfig user. ``get`` and ``list`` read AgentRuns; ``trace`` and
``ledger`` read the run's attempts, steps, effects and approvals through the API server too, from the
operator's read API (``agentruntraces`` / ``agentruneffects`` of ``read.agentrun.dev``): whoever may ``get``
the AgentRun may read them, nobody else. ``--dsn`` (or ``AGENTRUN_DSN``) reads Postgres directly instead: for
the cluster admin who holds that DSN (``agentrun dev env`` prints the dev cluster's). Every command prints
through ``agentrun.output`` (``-o table|wide|json|yaml|name``).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import sys
from typing import Any

from agentrun import cluster, output, render, trace, watching
from agentrun_core import kube
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
        p.add_argument(
            "--dsn",
            help="read Postgres directly with this DSN (the cluster admin's; default: $AGENTRUN_DSN, "
            "and without either: the API server's read API, as the kubeconfig user)",
        )
    return p


def _dsn(args: argparse.Namespace) -> str | None:
    """The admin's DSN when one is given; None: read through the API server's read API."""
    dsn = args.dsn or os.environ.get("AGENTRUN_DSN")
    return str(dsn) if dsn else None


READ_API = f"APIService {kube.runs.READ_VERSION}.{kube.runs.READ_GROUP}"


def read_view(api: kube.ApiClient, namespace: str, name: str, resource: str) -> dict[str, Any]:
    """One view of the run from the operator's read API, as the kubeconfig user; a CliError that says which
    of RBAC, the run or the read API is missing."""
    what = f"read the {resource} of AgentRun {name}"
    try:
        return kube.runs.read_view(api, namespace, name, resource, timeout=30)
    except kube.KubeError as exc:
        # The read API answers a missing run with a Status (reason NotFound); the API server answers a path
        # of a group nobody serves with a bare "404 page not found".
        if exc.status == 404 and exc.reason != "NotFound":
            raise cluster.CliError(
                f"the read API ({READ_API}) is not installed on this cluster, so runs cannot be read as "
                "yourself: ask the cluster admin to install it (deploy/base), or, as the admin, pass --dsn",
                exc.status,
            ) from exc
        if exc.status == 503:
            raise cluster.CliError(
                f"the read API ({READ_API}) cannot answer now: {exc.detail} (is the operator running?)",
                exc.status,
            ) from exc
        raise cluster.CliError(cluster.message(exc, what, namespace, name), exc.status) from exc


def gather(resource: dict[str, Any], dsn: str) -> trace.Inputs:
    try:
        return trace.gather(resource, dsn)
    except connect.Error as exc:
        raise cluster.CliError(f"cannot read the ledger: {exc}") from exc


def _ledger_view(effects: list[dict[str, Any]]) -> output.View:
    # -o name lists the effect keys: what `agentrun resolve NAME KEY` takes. The ledger's table is always
    # the wide one: its full keys are what a human copies into `resolve`.
    return output.View(
        data=effects,
        table=lambda wide: render.effects_table(effects, wide=True),
        names=[f"effect/{e['key']}" for e in effects],
        empty="No effects recorded.",
    )


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
    dsn = _dsn(args)
    if dsn is None and command == "ledger":
        effects = read_view(api, namespace, args.name, "agentruneffects")["effects"]
        print(output.emit(args.output, _ledger_view(effects)))
        return 0
    if dsn is None:
        data = read_view(api, namespace, args.name, "agentruntraces")["trace"]
    else:
        data = trace.build(gather(cluster.get_run(api, namespace, args.name), dsn))
    if data["run"]["ledgerStatus"] is None:
        print(
            f"agentrun: warning: run {args.name} (uid {data['run']['uid']}) is not in the ledger database "
            "(not admitted yet, or AGENTRUN_DSN points elsewhere)",
            file=sys.stderr,
        )
    if command == "ledger":
        view = _ledger_view(data["effects"])
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
    return cluster.dispatch(
        argv,
        {command: functools.partial(run, command) for command in COMMANDS},
        "agentrun get|trace|ledger NAME [-n NS] [-o FORMAT] | "
        "agentrun list [-n NS|-A] [-l SELECTOR] [--phase P,...] [-w] [-o FORMAT]",
    )
