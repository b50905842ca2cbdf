"""``python -m agentrun_dev.podruntime --kubeconfig K --state-dir S --node-name agentrun-dev-node``."""

from __future__ import annotations

import argparse
import logging
import sys

from agentrun_dev.podruntime import runtime
from agentrun_dev.podruntime import settings as settings_mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrun_dev.podruntime", description=__doc__)
    p.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the dev cluster")
    p.add_argument("--state-dir", required=True, help="dev-cluster state directory")
    p.add_argument("--node-name", default="agentrun-dev-node")
    p.add_argument("--repo", default=None, help="put on containers' PYTHONPATH (default: this checkout)")
    p.add_argument("--no-bind", action="store_true", help="do not bind unscheduled pods (a second runtime)")
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=a.log_level, format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"
    )
    s = settings_mod.build(
        kubeconfig=a.kubeconfig, state_dir=a.state_dir, node_name=a.node_name, repo=a.repo, bind=not a.no_bind
    )
    rt = runtime.Runtime(s)
    runtime.install_signal_handlers(rt)
    return rt.run()


if __name__ == "__main__":
    sys.exit(main())
