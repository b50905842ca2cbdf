"""One pod's life on this node, in its own thread: configure, start, watch, restart, stop, report.

The thread ticks every ``tick_s``: apply freezes, reap exited processes and enforce memory limits, act on
deletion, start what is due, refresh the token, and patch the status when it differs from what the API holds.
Nothing here raises out of the thread: an unexpected error kills the pod's processes and reports it Failed.
This module runs the pod's processes; what the worker holds of the API's pod object and writes back to it
(status, events, token) is ``podsync.PodSync``, which ``PodWorker`` extends.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrun_core.api import status as status_words
from agentrun_dev.podruntime import (
    envresolve,
    kubeapi,
    model,
    podenv,
    podsync,
    processes,
    proctable,
    restarts,
    status,
)
from agentrun_dev.podruntime import settings as settings_mod

log = logging.getLogger(__name__)
Obj = dict[str, Any]

# What all pod workers share with the runtime, which builds it as ``podworker.Context``.
Context = podsync.Context


def memory_limit(container: Obj) -> int | None:
    raw = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if raw is None:
        return None
    return int(envresolve.quantity(str(raw)))


def recover(c: model.Container, api_status: Obj | None, policy: str, now: float, b: restarts.Backoff) -> None:
    """Take over a container a previous runtime instance ran: its process is gone (we killed orphans)."""
    if not api_status:
        return
    c.restart_count = int(api_status.get("restartCount") or 0)
    c.container_id = api_status.get("containerID")
    st = api_status.get("state") or {}
    last = (api_status.get("lastState") or {}).get("terminated")
    if last:
        c.last_state = model.terminated_from_api(last)
    if "running" in st:
        c.state = model.Running(model.parse_time(st["running"].get("startedAt")) or now)
        restarts.on_exit(c, restarts.recovered(c, now), policy, now, b)
    elif "terminated" in st:
        restarts.on_exit(c, model.terminated_from_api(st["terminated"]), policy, now, b)
    elif c.last_state is not None:
        c.state = model.Waiting("CrashLoopBackOff", "restarting after a pod runtime restart")
        c.restart_at = now


class PodWorker(podsync.PodSync):
    def __init__(self, ctx: Context, pod: Obj) -> None:
        self.ctx, self.s = ctx, ctx.s
        meta, spec = pod["metadata"], pod["spec"]
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.name: str = meta["name"]
        self.key = f"{self.ns}/{self.name}"
        self.policy: str = spec.get("restartPolicy") or "Always"
        self._pod = pod
        self._lock = threading.Lock()
        self.gone = False
        self.shutting_down = False
        self.finished = threading.Event()
        self.applied_generation = -1
        self.pod_dir = self.s.pods_dir / self.ns / self.name
        self.kubeconfig_path = self.pod_dir / ".kubeconfig"
        self.specs: dict[str, Obj] = {}
        self.limits: dict[str, int | None] = {}
        self.inits: list[model.Container] = []
        self.mains: list[model.Container] = []
        for key, init, bucket in (("initContainers", True, self.inits), ("containers", False, self.mains)):
            for c in spec.get(key) or []:
                self.specs[c["name"]] = c
                self.limits[c["name"]] = memory_limit(c)
                bucket.append(model.Container(name=c["name"], image=str(c.get("image", "")), init=init))
        self.procs: dict[str, processes.Process] = {}
        self.oom: set[str] = set()
        self.start_time = time.time()
        self.transitions = status.Transitions()
        self.phase_override: str | None = None
        self.deletion_seen: float | None = None
        self.sigkilled_at: float | None = None
        self.node_stopped = False
        self.pod_frozen = False
        self.token_refresh_at: float | None = None
        self.last_written: tuple[Any, ...] | None = None
        self.last_write_at = 0.0
        self.write_retry_at = 0.0
        self.thread = threading.Thread(target=self._run, name=f"pod:{self.key}", daemon=True)

    # --- called from the dispatcher -------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def mark_gone(self) -> None:
        self.gone = True

    @property
    def has_processes(self) -> bool:
        return bool(self.procs)

    # --- the thread -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._setup()
            while not self._tick(time.time()):
                time.sleep(self.s.tick_s)
        except Exception as e:
            log.exception("pod %s: runtime error", self.key)
            self._kill_all()
            self._emergency_status(e)
        finally:
            self.finished.set()

    def _setup(self) -> None:
        processes.prepare_pod_dir(self.pod_dir, self.uid)
        st = self.pod.get("status") or {}
        now = time.time()
        self.start_time = model.parse_time(st.get("startTime")) or now
        known = (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or [])
        by_name = {c["name"]: c for c in known}
        for c in self.inits + self.mains:
            recover(c, by_name.get(c.name), self.policy, now, self.s.backoff)
        if st.get("phase") in status_words.POD_TERMINAL:
            self.phase_override = st["phase"]

    def _tick(self, now: float) -> bool:
        """One step; True when the worker is done."""
        ctl = self.ctx.control()
        if self.shutting_down:
            self._kill_all()
            return True
        if ctl.frozen:
            # A lost node acts on nothing, not even a force-deleted pod: that waits for the thaw.
            if not self.node_stopped:
                self._signal_all(signal.SIGSTOP)
                self.node_stopped = True
            self.applied_generation = ctl.generation
            return False
        if self.gone:
            self._kill_all()
            return True
        want_frozen = self.key in ctl.frozen_pods
        if self.node_stopped or want_frozen != self.pod_frozen:
            self._signal_all(signal.SIGSTOP if want_frozen else signal.SIGCONT)
            self.node_stopped, self.pod_frozen = False, want_frozen
        self.applied_generation = ctl.generation

        self._reap(now, self.ctx.table())
        meta = self.pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return self._terminate(now, meta)
        if self.phase_override is None:
            self._start_due(now)
            self._refresh_token(now)
        in_sync = self._sync_status(now)
        # Done once terminal, with nothing running and the terminal status actually written.
        return self._phase() in status_words.POD_TERMINAL and not self.procs and in_sync

    # --- processes ------------------------------------------------------------------------------------------
    def _container(self, name: str) -> model.Container:
        return next(c for c in self.inits + self.mains if c.name == name)

    def _reap(self, now: float, table: Mapping[int, proctable.Proc]) -> None:
        for name, p in list(self.procs.items()):
            if p.pid in table:
                p.known = proctable.tree(table, p.pid)
            rc = p.popen.poll()
            if rc is None:
                limit = self.limits[name]
                if limit is not None and name not in self.oom and proctable.rss(table, p.known) > limit:
                    log.warning(
                        "pod %s container %s: over its memory limit %d, killing", self.key, name, limit
                    )
                    self.oom.add(name)
                    processes.signal_process(p, signal.SIGKILL)
                    self._event(
                        "OOMKilling",
                        f"Memory limit {limit} bytes exceeded, killed container {name}",
                        name,
                        warning=True,
                    )
                continue
            processes.signal_process(p, signal.SIGKILL)  # the container ends with its leader, like a cgroup
            processes.forget(p)
            del self.procs[name]
            code, sig = processes.exit_code(rc)
            oom = name in self.oom
            self.oom.discard(name)
            c = self._container(name)
            term = model.Terminated(
                exit_code=137 if oom else code,
                reason="OOMKilled" if oom else ("Completed" if code == 0 else "Error"),
                finished_at=now,
                started_at=p.started_at,
                signal=None if oom else sig,
                container_id=c.container_id,
            )
            log.info("pod %s container %s exited: %s %s", self.key, name, term.exit_code, term.reason)
            if self.deletion_seen is not None:
                c.state, c.restart_at = term, None
            else:
                restarts.on_exit(c, term, self.policy, now, self.s.backoff)
                if c.restart_at is not None:
                    self._event("BackOff", f"Back-off restarting failed container {name}", name, warning=True)

    def _start_due(self, now: float) -> None:
        if status.init_failed_for_good(self.policy, self.inits):
            return
        for c in self.inits:
            if isinstance(c.state, model.Terminated) and c.state.exit_code == 0:
                continue
            if c.name not in self.procs and self._due(c, now):
                self._launch(c, now)
            return  # init containers run one at a time, in order
        for c in self.mains:
            if c.name not in self.procs and self._due(c, now):
                self._launch(c, now)

    @staticmethod
    def _due(c: model.Container, now: float) -> bool:
        return isinstance(c.state, model.Waiting) and (c.restart_at is None or c.restart_at <= now)

    def _launch(self, c: model.Container, now: float) -> None:
        spec = self.specs[c.name]
        try:
            self._ensure_kubeconfig(now)
            lookup = envresolve.Lookup(
                secret=lambda n: self._decoded(self.ctx.kube.get_secret(self.ns, n), secret=True),
                config_map=lambda n: self._decoded(self.ctx.kube.get_config_map(self.ns, n), secret=False),
            )
            env = podenv.base_env(self.s, self.name, self.kubeconfig_path, os.environ)
            env.update(envresolve.resolve(self.pod, spec, lookup, self.ctx.allocatable))
            argv = envresolve.argv(spec, env)
        except (envresolve.ConfigError, kubeapi.KubeError) as e:
            if not (isinstance(c.state, model.Waiting) and c.state.message == str(e)):
                self._event("Failed", f"Error: {e}", c.name, warning=True)
            c.state = model.Waiting("CreateContainerConfigError", str(e))
            c.restart_at = now + 2.0
            return
        restart_count = c.restart_count + (1 if c.ever_ran else 0)
        processes.rotate_log(self.pod_dir, c.name, restart_count)
        cid = f"agentrun://{self.uid[:8]}-{c.name}-{restart_count}"
        try:
            p = processes.launch(
                argv=argv,
                env=env,
                cwd=self.pod_dir,
                log_file=processes.log_path(self.pod_dir, c.name),
                record=self.s.procs_dir / self.uid / f"{c.name}.json",
                meta={"pod": self.key, "container": c.name, "uid": self.uid},
            )
        except OSError as e:
            c.restart_count, c.container_id = restart_count, cid
            term = model.Terminated(
                exit_code=128,
                reason="StartError",
                finished_at=now,
                started_at=now,
                message=f"failed to start {argv[0]!r}: {e}",
                container_id=cid,
            )
            restarts.on_exit(c, term, self.policy, now, self.s.backoff)
            self._event("Failed", f"Error: {term.message}", c.name, warning=True)
            return
        c.restart_count, c.container_id, c.restart_at = restart_count, cid, None
        c.state = model.Running(p.started_at)
        self.procs[c.name] = p
        if self.pod_frozen:
            processes.signal_process(p, signal.SIGSTOP)
        log.info("pod %s container %s started (pid %d): %s", self.key, c.name, p.pid, argv)
        self._event(
            "Started", f"Started container {c.name} (pid {p.pid}, image {c.image} not pulled)", c.name
        )

    @staticmethod
    def _decoded(obj: Obj | None, *, secret: bool) -> dict[str, str] | None:
        if obj is None:
            return None
        return envresolve.decode_secret_data(obj) if secret else envresolve.config_map_data(obj)

    def _signal_all(self, sig: int) -> None:
        for p in self.procs.values():
            processes.signal_process(p, sig)

    def _kill_all(self) -> None:
        self._signal_all(signal.SIGKILL)
        deadline = time.time() + self.s.kill_wait_s
        for p in list(self.procs.values()):
            try:
                p.popen.wait(max(0.1, deadline - time.time()))
            except Exception:
                log.warning("pod %s: pid %d did not exit after SIGKILL", self.key, p.pid)
            processes.forget(p)
        self.procs.clear()

    # --- deletion -------------------------------------------------------------------------------------------
    def _terminate(self, now: float, meta: Obj) -> bool:
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        if self.deletion_seen is None:
            self.deletion_seen = now
            log.info("pod %s: deleting, grace %ss", self.key, grace)
            for name in self.procs:
                self._event("Killing", f"Stopping container {name} (grace {grace}s)", name)
            for c in self.inits + self.mains:
                c.restart_at = None
                if (
                    c.name not in self.procs
                    and isinstance(c.state, model.Waiting)
                    and c.last_state is not None
                ):
                    c.state = c.last_state  # was in backoff: it stays terminated now
            self._signal_all(signal.SIGTERM)
        if self.procs and self.sigkilled_at is None and now >= self.deletion_seen + float(grace):
            self._signal_all(signal.SIGKILL)
            self.sigkilled_at = now
        if self.procs and self.sigkilled_at is not None and now > self.sigkilled_at + self.s.kill_wait_s:
            log.warning("pod %s: processes survive SIGKILL; reporting them gone", self.key)
            for p in self.procs.values():
                processes.forget(p)
            for name in list(self.procs):
                self._container(name).state = model.Terminated(137, "Error", now, message="did not exit")
            self.procs.clear()
        if self.procs:
            return False
        if self.phase_override is None:
            self.phase_override = status.final_phase(self.mains)
        if not self._sync_status(now) and not self.gone:
            return False  # the final status first (retried), then the removal
        try:
            self.ctx.kube.delete_pod_now(self.ns, self.name, self.uid)
        except kubeapi.KubeError as e:
            if e.status not in (404, 409):
                log.warning("pod %s: delete failed (%s); retrying", self.key, e)
                return False
        log.info("pod %s: terminated and removed", self.key)
        return True


def pod_dir(s: settings_mod.Settings, namespace: str, name: str) -> Path:
    return s.pods_dir / namespace / name
