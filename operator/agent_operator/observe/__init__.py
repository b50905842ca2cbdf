"""Observe: what a run's daemon reads (the watch caches, a fresh read, Postgres) and what it remembers and
holds
between reconciles (its memory, the namespace's worker slots)."""
