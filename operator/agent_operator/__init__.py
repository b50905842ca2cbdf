"""agent_operator."""
