"""Pure: the real node's configuration files and command lines, from paths and ports (unit-tested).

Each quirk of the machines this runs on is one explicit, commented setting here:

* a negative ``oom_score_adj`` is refused -> containerd ``restrict_oom_score_adj = true``, kubelet
  ``oomScoreAdj: 0``, containerd ``oom_score = 0``;
* crun 1.8 refuses hybrid cgroup v1 -> containerd's runtime is runc (``BinaryName``);
* kubelet 1.37 refuses cgroup v1 by default -> ``failCgroupV1: false`` (containerd 2 still runs on v1:
  deprecated, maintained until at least May 2029);
* containerd 2 (built from its Go module, ``agentrun_dev.node.build``) reads this version-2 config and
  migrates it in memory; NRI, on by default there, is disabled (host paths);
* the node IP cannot be loopback -> the node has its own network namespace with a bridge address
  (:data:`NODE_IP`), and the API server, Postgres and the SMTP sink are forwarded into it (``forward``);
* no host-wide sysctl may change -> the ``/proc/sys`` entries kubelet would write are masked, in the node's
  own mount namespace, by read-only files that already hold the values it wants (:data:`KUBELET_SYSCTLS`);
* no iptables rule in the host's tables -> ``makeIPTablesUtilChains: false``, no kube-proxy, no CNI
  ``ipMasq``/``portmap``; everything lives in the node's network namespace anyway.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

import yaml

NODE_NAME = "agentrun-real-node"
POD_CIDR = "10.213.0.0/24"
NODE_IP = "10.213.0.1"
"""The bridge's address in the node's namespace: kubelet's node IP, the pods' gateway, the forwarders'."""
SERVICE_IP = "10.0.0.1"
"""The ``kubernetes`` Service's ClusterIP (first of the dev cluster's range): pods' in-cluster API address."""
BRIDGE = "cni0"
PAUSE_IMAGE = "agentrun.local/pause:1"
TAINT_KEY = "agentrun.dev/real-node"
LABEL = "agentrun.dev/real-node"
KUBELET_PORT = 10250
# kubelet's setupKernelTunables writes these unless they already hold the value; a read-only file with
# that value, bound over the entry inside the node's mount namespace, keeps the host's untouched.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


@dataclasses.dataclass(frozen=True)
class Paths:
    root: Path
    """``<state>/node``: everything the node writes."""

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_sock(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data(self) -> Path:
        return self.root / "cni" / "data"

    @property
    def sysctl_dir(self) -> Path:
        return self.root / "sysctl-masks"

    @property
    def cgroup_record(self) -> Path:
        return self.root / "cgroups-created.json"


def containerd_toml(p: Paths, runc: str, cni_bin: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""# Written by agentrun_dev.node.config; regenerated on every `agentrun dev node up`.
version = 2
root = "{p.containerd_root}"
state = "{p.containerd_state}"
# A negative oom_score_adj is refused on this kind of machine: containerd keeps its own score.
oom_score = 0
# Plugins that would write outside our state directory (/opt/containerd) or need other kernels' features.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp",
  # containerd 2 enables NRI by default: its socket and plugin directories (/var/run/nri, /opt/nri) are host
  # paths, and nothing here uses it.
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = "{p.containerd_sock}"

[ttrpc]
  address = "{p.containerd_sock}.ttrpc"

[metrics]
  address = ""

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # Never below containerd's own score (which is 0): the kernel here refuses negative values.
  restrict_oom_score_adj = true
  # Pod network namespaces are bind-mounted under our state, not in the host's /run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  # runc, not crun: crun 1.8 refuses this machine's hybrid cgroup v1 layout.
  BinaryName = "{runc}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{cni_bin}"
  conf_dir = "{p.cni_conf}"
  max_conf_num = 1
"""


def cni_conflist(p: Paths) -> dict[str, Any]:
    """One bridge in the node's namespace; no ipMasq/portmap (no iptables rules, nothing leaves the node)."""
    return {
        "cniVersion": "1.0.0",
        "name": "agentrun-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "isDefaultGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(p.cni_data),
                    # The default route comes from isDefaultGateway (an ipam route too would clash).
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(p: Paths, cgroup_root: str, ca: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",  # the node namespace's own loopback
        "healthzPort": 10248,
        "containerRuntimeEndpoint": f"unix://{p.containerd_sock}",
        "cgroupDriver": "cgroupfs",
        # Under the cgroup of the process that started the node, never at a hierarchy root.
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        # This machine has the hybrid cgroup v1 layout; kubelet 1.37 refuses it unless told.
        "failCgroupV1": False,
        "failSwapOn": False,
        # No iptables chains in any table: kube-proxy does not run, services are not needed by the e2e.
        "makeIPTablesUtilChains": False,
        # kubelet's own score; the default -999 is refused here.
        "oomScoreAdj": 0,
        "protectKernelDefaults": False,
        "resolvConf": "",
        "podLogsDir": str(p.pod_logs),
        "rotateCertificates": False,
        "serializeImagePulls": True,
        "maxPods": 40,
        # Images are imported, never pulled: never garbage-collect them for disk usage on a shared disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
    }


def kubelet_argv(kubelet: Path, p: Paths, config: Path, kubeconfig: Path) -> list[str]:
    return [
        str(kubelet),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={p.kubelet_dir}",
        f"--cert-dir={p.kubelet_dir / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",
        f"--node-labels={LABEL}=true",
        "--v=1",
    ]


def containerd_argv(containerd: str, config: Path) -> list[str]:
    return [containerd, f"--config={config}", "--log-level=warn"]


def holder_script(p: Paths) -> str:
    """Run under ``unshare --mount --net --propagation private`` (the caller then execs a named sleep).

    Inside the new network namespace: loopback, the bridge with the node IP, the Service IP on loopback.
    Inside the new mount namespace: ``/proc/sys`` read-only except ``net`` (per network namespace), with
    kubelet's tunables masked. Every process of the node joins these namespaces (``nsenter -t``); when the
    last one exits they vanish with everything mounted in them."""
    lines = [
        "set -eu",
        "ip link set lo up",
        f"ip addr add {SERVICE_IP}/32 dev lo",
        f"ip link add {BRIDGE} type bridge",
        f"ip addr add {NODE_IP}/24 dev {BRIDGE}",
        f"ip link set {BRIDGE} up",
        # Fixed paths kubelet, containerd, runc and CNI write regardless of their settings (kubelet's
        # /var/log/containers symlinks, libcni's /var/lib/cni cache, runc's /run/containerd/runc): private
        # tmpfs here, so nothing lands on the host's disk and it all vanishes with the namespace.
        "mount -t tmpfs -o mode=0755 agentrun-node-run /run",
        "mount -t tmpfs -o mode=0755 agentrun-node-varlog /var/log",
        "mount -t tmpfs -o mode=0755 agentrun-node-varlib /var/lib",
        "mount --bind /proc/sys /proc/sys",
        "mount -o remount,bind,ro /proc/sys",
        "mount --bind /proc/sys/net /proc/sys/net",
        "mount -o remount,bind,rw /proc/sys/net",
    ]
    for name in KUBELET_SYSCTLS:
        f = shlex.quote(str(p.sysctl_dir / name.replace("/", ".")))
        lines += [f"mount --bind {f} /proc/sys/{name}", f"mount -o remount,bind,ro /proc/sys/{name}"]
    lines += ["echo ready"]
    return "\n".join(lines) + "\n"


def dump_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


def dump_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2) + "\n"
