"""agentrun."""
