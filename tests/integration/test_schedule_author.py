"""Separation of duties across a schedule: the person who wrote an AgentRunSchedule may not approve the runs
its ticks create when the run's approval policy forbids self-approval, although the operator (not they)
created those runs. On the real API server (deploy/admission as installed by the dev cluster), with the real
operator, real worker Pods and the real HTTP provider counting the effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from test_schedules import LEAD, clock, cron_at, runs_of

from agentrun_core.api import schedules
from agentrun_dev import http_provider, identities
from tests.support.kube import bind, get_run, kubectl
from tests.support.operator_proc import OperatorHandle, closing, operator_env
from tests.support.waiting import wait_for, wait_phase

GROUP, VERSION = "agentrun.dev", "v1alpha1"
AUTHOR = "agentrun.dev/schedule-author"
CREATED_BY = "agentrun.dev/created-by"
GRAPH = "tests.integration.author_graphs:gated_charge"


def template(provider_url: str) -> dict[str, Any]:
    return {
        "spec": {
            "graph": GRAPH,
            "input": {},
            "lease": {"durationSeconds": 8},
            "retry": {"backoffSeconds": 0},
            "approval": {"allowSelfApproval": False},
            "worker": {"env": [{"name": "CHARGE_URL", "value": provider_url}]},
        }
    }


def as_user(kubeconfig: Path) -> kubernetes.client.CustomObjectsApi:
    api = kubernetes.config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    return kubernetes.client.CustomObjectsApi(api)


@pytest.fixture
def people(
    kube: kubernetes.client.ApiClient, namespace: str, identity: Callable[..., Path]
) -> dict[str, Path]:
    # carol may write schedules and runs and approve; manager may only approve.
    bind(kube, namespace, "carol", "agentrun-editor")
    bind(kube, namespace, "carol", "agentrun-approver")
    bind(kube, namespace, "manager", "agentrun-approver")
    return {"carol": identity("carol", ["devs"]), "manager": identity("manager", ["managers"])}


@pytest.fixture
def ops(
    dev_cluster: Any,
    kube: kubernetes.client.ApiClient,
    namespace: str,
    pg_dsn: str,
    worker_account: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorHandle]:
    handle = OperatorHandle(namespace, pg_dsn, operator_env(dev_cluster, namespace, pg_dsn), tmp_path)
    with closing(handle, request):
        yield handle


def test_the_schedules_author_cannot_approve_its_tick_and_a_second_person_can(
    kube: kubernetes.client.ApiClient, ops: OperatorHandle, people: dict[str, Path], tmp_path: Path
) -> None:
    ns = ops.namespace
    env, b, _ = clock()
    with http_provider.HttpProvider(tmp_path / "http") as provider:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AgentRunSchedule",
            # carol tries to name someone else as the author: the API server stamps her own name instead
            "metadata": {"name": "nightly", "annotations": {AUTHOR: "manager"}},
            "spec": {"schedule": cron_at(b), "runTemplate": template(provider.url)},
        }
        as_user(people["carol"]).create_namespaced_custom_object(
            GROUP, VERSION, ns, "agentrunschedules", body
        )
        ops.start(extra_env=env)
        ops.wait_leader(kube, timeout=60)
        run = schedules.tick_run_name("nightly", b)
        wait_for(lambda: run in runs_of(kube, ns, "nightly"), LEAD + 90, f"run {run}")
        meta = get_run(kube, ns, run)["metadata"]
        # the operator created the run; it carries the schedule's author
        assert meta["annotations"][CREATED_BY] == identities.ADMIN_USER
        assert meta["annotations"].get(AUTHOR) == "carol", meta["annotations"]
        status = wait_phase(kube, ns, run, "WaitingApproval", 180, ops)
        pending = str(status["pendingApproval"]["id"])

        mine = kubectl(people["carol"], "annotate", "-n", ns, f"ar/{run}", f"agentrun.dev/approve={pending}")
        assert mine.returncode != 0, mine.stdout
        assert "self-approval refused" in mine.stderr and "carol" in mine.stderr, mine.stderr
        assert http_provider.stats(provider.url)["effects_performed_total"] == 0

        theirs = kubectl(
            people["manager"], "annotate", "-n", ns, f"ar/{run}", f"agentrun.dev/approve={pending}"
        )
        assert theirs.returncode == 0, theirs.stderr
        wait_phase(kube, ns, run, "Succeeded", 180, ops)
        assert http_provider.stats(provider.url)["effects_performed_total"] == 1  # once, at the provider


def test_nobody_but_the_operator_writes_a_runs_schedule_author(
    kube: kubernetes.client.ApiClient, namespace: str, people: dict[str, Path]
) -> None:
    ns = namespace
    carol = as_user(people["carol"])
    run = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentRun",
        "metadata": {"name": "forged", "annotations": {AUTHOR: "manager"}},
        "spec": {"graph": GRAPH, "input": {}, "suspend": True},
    }
    with pytest.raises(kubernetes.client.ApiException) as refused:
        carol.create_namespaced_custom_object(GROUP, VERSION, ns, "agentruns", run)
    assert refused.value.status in (403, 422) and AUTHOR in str(refused.value.body), refused.value.body
    # an ordinary run, then an attempt to add the annotation afterwards
    run["metadata"] = {"name": "plain"}
    carol.create_namespaced_custom_object(GROUP, VERSION, ns, "agentruns", run)
    with pytest.raises(kubernetes.client.ApiException) as later:
        carol.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "agentruns", "plain", {"metadata": {"annotations": {AUTHOR: "manager"}}}
        )
    assert AUTHOR in str(later.value.body), later.value.body

    # a schedule's author changes only with its runTemplate, and then to whoever changed it
    sched = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentRunSchedule",
        "metadata": {"name": "hourly"},
        "spec": {"schedule": "0 * * * *", "suspend": True, "runTemplate": {"spec": {"graph": GRAPH}}},
    }
    carol.create_namespaced_custom_object(GROUP, VERSION, ns, "agentrunschedules", sched)

    def author() -> str:
        got: dict[str, Any] = as_user(people["carol"]).get_namespaced_custom_object(
            GROUP, VERSION, ns, "agentrunschedules", "hourly"
        )
        return str(got["metadata"].get("annotations", {}).get(AUTHOR))

    assert author() == "carol"
    with pytest.raises(kubernetes.client.ApiException) as moved:
        carol.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "agentrunschedules", "hourly", {"metadata": {"annotations": {AUTHOR: "x"}}}
        )
    assert AUTHOR in str(moved.value.body), moved.value.body
    admin = kubernetes.client.CustomObjectsApi(kube)
    admin.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "agentrunschedules", "hourly", {"spec": {"suspend": False}}
    )
    assert author() == "carol"  # not the template: the author stays
    admin.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        "agentrunschedules",
        "hourly",
        {"spec": {"runTemplate": {"spec": {"input": {"a": 1}}}}},
    )
    assert author() == identities.ADMIN_USER
