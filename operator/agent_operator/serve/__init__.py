"""Serve: the process — kopf wiring, the per-run daemon loop (observe → decide → act), leader election, the
metrics endpoint and the read API."""
