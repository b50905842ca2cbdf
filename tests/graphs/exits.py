"""A graph module whose import raises SystemExit (an unrunnable graph reference: must fail InvalidSpec)."""

raise SystemExit(0)
