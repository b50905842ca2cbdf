"""The AgentRun API as typed values: the spec's field table (and the CRDs generated from it), the status
vocabulary, annotation names and limits, and the values processes exchange (``protocol``).

Every other part — operator, worker, CLI, admission policies — reads these names from here.
"""
