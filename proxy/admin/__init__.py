"""Beside the flow, for operators: the admin API, the viewer page (`web/`) and the sessions CLI."""
