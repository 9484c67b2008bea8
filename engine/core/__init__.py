"""The policy core: model, policy language (spec, parse, compile), conditions, checks,
aggregates, evaluation, catalog and costs.

A leaf: it imports only the standard library, pydantic, jinja2 (sandboxed message templates),
PyYAML (policy text with line numbers), mypy-extensions (`mypyc_attr`: how the compiled core's
classes may be used, docs/compiled-core.md) and other core modules; no I/O on user input, no clock,
no environment, no process-wide switches. Adapters, telemetry, Rego, remediations, outputs and
entry points import the core, never the reverse (checked by import-linter, see pyproject.toml).
"""
