"""agent_worker."""
