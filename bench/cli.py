"""``agentrun bench [p1 … p7 | all] [--quick] [--reps N] [--json PATH]`` (also ``python -m bench``).

Needs the dev cluster's Postgres (started if needed); P1 and P2 also start a durable Postgres beside it (every
commit flushed) and stop it when done; P3 uses the API server when it is up, P4 needs the whole dev cluster
(``agentrun dev up``), P6 the real node too (``agentrun dev up --node=real`` and the image loaded; skipped,
saying so, without it). ``--quick`` is CI's mode: small sizes, 3 repetitions (CI passes
``--reps 1``), P4 with a handful of runs; it proves the scripts run, its numbers are not figures.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from bench import db, stats

BENCHMARKS = {
    "p1": "bench.p1_steps",
    "p2": "bench.p2_ledger",
    "p3": "bench.p3_start",
    "p4": "bench.p4_scale",
    "p5": "bench.p5_storage",
    "p6": "bench.p6_lost_node",
    "p7": "bench.p7_agents",
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentrun bench", description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", default=["all"], help="p1 … p7, or all (default)")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI: proves the scripts run)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per variant (default 5, min 5)")
    parser.add_argument("--json", default=None, help="also write one JSON object per figure to this file")
    parser.add_argument(
        "--p4-parked", default=None, help="comma list of parked-run counts (default 50,200,1000; 0: none)"
    )
    parser.add_argument(
        "--p4-active", default=None, help="comma list of active-run counts (default 10,25,50,100; 0: none)"
    )
    parser.add_argument(
        "--p4-waiting",
        default=None,
        help="comma list of counts of runs created suspended: operator memory per waiting run (default none)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    which = list(BENCHMARKS) if "all" in args.which else args.which
    unknown = [w for w in which if w not in BENCHMARKS]
    if unknown:
        print(
            f"agentrun bench: unknown benchmark {', '.join(unknown)}"
            f" (choose from {', '.join(BENCHMARKS)}, all)",
            file=sys.stderr,
        )
        return 2
    # Full mode: at least 5 repetitions per variant. Quick mode proves the scripts run; its numbers are not
    # figures, so it may use fewer (CI uses 1).
    reps = args.reps if args.reps is not None else (3 if args.quick else 5)
    if reps < (1 if args.quick else 5):
        print("agentrun bench: --reps must be at least 5 (1 with --quick)", file=sys.stderr)
        return 2
    report = stats.Report(json_path=args.json)
    print(
        f"agentrun bench {' '.join(which)}{' --quick' if args.quick else ''}, {reps} repetitions per variant"
    )
    started = time.monotonic()
    try:
        for name in which:
            module = importlib.import_module(BENCHMARKS[name])
            t0 = time.monotonic()
            kwargs = {}
            if name == "p4":
                kwargs = {"parked": args.p4_parked, "active": args.p4_active, "waiting": args.p4_waiting}
            module.run(report, quick=args.quick, reps=reps, **kwargs)
            print(f"  ({name} took {time.monotonic() - t0:.0f}s)", flush=True)
    finally:
        db.stop_durable()  # P1 and P2 start it; nothing else uses it
    report.close()
    print(f"\ndone in {time.monotonic() - started:.0f}s")
    return 0
