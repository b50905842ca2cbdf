"""The second API server (``agentrun dev apiserver``): the default one's flags with its own port, etcd key
prefix and cert dir, and its binary cached apart from the default control plane's."""

from __future__ import annotations

from pathlib import Path

import yaml
from test_dev_components import CERTS, P, S

from agentrun_dev import components, controlplane, second_apiserver
from agentrun_dev import settings as dev_settings


def test_flags_are_the_default_servers_with_its_own_port_prefix_and_cert_dir() -> None:
    argv = second_apiserver.argv(Path("/c/kube-apiserver"), S, "v1.34.4", CERTS, P, 9443)
    default = components.apiserver(Path("/c/kube-apiserver"), S, P, CERTS)
    assert "--secure-port=9443" in argv and "--secure-port=4" not in argv
    assert "--cert-dir=/st/kube-apiserver-v1.34" in argv
    assert argv[-1] == "--etcd-prefix=/registry-v1.34"  # nothing of the default server's is seen
    assert "--etcd-servers=https://127.0.0.1:1" in argv  # the dev cluster's etcd, shared
    same = [a for a in default if not a.startswith(("--secure-port=", "--cert-dir="))]
    assert [a for a in argv if a in same] == same  # every other flag as the default server has it
    assert len(argv) == len(default) + 1


def test_names_and_cache_are_its_own() -> None:
    assert second_apiserver.minor("v1.34.4") == "v1.34"
    assert second_apiserver.part_name("v1.34.4") == "kube-apiserver-v1.34"
    assert second_apiserver.kubeconfig(S, "v1.34.4") == Path("/st/kubeconfig-v1.34")
    assert controlplane.apiserver_dir(S, "v1.34.4") == Path("/ca/controlplane/v1.34.4-apiserver")
    assert controlplane.apiserver_dir(S, "v1.34.4") != S.controlplane_dir


def test_a_kubeconfig_is_pointed_at_it(tmp_path: Path) -> None:
    doc = {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:4", "x": 1}}], "users": []}
    src = tmp_path / "alice.kubeconfig"
    src.write_text(yaml.safe_dump(doc))
    s = dev_settings.from_env({"HOME": "/h", "AGENTRUN_DEV_HOME": str(tmp_path)})
    out = second_apiserver.for_server(src, s)
    got = yaml.safe_load(out.read_text())
    port = second_apiserver.port(s)
    assert got["clusters"][0]["cluster"] == {"server": f"https://127.0.0.1:{port}", "x": 1}
    assert out.name == "alice-v1.34.kubeconfig" and out.stat().st_mode & 0o777 == 0o600
