"""Rego policies: a second policy language beside the YAML conditions.

A policy file entry with a `rego:` block names Rego modules (and data documents) instead of a
`violation:` condition. Rules `deny`, `violation` and `warn` (conftest / Gatekeeper conventions)
and gpuwarden's `unknown` yield messages that become ordinary findings.

- `policy`: the `rego:` spec and its compiled program (modules, data, which rules exist).
- `inputs`: the input document per door (whole plan, normalized resource, AdmissionReview);
  `plan_documents` prepares plans for `Engine.evaluate(documents=...)`.
- `embedded`: in-process evaluation through the regorus bindings (optional extra `[rego]`).
- `remote`: an OPA server through opa-python-client (sync for the CLI, async at admission).
- `findings`: Rego messages → `Finding`s with enforcement per door, exemptions and costs.
- `kind`: registers the `rego:` policy kind and its evaluator with the core when imported
  (the core imports it by name the first time a policy has a `rego:` block).
- `testing`: `gpuwarden policies test DIR` (Rego `test_` rules and YAML cases).
"""
