"""Pure text for the Go wrapper modules that build the control plane (no I/O; unit-tested).

``k8s.io/kubernetes`` is not meant to be a dependency: its go.mod maps every staging module (``k8s.io/api``,
``k8s.io/apiserver``, …) to ``./staging/src/…`` directories that do not exist outside its own repository. A
wrapper module that requires it must map each of those modules to its published ``v0.<minor>.<patch>`` tag;
the list is taken from the downloaded kubernetes go.mod so it is always complete for that version.
"""

from __future__ import annotations

import re

_STAGING_RE = re.compile(r"^\s*(?:replace\s+)?(\S+)\s*=>\s*\./staging/src/(\S+)\s*$", re.MULTILINE)
_GO_RE = re.compile(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)

K8S_TARGETS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    # The real node (agentrun_dev.node): built the same way, into a cache directory of their own.
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
}
ETCD_MODULE = "go.etcd.io/etcd/server/v3"


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """Module paths that kubernetes' own go.mod replaces with ``./staging/src/…`` directories, sorted."""
    return sorted({m.group(1) for m in _STAGING_RE.finditer(kubernetes_gomod)})


def go_directive(gomod: str) -> str | None:
    m = _GO_RE.search(gomod)
    return m.group(1) if m else None


def version_tuple(v: str) -> tuple[int, ...]:
    """``go1.26.8`` / ``1.26`` / ``1.26.0`` -> ``(1, 26, 8)``; unparsable parts count as 0."""
    parts = re.findall(r"\d+", v)
    return tuple(int(p) for p in parts[:3]) + (0,) * (3 - min(3, len(parts)))


def kubernetes_wrapper(kubernetes_gomod: str, k8s_version: str, staging_version: str) -> str:
    """go.mod of the wrapper module: require kubernetes, replace each staging module by its tag."""
    mods = staging_modules(kubernetes_gomod)
    if not mods:
        raise ValueError(
            "kubernetes go.mod has no ./staging/src replace lines; not a k8s.io/kubernetes go.mod?"
        )
    go = go_directive(kubernetes_gomod) or "1.24"
    lines = [
        "module agentrun.dev/controlplane",
        "",
        f"go {go}",
        "",
        f"require k8s.io/kubernetes {k8s_version}",
        "",
        "replace (",
        *(f"\t{m} => {m} {staging_version}" for m in mods),
        ")",
        "",
    ]
    return "\n".join(lines)


def etcd_wrapper(etcd_version: str, go: str) -> str:
    return f"module agentrun.dev/etcdbuild\n\ngo {go}\n\nrequire {ETCD_MODULE} {etcd_version}\n"


def tools_go(imports: list[str]) -> str:
    """A never-built file whose blank imports make ``go mod tidy`` keep the packages we ``go build``."""
    body = "\n".join(f'\t_ "{imp}"' for imp in imports)
    return f"//go:build tools\n\npackage tools\n\nimport (\n{body}\n)\n"


def k8s_ldflags(k8s_version: str) -> str:
    """Stamp the version the binaries report (``--version``, ``/version``); otherwise they say v0.0.0."""
    major, minor, _ = version_tuple(k8s_version)
    pkg = "k8s.io/component-base/version"
    return (
        f"-s -w -X {pkg}.gitVersion={k8s_version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"
        f" -X {pkg}.gitTreeState=clean"
    )


PAUSE_GO = """// The pod sandbox's process: sleeps until told to stop, reaping orphans (it is PID 1).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
"""


def pause_gomod(go: str) -> str:
    return f"module agentrun.dev/pause\n\ngo {go}\n"


# The real node's container runtime: containerd 2 from its Go module (Debian bookworm's 1.6 is outside
# Kubernetes' support range since 1.36). Static (CGO_ENABLED=0: no btrfs/devmapper/zfs snapshotters, which the
# node disables anyway), built like pause in a wrapper module of its own.
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_VERSION = "v2.4.2"
CONTAINERD_TARGETS = {
    "containerd": "cmd/containerd",
    "containerd-shim-runc-v2": "cmd/containerd-shim-runc-v2",
    "ctr": "cmd/ctr",
}


def containerd_gomod(go: str) -> str:
    return f"module agentrun.dev/containerd-build\n\ngo {go}\n"
