"""``agentrun schedule trigger | list`` (also ``kubectl agentrun schedule …``): AgentRunSchedules as the user.

    agentrun schedule trigger NAME [-n NS]   start a run of the schedule now (a manual tick)
    agentrun schedule list [-n NS]           the schedules: cron, zone, suspend, active, last and next tick

``trigger`` is the CronJob's ``kubectl create job --from=cronjob/NAME``: an AgentRun from the schedule's
``spec.runTemplate`` named ``<name>-manual-<4 characters>``, owned by the schedule and labelled
``agentrun.dev/schedule`` like its ticks' runs (so concurrencyPolicy and the history limits count it). It is
an ordinary create with the user's credentials: RBAC decides (create agentruns, get agentrunschedules).
"""

from __future__ import annotations

import argparse
import sys

from agentrun import cluster, stamps
from agentrun_core import kube
from agentrun_core.api import schedules


def _parser(verb: str, help_: str, name: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"agentrun schedule {verb}", description=help_)
    if name:
        p.add_argument("name", help="the AgentRunSchedule's name")
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    return p


def trigger(argv: list[str]) -> int:
    args = _parser("trigger", "start a run of the schedule now (a manual tick)", True).parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    try:
        body = kube.schedules.get(api, namespace, args.name)
    except kube.NotFound:
        missing = f'AgentRunSchedule "{args.name}" not found in namespace "{namespace}"'
        raise cluster.CliError(missing) from None
    except kube.KubeError as exc:
        raise cluster.CliError(cluster.message(exc, f"get agentrunschedule {args.name}")) from exc
    who = cluster.identity(api)  # the created-by a VAP-only install (Kubernetes 1.34/1.35) requires
    for _ in range(3):  # 4 random characters: a clash is rare, and AlreadyExists then just draws again
        run = schedules.manual_run_name(args.name)
        try:
            with cluster.translated(f"create agentrun {run}"):
                kube.runs.create(api, namespace, stamps.created(schedules.run_body(body, run, None), who))
        except cluster.CliError as exc:
            if exc.status == 409:
                continue
            raise
        print(f"agentrun/{run} created from agentrunschedule/{args.name}")
        return 0
    raise cluster.CliError("could not find a free manual run name in 3 draws; try again")


def list_(argv: list[str]) -> int:
    args = _parser("list", "list the schedules", False).parse_args(argv)
    api, default_ns = cluster.connect(args.kubeconfig, args.context)
    namespace = args.namespace or default_ns
    items = cluster.call("list agentrunschedules", lambda: kube.schedules.list_(api, namespace))
    rows = [("NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "NEXT")]
    for item in items:
        spec, status = item.get("spec") or {}, item.get("status") or {}
        rows.append(
            (
                str(item["metadata"]["name"]),
                str(spec.get("schedule") or ""),
                str(spec.get("timeZone") or "UTC"),
                "True" if spec.get("suspend") else "False",
                str(status.get("activeCount") or 0),
                str(status.get("lastScheduleTime") or "<none>"),
                str(status.get("nextScheduleTime") or "<none>"),
            )
        )
    if len(rows) == 1:
        print(f"No AgentRunSchedules in namespace {namespace}.", file=sys.stderr)
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


VERBS = {"trigger": trigger, "list": list_}


HELP = """usage: agentrun schedule trigger NAME | list  [-n NAMESPACE] [--kubeconfig FILE] [--context CONTEXT]

  trigger NAME   start a run of the AgentRunSchedule now (named after it, "manual" and 4 characters)
  list           the schedules: cron, time zone, suspend, active runs, last and next tick

options:
  -h, --help            show this help
  -n, --namespace NS    namespace (default: the kubeconfig context's)
  --kubeconfig FILE     kubeconfig file (default: $KUBECONFIG, ~/.kube/config)
  --context CONTEXT     kubeconfig context"""


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    return cluster.dispatch(argv, VERBS, f"agentrun schedule {'|'.join(VERBS)} [NAME] [-n NS]")
