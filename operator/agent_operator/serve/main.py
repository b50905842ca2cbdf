"""``agentrun operator``: run the operator (kopf, one leader per Lease).

    agentrun operator [--namespace NS ...] [--verbose]

Settings come from the environment (``agent_operator.settings``); ``--namespace`` overrides
``AGENTRUN_WATCH_NAMESPACES``. Equivalent: ``kopf run --standalone -m agent_operator.serve.handlers -n NS``.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import sys

from agent_operator import settings as settings_


def schema_problem(dsn: str) -> str:
    """With AGENTRUN_MIGRATE=false nobody migrates for this operator: refuse to start on a schema this
    release's code does not run against (the migrate Job has not run yet; a Deployment then restarts the
    operator until it has). "" when it does; an unreachable database is left to the start-up's own retries."""
    from agentrun_core import compat, store
    from agentrun_core.store import connect

    try:
        with connect.connect(dsn, timeout_seconds=10) as conn:
            level = store.schema_compat_level(conn)
    except connect.Error:
        return ""
    verdict = compat.judge(level)
    if verdict.compatible:
        return ""
    return (
        f"AGENTRUN_MIGRATE is false and the database's schema does not match this release "
        f"(schema compatibility level {level if level is not None else 'none'}, this release needs "
        f"{compat.WORKER_LEVELS}): run `agentrun migrate` (the migrate Job, deploy/migrate) first"
    )


M_ARENA_MAX = -8  # glibc's mallopt() parameter: the most malloc arenas the process may have
MALLOC_ARENAS = 2


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas (as ``MALLOC_ARENA_MAX`` would); whether it was applied.

    Reconciles run in asyncio's thread pool, and glibc gives each thread an arena of its own (up to 8 per
    core) that keeps what the thread freed: after a burst of reconciles (thousands of runs admitted at once)
    those arenas hold memory no run uses (2,000 waiting runs, ``agentrun bench p4 --p4-waiting 2000``: 36.7
    KiB per run with 9 arenas, 33.6 with ``MALLOC_ARENA_MAX=2``, one run each). ``MALLOC_ARENA_MAX`` in the
    environment wins; a C library without ``mallopt`` (not glibc) is left as it is."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, arenas))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentrun operator", description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: AGENTRUN_WATCH_NAMESPACES or all",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--liveness", default=None, help="kopf liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    args = parser.parse_args(argv)
    cap_malloc_arenas()  # before the first reconcile thread starts
    if args.namespace:
        os.environ["AGENTRUN_WATCH_NAMESPACES"] = ",".join(args.namespace)
    try:
        cfg = settings_.from_env()
    except settings_.SettingsError as exc:
        print(f"agentrun operator: {exc}", file=sys.stderr)
        return 2
    if not cfg.migrate:
        problem = schema_problem(cfg.dsn)
        if problem:
            print(f"agentrun operator: {problem}", file=sys.stderr)
            return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
    import kopf

    from agent_operator.serve import (
        handlers,  # noqa: F401 (importing it registers the handlers with kopf)
        kopf_config,
    )

    kopf_settings = kopf.OperatorSettings()
    kopf_config.configure_kopf(kopf_settings)
    kopf.run(
        standalone=True,
        clusterwide=not cfg.namespaces,
        namespaces=list(cfg.namespaces),
        settings=kopf_settings,
        liveness_endpoint=args.liveness,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
