"""The runtime: register the node, list+watch Pods, bind the unscheduled, hand ours to :class:`PodWorker` s.

Threads: the watch (dispatch), the node heartbeat, one per live pod, and the main thread, which ticks: it
reads the control channel, scans ``/proc`` once for everyone, acknowledges control changes once every worker
applied them, and retries deletions of finished pods.

Shutdown (SIGTERM/SIGINT): every pod process tree is SIGKILLed and nothing is written to the API — the node
simply disappears, as if kubelet and the container runtime died together. A later start finds those pods
with no process and reports them ``ContainerStatusUnknown`` (exit 137), then honours their restartPolicy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from agentrun_core.api import status as api_status
from agentrun_dev.podruntime import control, kubeapi, logserver, node, podworker, processes, proctable
from agentrun_dev.podruntime import settings as settings_mod

log = logging.getLogger(__name__)
Obj = dict[str, Any]


UNSCHEDULABLE_MESSAGE = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."


# The real node's taint (agentrun_dev.node.config.TAINT_KEY; not imported: no node code in the pod runtime).
REAL_NODE_TAINT = "agentrun.dev/real-node"


def selector_matches(pod: Obj, labels: Mapping[str, str]) -> bool:
    sel = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(k) == v for k, v in sel.items())


def left_to_scheduler(pod: Obj) -> bool:
    """A Pod that tolerates the real node's taint may run on either node: kube-scheduler, which sees both
    and honours affinity (this runtime does not), places it. Only such Pods run on both nodes (the lost-node
    benchmark's); without the real node (no kube-scheduler) they stay Pending."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or ()
    return any(t.get("key") == REAL_NODE_TAINT for t in tolerations)


class Runtime:
    def __init__(self, s: settings_mod.Settings) -> None:
        self.workers: dict[str, podworker.PodWorker] = {}
        self.lock = threading.Lock()
        # pods/log through the API server reaches this endpoint (the node's kubeletEndpoint port).
        self.logs = logserver.LogServer(s.pods_dir, s.pki_dir, s.node_name, self._pod_running)
        s = dataclasses.replace(s, kubelet_port=self.logs.port)
        self.s = s
        self.kube = kubeapi.Kube(str(s.kubeconfig))
        self.stop = threading.Event()
        self._control = control.State()
        self._control_mtime = -1
        self._table: Mapping[int, proctable.Proc] = {}
        self.pending_deletes: dict[str, tuple[str, str]] = {}
        self.heartbeat = node.Heartbeat(self.kube, s, frozen=lambda: self._control.frozen)
        self.node_labels = node.node_body(s, 0)["metadata"]["labels"]
        resources = node.status_body(s, 0, 0)["allocatable"]
        self.ctx = podworker.Context(
            kube=self.kube,
            s=s,
            control=lambda: self._control,
            table=lambda: self._table,
            allocatable=dict(resources),
        )

    def _pod_running(self, namespace: str, name: str) -> bool:
        """A Pod of this node whose worker has not finished (its containers may still write their logs)."""
        with self.lock:
            workers = list(self.workers.values())
        return any(w.ns == namespace and w.name == name and not w.finished.is_set() for w in workers)

    # --- main --------------------------------------------------------------------------------------------
    def run(self) -> int:
        self.logs.start()
        self.s.podruntime_dir.mkdir(parents=True, exist_ok=True)
        self.s.pods_dir.mkdir(parents=True, exist_ok=True)
        (self.s.podruntime_dir / control.RUNTIME).write_text(
            json.dumps({"pid": os.getpid(), "started": time.time()})
        )
        killed = processes.kill_orphans(self.s.procs_dir)
        if killed:
            log.warning("killed %d container process group(s) left by a previous runtime", killed)
        self._read_control()
        while not self.stop.is_set():
            try:
                self.heartbeat.register()
                break
            except Exception as e:
                log.warning("cannot register the node yet (%s); retrying", e)
                self.stop.wait(1.0)
        threads = [
            threading.Thread(target=self.heartbeat.run, name="heartbeat", daemon=True),
            threading.Thread(target=self._watch_loop, name="watch", daemon=True),
        ]
        for t in threads:
            t.start()
        log.info("pod runtime for node %s running (state %s)", self.s.node_name, self.s.state_dir)
        while not self.stop.is_set():
            self._tick()
            self.stop.wait(self.s.tick_s)
        self._shutdown()
        return 0

    def request_stop(self, *_: object) -> None:
        self.stop.set()

    def _shutdown(self) -> None:
        self.heartbeat.stop.set()
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.shutting_down = True
        for w in workers:
            w.finished.wait(self.s.kill_wait_s)
        self.logs.stop()
        log.info("pod runtime stopped; %d pod worker(s) killed", len(workers))

    def _tick(self) -> None:
        self._read_control()
        with self.lock:
            workers = list(self.workers.values())
        if any(w.has_processes for w in workers):
            self._table = proctable.scan()
        gen = self._control.generation
        applied = all(w.applied_generation >= gen or w.finished.is_set() for w in workers)
        if applied and control.acked_generation(self.s.state_dir) != gen:
            control.write_ack(self.s.podruntime_dir, gen)
        if not self._control.frozen and self.pending_deletes:
            self._retry_deletes()

    def _read_control(self) -> None:
        path = self.s.podruntime_dir / control.CONTROL
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._control_mtime:
            return
        try:
            new = control.State.from_json(path.read_text())
        except (OSError, ValueError):
            return  # half-written: the writer renames atomically, so this is someone else's junk
        self._control_mtime = mtime
        if new != self._control:
            log.info(
                "control: frozen=%s frozen_pods=%s (generation %d)",
                new.frozen,
                sorted(new.frozen_pods),
                new.generation,
            )
        self._control = new

    def _retry_deletes(self) -> None:
        for uid, (ns, name) in list(self.pending_deletes.items()):
            try:
                self.kube.delete_pod_now(ns, name, uid)
            except kubeapi.KubeError as e:
                if e.status not in (404, 409):
                    log.warning("pod %s/%s: delete failed: %s", ns, name, e)
                    continue
            self.pending_deletes.pop(uid, None)

    # --- watch and dispatch -------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        while not self.stop.is_set():
            try:
                listing = self.kube.list_pods()
                rv = listing["metadata"]["resourceVersion"]
                self._sync_all(listing.get("items") or [])
                while not self.stop.is_set():
                    for ev in self.kube.watch_pods(rv, self.s.watch_timeout_s):
                        obj = ev.get("object") or {}  # an ERROR event is raised by watch_pods
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if ev.get("type") != "BOOKMARK":
                            self._handle(str(ev.get("type")), obj)
            except kubeapi.KubeError as e:
                if e.status != 410:
                    log.warning("pod watch failed: %s; re-listing", e)
                    self.stop.wait(1.0)
            except Exception:
                log.exception("pod watch failed; re-listing")
                self.stop.wait(1.0)

    def _sync_all(self, items: list[Obj]) -> None:
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["uid"])
            self._handle("SYNC", pod)
        with self.lock:
            vanished = [uid for uid in self.workers if uid not in seen]
        for uid in vanished:
            self._handle("DELETED", {"metadata": {"uid": uid}})

    def _handle(self, type_: str, pod: Obj) -> None:
        try:
            self._dispatch(type_, pod)
        except Exception:
            meta = pod.get("metadata") or {}
            log.exception("pod %s/%s: dispatch failed", meta.get("namespace"), meta.get("name"))

    def _dispatch(self, type_: str, pod: Obj) -> None:
        meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        uid = meta["uid"]
        if type_ == "DELETED":
            with self.lock:
                w = self.workers.pop(uid, None)
            self.pending_deletes.pop(uid, None)
            if w is not None:
                w.mark_gone()
            return
        node_name = spec.get("nodeName")
        if not node_name:
            if not self.s.bind or meta.get("deletionTimestamp") or st.get("phase") in api_status.POD_TERMINAL:
                return
            if left_to_scheduler(pod):
                return
            if not selector_matches(pod, self.node_labels):
                log.info(
                    "pod %s/%s: nodeSelector does not match this node; left Pending",
                    meta["namespace"],
                    meta["name"],
                )
                self._unschedulable(pod)
                return
            # No scheduler runs: this runtime is also the scheduler for its one node.
            try:
                self.kube.bind(meta["namespace"], meta["name"], uid, self.s.node_name)
            except kubeapi.KubeError as e:
                if e.status != 409:
                    raise
            return  # the "Scheduled" story is the PodScheduled condition the binding sets
        if node_name != self.s.node_name:
            return
        with self.lock:
            w = self.workers.get(uid)
            if w is None and st.get("phase") not in api_status.POD_TERMINAL and not self._orphan_deleted(pod):
                w = podworker.PodWorker(self.ctx, pod)
                self.workers[uid] = w
                w.start()
                return
        if w is not None:
            w.update(pod)
            if not w.finished.is_set():
                return
        if meta.get("deletionTimestamp"):
            # A finished pod (or one whose worker ended) being deleted: nothing runs, just remove it.
            self.pending_deletes[uid] = (meta["namespace"], meta["name"])
            if not self._control.frozen:
                self._retry_deletes()

    def _unschedulable(self, pod: Obj) -> None:
        """Say so the way kube-scheduler does: ``PodScheduled=False``, reason ``Unschedulable`` (once)."""
        meta = pod.get("metadata") or {}
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return
        cond = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": UNSCHEDULABLE_MESSAGE,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        try:
            # Only the version we judged: a Pod kube-scheduler bound meanwhile (real node) is left alone.
            self.kube.patch_pod_status(
                meta["namespace"],
                meta["name"],
                meta["uid"],
                {"conditions": [cond]},
                resource_version=str(meta.get("resourceVersion") or ""),
            )
        except kubeapi.KubeError as e:
            log.info("pod %s/%s: could not report Unschedulable: %s", meta["namespace"], meta["name"], e)

    def _orphan_deleted(self, pod: Obj) -> bool:
        """Deleted, never started by us, no process: no worker needed, only the removal."""
        meta, st = pod["metadata"], pod.get("status") or {}
        return (
            bool(meta.get("deletionTimestamp"))
            and not st.get("containerStatuses")
            and not st.get("startTime")
        )


def install_signal_handlers(rt: Runtime) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError):
            signal.signal(sig, rt.request_stop)
