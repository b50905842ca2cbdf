"""Start throttling: at most ``limit`` live worker Pods per namespace, the rest wait in a fair queue.

Rule: a run may create its next worker Pod only while it holds one of its namespace's ``limit`` slots
(``AGENTRUN_MAX_WORKERS_PER_NAMESPACE``, a count of worker Pods; 0 = no limit). A run holds a slot from the
moment the operator decides to create its Pod until that Pod is observed terminated or gone (and the run
is not about to start another); one run holds at most one slot. Runs that want to start while the
namespace is full wait in a first-come, first-served queue: a freed slot goes to the run that has waited
longest, never to whichever run happens to reconcile first — so 1,000 runs applied at once start
``limit`` at a time, in the order they asked.

Only a *start* is throttled: a running worker is never stopped for the limit, and steering, approvals,
cancellation and deletion are not queued. When a slot frees, the operator wakes the runs now at the head
of the queue (``wake``) instead of leaving them to their next poll.

Keys (``Starts``): a run with ``spec.concurrency`` also needs a slot of its key in its namespace (by default
its graph: a limit per graph), a ``Throttle`` of its own with the limit the run declares, taken together with
the namespace's slot. A run waits in its key's line while the key is full and joins the namespace's line
only once the key has room, so runs held by their key never hold up the other runs of the namespace.

Restart: slots are process memory. Before granting the first slot of a namespace the throttle is seeded
from the Pod index (``seed``: every run with a worker Pod that is not terminated holds a slot), so a
restarted operator does not start a full second batch next to the Pods still running. Thread-safe: the
reconciles run in worker threads.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable

Wake = Callable[[str, str], object]  # (namespace, run name): look at this run again now
Seed = Callable[[], Iterable[tuple[str, str, str]] | None]
Group = tuple[str, int]  # a run's spec.concurrency: (key, limit)


class Throttle:
    def __init__(
        self,
        limit: int,
        *,
        wake: Wake | None = None,
        seed: Callable[[], Iterable[tuple[str, str, str]] | None] | None = None,
    ) -> None:
        self.limit = limit
        self.wake = wake
        # () -> (namespace, run uid, run name) of every run with a live worker Pod; None: not known yet
        self._seed = seed
        self._seeded = False
        self._lock = threading.Lock()
        self._live: dict[str, dict[str, str]] = collections.defaultdict(dict)  # ns -> uid -> name
        self._queue: dict[str, collections.OrderedDict[str, str]] = collections.defaultdict(
            collections.OrderedDict
        )  # ns -> uid -> name, oldest first

    # --- questions (no side effects) -------------------------------------------------------------------

    def allowed(self, namespace: str, uid: str) -> bool:
        """Whether this run may start a worker Pod now (it holds a slot, or one is free for it in order)."""
        if self.limit <= 0:
            return True
        with self._lock:
            self._ensure_seeded()
            return self._allowed(namespace, uid)

    def empty(self, namespace: str) -> bool:
        """Nobody holds a slot of ``namespace`` or waits for one."""
        with self._lock:
            return not self._live.get(namespace) and not self._queue.get(namespace)

    def live(self, namespace: str) -> int:
        with self._lock:
            return len(self._live.get(namespace, {}))

    def position(self, namespace: str, uid: str) -> int | None:
        """1-based place of the run in its namespace's queue (None: not queued)."""
        with self._lock:
            for i, queued in enumerate(self._queue.get(namespace, {}), start=1):
                if queued == uid:
                    return i
            return None

    # --- changes ---------------------------------------------------------------------------------------

    def take(self, namespace: str, uid: str, name: str) -> bool:
        """Claim a slot for a Pod about to be created; False when none is free for this run (any more)."""
        if self.limit <= 0:
            return True
        with self._lock:
            self._ensure_seeded()
            if not self._allowed(namespace, uid):
                self._queue[namespace].setdefault(uid, name)
                return False
            self._queue[namespace].pop(uid, None)
            self._live[namespace][uid] = name
            return True

    def observed(self, namespace: str, uid: str, name: str, *, live: bool, waiting: bool) -> None:
        """What a reconcile saw: whether the run has a live worker Pod, whether it waits to start one."""
        if self.limit <= 0:
            return
        heads: list[str] = []
        with self._lock:
            if waiting and not live:
                self._queue[namespace].setdefault(uid, name)  # in line from its first ask on
            if live:
                self._live[namespace].setdefault(uid, name)
            elif self._live[namespace].pop(uid, None) is not None:
                heads = self._heads(namespace)
            if not waiting and not live and self._queue[namespace].pop(uid, None) is not None:
                heads = self._heads(namespace)  # it gave up its place: the next in line may fit now
        self._wake(namespace, heads)

    def forget(self, namespace: str, uid: str) -> None:
        """The run is gone (deleted): it holds nothing and waits for nothing."""
        heads: list[str] = []
        with self._lock:
            self._queue[namespace].pop(uid, None)
            if self._live[namespace].pop(uid, None) is not None:
                heads = self._heads(namespace)
        self._wake(namespace, heads)

    # --- internals (lock held) -------------------------------------------------------------------------

    def _allowed(self, namespace: str, uid: str) -> bool:
        live = self._live[namespace]
        if uid in live:
            return True
        free = self.limit - len(live)
        if free <= 0:
            return False
        queue = self._queue[namespace]
        if uid not in queue:
            return len(queue) < free  # nobody older is waiting for the free slots
        for i, queued in enumerate(queue):
            if i >= free:
                return False
            if queued == uid:
                return True
        return False

    def _heads(self, namespace: str) -> list[str]:
        free = self.limit - len(self._live[namespace])
        return [name for _, name in zip(range(max(0, free)), self._queue[namespace].values(), strict=False)]

    def _ensure_seeded(self) -> None:
        if self._seeded or self._seed is None:
            return
        found = self._seed()
        if found is None:
            return  # the Pod index is not there yet: ask again at the next question
        self._seeded = True
        for namespace, uid, name in found:
            self._live[namespace].setdefault(uid, name)

    def _wake(self, namespace: str, names: list[str]) -> None:
        if self.wake is None:
            return
        for name in names:
            self.wake(namespace, name)


class Starts:
    """The slots a start must take: its namespace's (``namespaces``) and, with ``spec.concurrency``, its
    key's — both or neither, under one lock, so two reconciles never take one half each."""

    def __init__(
        self,
        namespace_limit: int,
        *,
        wake: Wake | None = None,
        seed: Seed | None = None,
        key_seed: Callable[[str, str], Iterable[tuple[str, str, str]] | None] | None = None,
    ) -> None:
        self.namespaces = Throttle(namespace_limit, wake=wake, seed=seed)
        self._wake = wake
        # (namespace, key) -> (namespace, run uid, name) of every run with a live worker Pod of that key
        self._key_seed = key_seed
        self._keys: dict[tuple[str, str], Throttle] = {}
        self._member: dict[str, tuple[str, str]] = {}  # run uid -> the (namespace, key) it counts in
        self._lock = threading.RLock()

    def allowed(self, namespace: str, uid: str, group: Group | None = None) -> bool:
        return self.waits_for(namespace, uid, group) is None

    def waits_for(self, namespace: str, uid: str, group: Group | None = None) -> str | None:
        """What keeps this run from starting a worker Pod now, in words (for its status); None: nothing."""
        with self._lock:
            keyed = self._keyed(namespace, uid, group)
            if keyed is not None and group is not None and not keyed.allowed(namespace, uid):
                return (
                    f"spec.concurrency key {group[0]!r} is at its limit of {group[1]} runs with a worker Pod"
                )
            if not self.namespaces.allowed(namespace, uid):
                return f"the namespace is at its limit of {self.namespaces.limit} live worker Pods"
            return None

    def take(self, namespace: str, uid: str, name: str, group: Group | None = None) -> bool:
        with self._lock:
            keyed = self._keyed(namespace, uid, group)
            if keyed is not None and not keyed.allowed(namespace, uid):
                keyed.take(namespace, uid, name)  # False: it waits in its key's line
                return False
            if not self.namespaces.take(namespace, uid, name):
                return False
            if keyed is not None:
                keyed.take(namespace, uid, name)  # room was checked above, under the same lock
            return True

    def observed(
        self, namespace: str, uid: str, name: str, *, live: bool, waiting: bool, group: Group | None = None
    ) -> None:
        with self._lock:
            keyed = self._keyed(namespace, uid, group)
            if keyed is not None:
                keyed.observed(namespace, uid, name, live=live, waiting=waiting)
                waiting = waiting and keyed.allowed(namespace, uid)  # in the namespace's line once it may
            self.namespaces.observed(namespace, uid, name, live=live, waiting=waiting)

    def forget(self, namespace: str, uid: str) -> None:
        with self._lock:
            self.namespaces.forget(namespace, uid)
            self._leave(uid)

    def _keyed(self, namespace: str, uid: str, group: Group | None) -> Throttle | None:
        """The run's key's throttle (made at first use, its limit the one this run declares); a run whose
        key changed leaves the earlier one."""
        where = None if group is None else (namespace, group[0])
        if self._member.get(uid) != where:
            self._leave(uid)
        if group is None or where is None:
            return None
        keyed = self._keys.get(where)
        if keyed is None:
            key_seed = self._key_seed
            keyed = Throttle(
                group[1],
                wake=self._wake,
                seed=(lambda: key_seed(*where)) if key_seed is not None else None,
            )
            self._keys[where] = keyed
        keyed.limit = group[1]
        self._member[uid] = where
        return keyed

    def _leave(self, uid: str) -> None:
        where = self._member.pop(uid, None)
        keyed = self._keys.get(where) if where is not None else None
        if where is None or keyed is None:
            return
        keyed.forget(where[0], uid)
        if keyed.empty(where[0]):
            del self._keys[where]  # a key nobody uses any more: nothing to keep
