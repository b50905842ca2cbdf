"""Pure parts of the dev cluster: settings from the environment, process command lines, kubeconfigs, hints."""

from __future__ import annotations

import base64
from pathlib import Path

from agentrun_dev import components, controlplane, identities, pki
from agentrun_dev import settings as dev_settings

S = dev_settings.from_env({"HOME": "/home/u", "AGENTRUN_DEV_HOME": "/st", "AGENTRUN_CACHE_DIR": "/ca"})
P = components.Ports(
    etcd=1, etcd_peer=2, etcd_metrics=3, apiserver=4, controller_manager=5, smtp=6, smtp_api=7, postgres=8
)
CERTS = pki.PKI(
    ca=pki.Pair(Path("/p/ca.crt"), Path("/p/ca.key")), apiserver=pki.Pair(Path("/p/a.crt"), Path("/p/a.key")),
    sa_key=Path("/p/sa.key"), sa_pub=Path("/p/sa.pub"), etcd=pki.Pair(Path("/p/e.crt"), Path("/p/e.key")),
    etcd_client=pki.Pair(Path("/p/ec.crt"), Path("/p/ec.key")),
    front_proxy=pki.Pair(Path("/p/fp.crt"), Path("/p/fp.key")),
)  # fmt: skip


def test_settings_defaults_and_overrides() -> None:
    d = dev_settings.from_env({"HOME": "/home/u"})
    assert d.state_dir == Path("/home/u/.local/state/agentrun/dev")
    assert d.controlplane_dir == Path("/home/u/.cache/agentrun/controlplane/v1.37.2-etcd3.6.16")
    assert d.kubebuilder_assets is None
    assert S.state_dir == Path("/st") and S.cache_dir == Path("/ca")
    assert dev_settings.from_env({"HOME": "/h", "KUBEBUILDER_ASSETS": "/kb"}).kubebuilder_assets == Path(
        "/kb"
    )


def test_apiserver_flags_make_a_real_cluster() -> None:
    argv = components.apiserver(Path("/b/kube-apiserver"), S, P, CERTS)
    assert argv[0] == "/b/kube-apiserver"
    assert "--authorization-mode=Node,RBAC" in argv
    assert "--client-ca-file=/p/ca.crt" in argv
    assert "--service-account-signing-key-file=/p/sa.key" in argv
    assert "--service-account-key-file=/p/sa.pub" in argv
    assert "--etcd-servers=https://127.0.0.1:1" in argv
    assert "--secure-port=4" in argv and "--bind-address=127.0.0.1" in argv
    assert not any(a.startswith("--disable-admission-plugins") for a in argv)  # PodSecurity etc. stay on
    assert not any("AlwaysAllow" in a for a in argv)


def test_controller_manager_flags() -> None:
    argv = components.controller_manager(Path("/b/kcm"), S, P, CERTS, Path("/k/kcm.kubeconfig"))
    assert "--use-service-account-credentials=true" in argv
    assert "--leader-elect=false" in argv
    assert "--service-account-private-key-file=/p/sa.key" in argv
    assert "--controllers=*" in argv


def test_etcd_listens_only_on_loopback_with_client_certs() -> None:
    argv = components.etcd(Path("/b/etcd"), S, P, CERTS)
    assert "--listen-client-urls=https://127.0.0.1:1" in argv
    assert "--client-cert-auth=true" in argv
    assert f"--data-dir={S.etcd_dir}" in argv


def test_env_exports_contract() -> None:
    env = components.env_exports(S, P, "postgresql://postgres@127.0.0.1:8/agentrun")
    assert env == {
        "KUBECONFIG": "/st/kubeconfig",
        "AGENTRUN_DSN": "postgresql://postgres@127.0.0.1:8/agentrun",
        "AGENTRUN_SMTP_HOST": "127.0.0.1",
        "AGENTRUN_SMTP_PORT": "6",
        "AGENTRUN_SMTP_API": "http://127.0.0.1:7",
        "AGENTRUN_DEV_HOME": "/st",
    }


def test_kubeconfig_embeds_credentials() -> None:
    doc = identities.kubeconfig_dict("https://127.0.0.1:4", b"CA", b"CERT", b"KEY", "alice")
    user = doc["users"][0]["user"]
    assert base64.b64decode(user["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]) == b"CA"
    assert doc["current-context"] == doc["contexts"][0]["name"]
    assert identities.safe_name("system:kube-controller-manager", ()) == "system-kube-controller-manager"
    assert identities.safe_name("alice", ["devs", "qa"]) == "alice_devs_qa"


def test_build_failure_hints() -> None:
    assert "proxy" in controlplane.hint_for("dial tcp 1.2.3.4:443: i/o timeout")
    assert "too old" in controlplane.hint_for("go: go.mod requires go >= 1.27 (running go 1.22)")
    assert "disk" in controlplane.hint_for("write /x: no space left on device")
    assert "agentrun dev build" in controlplane.hint_for("something else")
    err = controlplane.BuildError("compile", ["go", "build"], "tail", "fix it")
    assert "go build" in str(err) and "fix it" in str(err) and "tail" in str(err)
