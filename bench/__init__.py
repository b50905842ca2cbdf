"""agentrun's own benchmark suite (``agentrun bench``, ``python -m bench``): P1-P5 of issue 14.

Rule: every figure is printed next to its baseline measured in the same run, variants alternating
(A B B A …), at least 5 repetitions, median and spread. ``--quick`` shrinks sizes and repetitions so CI can
prove the scripts still run (it asserts that they run, never their numbers). The baselines (bare LangGraph +
PostgresSaver, raw single-row commits) use SQL of their own here: they measure the floor, not the product.
"""
