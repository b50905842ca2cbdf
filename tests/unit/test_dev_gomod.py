from __future__ import annotations

import pytest

from agentrun_dev import gomod

KUBE_GOMOD = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tk8s.io/api v0.0.0
\tgithub.com/foo/bar v1.2.3
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver
\tgithub.com/other => github.com/fork v1.0.0
)

replace k8s.io/kubelet => ./staging/src/k8s.io/kubelet
"""


def test_staging_modules_are_exactly_the_local_replaces() -> None:
    assert gomod.staging_modules(KUBE_GOMOD) == ["k8s.io/api", "k8s.io/apiserver", "k8s.io/kubelet"]


def test_wrapper_maps_each_staging_module_to_its_tag() -> None:
    text = gomod.kubernetes_wrapper(KUBE_GOMOD, "v1.37.2", "v0.37.2")
    assert "require k8s.io/kubernetes v1.37.2" in text
    assert "\tk8s.io/apiserver => k8s.io/apiserver v0.37.2" in text
    assert "\tk8s.io/kubelet => k8s.io/kubelet v0.37.2" in text
    assert "github.com/fork" not in text
    assert "\ngo 1.26.0\n" in text


def test_wrapper_refuses_a_gomod_without_staging() -> None:
    with pytest.raises(ValueError):
        gomod.kubernetes_wrapper("module x\n\ngo 1.22\n", "v1.37.2", "v0.37.2")


def test_version_tuple_and_ldflags() -> None:
    assert gomod.version_tuple("go1.26.8") == (1, 26, 8)
    assert gomod.version_tuple("1.26") == (1, 26, 0)
    assert gomod.version_tuple("go1.26.8") >= gomod.version_tuple("1.26.0")
    flags = gomod.k8s_ldflags("v1.37.2")
    assert "gitVersion=v1.37.2" in flags and "gitMinor=37" in flags and "gitMajor=1" in flags


def test_tools_go_has_build_tag_and_imports() -> None:
    text = gomod.tools_go(["k8s.io/kubernetes/cmd/kube-apiserver"])
    assert text.startswith("//go:build tools\n")
    assert '_ "k8s.io/kubernetes/cmd/kube-apiserver"' in text


def test_containerd_is_pinned_and_builds_what_the_node_runs() -> None:
    # A full version (the build is cached by it via the node's bin dir), the daemon, its runc shim, ctr.
    assert gomod.version_tuple(gomod.CONTAINERD_VERSION) >= (2, 0, 0)
    assert set(gomod.CONTAINERD_TARGETS) == {"containerd", "containerd-shim-runc-v2", "ctr"}
    assert gomod.containerd_gomod("1.26.8") == "module agentrun.dev/containerd-build\n\ngo 1.26.8\n"
