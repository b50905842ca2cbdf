"""The real node's pure parts: cgroup placement, the quirk settings, forwarder specs, the pause image."""

from __future__ import annotations

import argparse
import io
import json
import socket
import tarfile
import threading
from pathlib import Path

import pytest

from agentrun_dev.node import config, forward, host, image, ociimage

PROC_CGROUP = """9:name=systemd:/
8:pids:/
4:memory:/process_api/abc
3:cpuset:/
1:cpu:/
0::/
"""


def test_cgroup_root_nests_under_every_controller_path_never_at_a_root() -> None:
    assert host.parse_proc_cgroup(PROC_CGROUP) == {
        "name=systemd": "/", "pids": "/", "memory": "/process_api/abc", "cpuset": "/", "cpu": "/"
    }  # fmt: skip
    root = host.node_cgroup_root("n1", PROC_CGROUP)
    assert root == "/process_api/abc/agentrun-node-n1"
    assert host.node_cgroup_root("n1", "4:memory:/\n1:cpu:/\n") == "/agentrun-node-n1"


def test_cgroups_that_do_not_nest_are_refused() -> None:
    with pytest.raises(host.HostError, match="do not nest"):
        host.deepest_common({"memory": "/a/b", "cpu": "/c"})


def test_kubelet_config_carries_each_quirk(tmp_path: Path) -> None:
    p = config.Paths(tmp_path)
    cfg = config.kubelet_config(p, "/x/agentrun-node-1", tmp_path / "ca.crt")
    assert cfg["failCgroupV1"] is False
    assert cfg["makeIPTablesUtilChains"] is False
    assert cfg["oomScoreAdj"] == 0
    assert cfg["cgroupRoot"] == "/x/agentrun-node-1"
    assert cfg["address"] == config.NODE_IP and not config.NODE_IP.startswith("127.")
    assert cfg["registerWithTaints"] == [{"key": config.TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    toml = config.containerd_toml(p, "/usr/sbin/runc", Path("/usr/lib/cni"))
    assert "restrict_oom_score_adj = true" in toml
    assert 'BinaryName = "/usr/sbin/runc"' in toml
    assert "netns_mounts_under_state_dir = true" in toml
    assert str(tmp_path) in toml and "/var/lib/containerd" not in toml


def test_cni_has_no_masquerade_and_keeps_its_data_in_state(tmp_path: Path) -> None:
    bridge = config.cni_conflist(config.Paths(tmp_path))["plugins"][0]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))


def test_holder_masks_every_kubelet_sysctl_read_only(tmp_path: Path) -> None:
    script = config.holder_script(config.Paths(tmp_path))
    for name in config.KUBELET_SYSCTLS:
        assert f"mount -o remount,bind,ro /proc/sys/{name}" in script
    assert "mount -o remount,bind,ro /proc/sys\n" in script


def test_forward_map_parsing() -> None:
    assert forward.parse_map("10.213.0.1:5432=127.0.0.1:4000") == (("10.213.0.1", 5432), ("127.0.0.1", 4000))
    with pytest.raises(argparse.ArgumentTypeError, match="LISTEN_IP:PORT=TARGET_IP:PORT"):
        forward.parse_map("10.213.0.1:5432")


def test_pause_archive_is_a_deterministic_oci_layout() -> None:
    a = ociimage.single_binary(b"\x7fELF-fake", "/pause", "agentrun.local/pause:1")
    assert a == ociimage.single_binary(b"\x7fELF-fake", "/pause", "agentrun.local/pause:1")
    with tarfile.open(fileobj=io.BytesIO(a)) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
    assert "oci-layout" in names and len([n for n in names if n.startswith("blobs/sha256/")]) == 3
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "agentrun.local/pause:1"


def test_base_image_key_changes_with_its_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    key = image.base_key()
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "curl"))
    assert image.base_key() != key


def test_the_pod_runtime_leaves_pods_for_the_real_node_to_kube_scheduler() -> None:
    """The documented split: a Pod selecting the real node does not match the pod runtime's node labels."""
    from agentrun_dev.podruntime import node as rt_node
    from agentrun_dev.podruntime import runtime
    from agentrun_dev.podruntime import settings as rt_settings

    rt = rt_settings.Settings(kubeconfig=Path("/nonexistent"), state_dir=Path("/nonexistent"))
    labels = rt_node.node_body(rt, 0)["metadata"]["labels"]
    real = {"spec": {"nodeSelector": {config.LABEL: "true"}}}
    assert not runtime.selector_matches(real, labels)
    assert runtime.selector_matches({"spec": {}}, labels)


def test_pods_that_may_run_on_either_node_are_left_to_kube_scheduler() -> None:
    """A Pod tolerating the real node's taint may go to either node: kube-scheduler (which honours affinity,
    e.g. the operator's preference away from a lost node) places it, not the pod runtime's own binding."""
    from agentrun_dev.podruntime import runtime

    assert runtime.REAL_NODE_TAINT == config.TAINT_KEY
    either = {"spec": {"tolerations": [{"key": config.TAINT_KEY, "operator": "Exists"}]}}
    assert runtime.left_to_scheduler(either)
    assert not runtime.left_to_scheduler({"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}})
    assert not runtime.left_to_scheduler({"spec": {}})


def test_forwarder_pumps_both_ways_and_half_closes() -> None:
    """The node's TCP forwarder, on loopback (no namespace needed): bytes both ways, EOF passed on."""
    target = socket.create_server(("127.0.0.1", 0))
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=forward._serve, args=(listener, target.getsockname()), daemon=True).start()
    with socket.create_connection(listener.getsockname(), timeout=30) as client:
        target.settimeout(30)
        upstream, _ = target.accept()
        with upstream:
            client.sendall(b"ping")
            client.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := upstream.recv(100):
                got += chunk
            assert got == b"ping"  # and the EOF arrived: recv returned b""
            upstream.sendall(b"pong")
            upstream.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := client.recv(100):
            got += chunk
        assert got == b"pong"
    target.close()
