"""Example graphs shipped with agentrun (the support-ticket demo)."""
