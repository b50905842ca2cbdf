"""Pure: the command line of each dev-cluster process, from settings, ports and file paths (unit-tested).

Flags follow a kubeadm single-node control plane, trimmed to what a laptop needs: client-certificate
authentication against the dev CA, ``Node,RBAC`` authorization, the default admission plugins (which include
PodSecurity, ValidatingAdmissionPolicy and MutatingAdmissionPolicy in 1.37) plus NodeRestriction,
service-account tokens signed with our key, and a controller-manager that runs every default controller with
per-controller service-account credentials and no leader election (there is one of it).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from agentrun_dev import pki
from agentrun_dev import settings as settings_mod
from agentrun_dev.node import config as node_config

SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
ETCD_NAME = "agentrun-dev"


@dataclasses.dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    etcd_metrics: int
    apiserver: int
    controller_manager: int
    smtp: int
    smtp_api: int
    postgres: int


def etcd(binary: Path, s: settings_mod.Settings, p: Ports, certs: pki.PKI) -> list[str]:
    peer = f"http://127.0.0.1:{p.etcd_peer}"
    return [
        str(binary),
        f"--name={ETCD_NAME}",
        f"--data-dir={s.etcd_dir}",
        f"--listen-client-urls=https://127.0.0.1:{p.etcd}",
        f"--advertise-client-urls=https://127.0.0.1:{p.etcd}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={ETCD_NAME}={peer}",
        f"--listen-metrics-urls=http://127.0.0.1:{p.etcd_metrics}",
        f"--cert-file={certs.etcd.cert}",
        f"--key-file={certs.etcd.key}",
        f"--trusted-ca-file={certs.ca.cert}",
        "--client-cert-auth=true",
        # A development cluster on a shared 2-core machine: skip fsync; compact so the db stays small.
        "--unsafe-no-fsync=true",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=30m",
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]


def apiserver(binary: Path, s: settings_mod.Settings, p: Ports, certs: pki.PKI) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=https://127.0.0.1:{p.etcd}",
        f"--etcd-cafile={certs.ca.cert}",
        f"--etcd-certfile={certs.etcd_client.cert}",
        f"--etcd-keyfile={certs.etcd_client.key}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        # The `kubernetes` Service endpoint would be 127.0.0.1, which the reconciler refuses; nothing
        # in-cluster needs it (pods are local processes that use the kubeconfig).
        "--endpoint-reconciler-type=none",
        f"--secure-port={p.apiserver}",
        f"--tls-cert-file={certs.apiserver.cert}",
        f"--tls-private-key-file={certs.apiserver.key}",
        f"--client-ca-file={certs.ca.cert}",
        # The aggregation layer's front proxy, as kubeadm configures it; without it delegated authentication
        # (the controller-manager's health endpoints) logs errors about a missing requestheader CA.
        f"--requestheader-client-ca-file={certs.ca.cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={certs.front_proxy.cert}",
        f"--proxy-client-key-file={certs.front_proxy.key}",
        f"--cert-dir={s.state_dir / 'apiserver'}",
        # pods/log (kubectl logs, agentrun logs) reaches the node's log endpoint at its InternalIP with this
        # client certificate (the pod runtime's endpoint, agentrun_dev.podruntime.logserver, requires it).
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # ... through the egress proxy (agentrun_dev.egress): loopback, or the real node's IP inside its own
        # network namespace; nothing else, so no kubelet connection leaves the machine.
        f"--egress-selector-config-file={egress_selector_file(s)}",
        *(
            [
                f"--kubelet-client-certificate={certs.kubelet_client.cert}",
                f"--kubelet-client-key={certs.kubelet_client.key}",
            ]
            if certs.kubelet_client is not None
            else []
        ),
        "--authorization-mode=Node,RBAC",
        # Added to the defaults (NamespaceLifecycle, LimitRanger, ServiceAccount, PodSecurity, …,
        # ResourceQuota, ValidatingAdmissionPolicy, MutatingAdmissionPolicy, webhooks): NodeRestriction, as
        # kubeadm does; PodNodeSelector and PodTolerationRestriction let a namespace's annotations put its
        # Pods on the real node (agentrun_dev.node), inert for namespaces without those annotations.
        "--enable-admission-plugins=NodeRestriction,PodNodeSelector,PodTolerationRestriction",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={certs.sa_pub}",
        f"--service-account-signing-key-file={certs.sa_key}",
        f"--service-cluster-ip-range={pki.SERVICE_CLUSTER_IP_RANGE}",
        # The apiserver allows privileged pods (as kubeadm's does); Pod Security admission decides per
        # namespace.
        "--allow-privileged=true",
        "--event-ttl=1h",
        "--profiling=false",
        "--v=1",
    ]


def _loopback_component(binary: Path, kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    """The flags kube-controller-manager and kube-scheduler share: the API server and the authentication /
    authorization of their own endpoint through one kubeconfig, served on loopback, no leader election (one
    of each)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


def controller_manager(
    binary: Path, s: settings_mod.Settings, p: Ports, certs: pki.PKI, kubeconfig: Path
) -> list[str]:
    return [
        *_loopback_component(binary, kubeconfig, p.controller_manager, s.state_dir / "controller-manager"),
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={certs.sa_key}",
        f"--root-ca-file={certs.ca.cert}",
        f"--cluster-signing-cert-file={certs.ca.cert}",
        f"--cluster-signing-key-file={certs.ca.key}",
        f"--service-cluster-ip-range={pki.SERVICE_CLUSTER_IP_RANGE}",
        "--controllers=*",
        # A lost node (the pod runtime's simulation) is noticed after this long, not the default 50s.
        "--node-monitor-grace-period=20s",
        "--v=1",
    ]


def scheduler(binary: Path, kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    """kube-scheduler, for the real node (``agentrun_dev.node.lifecycle``)."""
    return [*_loopback_component(binary, kubeconfig, port, cert_dir), "--v=1"]


def python() -> str:
    """This environment's interpreter under one stable name.

    ``sys.executable`` is ``…/bin/python3`` from the console script but ``…/bin/python`` from pytest, and
    ``up`` restarts a daemon whose command line changed."""
    candidate = Path(sys.executable).parent / "python"
    return str(candidate) if candidate.exists() else sys.executable


def egress_socket(s: settings_mod.Settings) -> Path:
    return s.state_dir / "egress.sock"


def egress_selector_file(s: settings_mod.Settings) -> Path:
    return s.state_dir / "egress-selector.yaml"


def egress_selector(s: settings_mod.Settings) -> str:
    """The API server's EgressSelectorConfiguration: its ``cluster`` traffic (kubelets: logs, exec, port
    forwarding, node proxy) by HTTP CONNECT over the egress proxy's unix socket."""
    return (
        "apiVersion: apiserver.k8s.io/v1beta1\n"
        "kind: EgressSelectorConfiguration\n"
        "egressSelections:\n"
        "  - name: cluster\n"
        "    connection:\n"
        "      proxyProtocol: HTTPConnect\n"
        "      transport:\n"
        "        uds:\n"
        f"          udsName: {egress_socket(s)}\n"
    )


def egress_proxy(s: settings_mod.Settings) -> list[str]:
    return [
        python(), "-m", "agentrun_dev.egress",
        "--socket", str(egress_socket(s)),
        "--state-dir", str(s.state_dir),
        "--node-ip", node_config.NODE_IP,
    ]  # fmt: skip


def pod_runtime(s: settings_mod.Settings, admin_kubeconfig: Path) -> list[str]:
    return [
        python(), "-m", "agentrun_dev.podruntime",
        "--kubeconfig", str(admin_kubeconfig),
        "--state-dir", str(s.state_dir),
        "--node-name", s.node_name,
    ]  # fmt: skip


def smtp_sink(s: settings_mod.Settings, p: Ports) -> list[str]:
    return [
        python(), "-m", "agentrun_dev.smtp_sink",
        "--host", "127.0.0.1",
        "--port", str(p.smtp),
        "--api-port", str(p.smtp_api),
        "--store", str(s.smtp_dir),
    ]  # fmt: skip


def env_exports(s: settings_mod.Settings, p: Ports, dsn: str) -> dict[str, str]:
    """What ``agentrun dev env`` prints (contract in docs/design.md)."""
    return {
        "KUBECONFIG": str(s.kubeconfig),
        "AGENTRUN_DSN": dsn,
        "AGENTRUN_SMTP_HOST": "127.0.0.1",
        "AGENTRUN_SMTP_PORT": str(p.smtp),
        "AGENTRUN_SMTP_API": f"http://127.0.0.1:{p.smtp_api}",
        "AGENTRUN_DEV_HOME": str(s.state_dir),
    }
