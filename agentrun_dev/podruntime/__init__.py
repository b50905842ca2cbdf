"""The local pod runtime: a kubelet stand-in for the dev cluster's one Node (see docs/dev/pod-runtime.md).

Modules: ``runtime`` (watch, bind, dispatch), ``podworker`` (one pod's life), ``node`` (Node + Lease),
``kubeapi`` (the only API client), pure ``envresolve`` / ``status`` / ``restarts`` / ``model`` / ``proctable``
/ ``podenv``, ``processes`` (start/signal/log files), ``control`` (freeze/thaw channel), ``settings``.
"""
