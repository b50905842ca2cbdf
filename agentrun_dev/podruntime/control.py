"""Lost-node and hung-pod simulation: a file channel between tests (or ``agentrun dev node``) and the runtime.

``<state>/podruntime/control.json`` holds the wanted state ``{"generation", "frozen", "frozen_pods"}``; the
runtime polls it every tick, applies it (SIGSTOP/SIGCONT, stop/resume its API writes) and answers in
``control-ack.json`` with the generation it applied. The functions here write the wish and, by default, wait
for that answer, so when ``freeze()`` returns the pod processes are stopped.

* ``freeze`` — the node looks lost: every pod process is SIGSTOPped, the node's Lease and status and all pod
  statuses stop being written, deletions are not acted on. ``thaw`` undoes it (SIGCONT, writes resume).
* ``freeze_pod NS/POD`` — one hung pod: its processes are SIGSTOPped, it is still reported ``Running``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

CONTROL = "control.json"
ACK = "control-ack.json"
RUNTIME = "runtime.json"


class NotRunning(Exception):
    """The runtime did not acknowledge the change in time (it is not running, or stuck)."""


@dataclasses.dataclass(frozen=True)
class State:
    generation: int = 0
    frozen: bool = False
    frozen_pods: frozenset[str] = frozenset()
    """``namespace/name`` of hung pods."""

    def to_json(self) -> str:
        return json.dumps(
            {"generation": self.generation, "frozen": self.frozen, "frozen_pods": sorted(self.frozen_pods)}
        )

    @classmethod
    def from_json(cls, text: str) -> State:
        d = json.loads(text)
        return cls(int(d.get("generation", 0)), bool(d.get("frozen")), frozenset(d.get("frozen_pods") or ()))


def runtime_dir(state_dir: Path | str | None) -> Path:
    from agentrun_dev import settings as dev_settings

    if state_dir is None:
        return dev_settings.from_env().podruntime_dir
    return dev_settings.StateLayout(Path(state_dir)).podruntime_dir


def read(state_dir: Path | str | None = None) -> State:
    path = runtime_dir(state_dir) / CONTROL
    try:
        return State.from_json(path.read_text())
    except (OSError, ValueError):
        return State()


def acked_generation(state_dir: Path | str | None = None) -> int:
    try:
        return int(json.loads((runtime_dir(state_dir) / ACK).read_text())["generation"])
    except (OSError, ValueError, KeyError):
        return -1


def write_ack(rdir: Path, generation: int) -> None:
    tmp = rdir / (ACK + ".tmp")
    tmp.write_text(json.dumps({"generation": generation, "pid": os.getpid(), "at": time.time()}))
    tmp.replace(rdir / ACK)


@contextlib.contextmanager
def _locked(rdir: Path) -> Iterator[None]:
    rdir.mkdir(parents=True, exist_ok=True)
    with open(rdir / "control.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _change(state_dir: Path | str | None, wait_s: float | None, update: Callable[[State], State]) -> State:
    """Read-modify-write under a file lock (several test sessions share one runtime), then await the ack."""
    rdir = runtime_dir(state_dir)
    with _locked(rdir):
        cur = read(state_dir)
        new = dataclasses.replace(update(cur), generation=cur.generation + 1)
        tmp = rdir / (CONTROL + ".tmp")
        tmp.write_text(new.to_json())
        tmp.replace(rdir / CONTROL)
    if wait_s:
        deadline = time.monotonic() + wait_s
        while acked_generation(state_dir) < new.generation:
            if time.monotonic() > deadline:
                raise NotRunning(
                    f"pod runtime did not apply control generation {new.generation} in {wait_s}s"
                )
            time.sleep(0.05)
    return new


def _pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def freeze(state_dir: Path | str | None = None, *, wait_s: float | None = 10.0) -> State:
    return _change(state_dir, wait_s, lambda s: dataclasses.replace(s, frozen=True))


def thaw(state_dir: Path | str | None = None, *, wait_s: float | None = 10.0) -> State:
    return _change(state_dir, wait_s, lambda s: dataclasses.replace(s, frozen=False))


def freeze_pod(
    namespace: str, name: str, state_dir: Path | str | None = None, *, wait_s: float | None = 10.0
) -> State:
    key = _pod_key(namespace, name)
    return _change(state_dir, wait_s, lambda s: dataclasses.replace(s, frozen_pods=s.frozen_pods | {key}))


def thaw_pod(
    namespace: str, name: str, state_dir: Path | str | None = None, *, wait_s: float | None = 10.0
) -> State:
    key = _pod_key(namespace, name)
    return _change(state_dir, wait_s, lambda s: dataclasses.replace(s, frozen_pods=s.frozen_pods - {key}))


def thaw_namespace(
    namespace: str, state_dir: Path | str | None = None, *, wait_s: float | None = 10.0
) -> State:
    """Thaw every hung pod of one namespace, and only those: a test's teardown. Other tests share the node
    (the parallel part of ``make test``); a teardown that thawed their pods would un-hang a worker whose
    Lease expiry they are waiting for."""
    prefix = _pod_key(namespace, "")

    def others(s: State) -> State:
        kept = frozenset(k for k in s.frozen_pods if not k.startswith(prefix))
        return dataclasses.replace(s, frozen_pods=kept)

    return _change(state_dir, wait_s, others)


def reset(state_dir: Path | str | None = None, *, wait_s: float | None = 10.0) -> State:
    """Thaw the node and every pod, whoever froze them (``agentrun dev node reset``; never a test's
    teardown while other tests share the node: ``thaw_namespace``)."""
    return _change(state_dir, wait_s, lambda s: State(s.generation))


def main(argv: list[str]) -> int:
    """``agentrun dev node {freeze,thaw,freeze-pod NS/POD,thaw-pod NS/POD,reset,status}``."""
    p = argparse.ArgumentParser(prog="agentrun dev node", description="simulate a lost node or a hung pod")
    p.add_argument("--state-dir", default=None, help="dev-cluster state dir (default: $AGENTRUN_DEV_HOME)")
    p.add_argument("--no-wait", action="store_true", help="do not wait for the runtime to apply it")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the runtime (default 10)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("freeze", help="SIGSTOP all pods, stop node/lease/pod status updates")
    sub.add_parser("thaw", help="undo freeze")
    for name in ("freeze-pod", "thaw-pod"):
        sp = sub.add_parser(name, help=f"{name.split('-')[0]} one pod's processes (NS/POD)")
        sp.add_argument("pod", metavar="NS/POD")
    sub.add_parser("reset", help="thaw the node and all pods")
    sub.add_parser("status", help="print the control state")
    a = p.parse_args(argv)
    wait = None if a.no_wait else a.timeout
    try:
        if a.cmd == "status":
            st = read(a.state_dir)
            print(
                json.dumps(
                    {
                        "frozen": st.frozen,
                        "frozen_pods": sorted(st.frozen_pods),
                        "generation": st.generation,
                        "applied": acked_generation(a.state_dir),
                    }
                )
            )
            return 0
        if a.cmd in {"freeze-pod", "thaw-pod"}:
            ns, sep, pod = a.pod.partition("/")
            if not sep or not ns or not pod:
                print("expected NS/POD", file=sys.stderr)
                return 2
            fn = freeze_pod if a.cmd == "freeze-pod" else thaw_pod
            fn(ns, pod, a.state_dir, wait_s=wait)
        else:
            {"freeze": freeze, "thaw": thaw, "reset": reset}[a.cmd](a.state_dir, wait_s=wait)
    except NotRunning as e:
        print(f"agentrun dev node: {e}", file=sys.stderr)
        return 1
    print(f"{a.cmd}: done")
    return 0
