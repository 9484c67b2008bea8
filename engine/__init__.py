"""gpuwarden: policy-as-code guardrails for GPU cloud spend."""

__version__ = "0.1.0"
