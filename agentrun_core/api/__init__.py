"""The AgentRun API as typed values: the spec's field table (and the CRDs generated from it), the status
vocabulary (``status``), annotation names (``keys``) and limits (``limits``), and the values processes
exchange (``protocol``).

Every other part — operator, worker, CLI, admission policies — reads these names from here: the policies
are rendered from templates (``policies/``) by ``policygen``, and tests/unit/test_vocabulary.py fails on a
name, limit or phase written anywhere else.
"""
