"""agentrun_dev."""
