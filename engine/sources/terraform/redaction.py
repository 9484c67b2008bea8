"""Secrets kept out of everything the adapter builds: sensitive values replaced before reading.

Values marked in `after_sensitive`, and attributes that are always secret (passwords, raw disk
keys: plans before Terraform 0.15 print them in clear), become `"(sensitive)"` before anything is
read, so they cannot reach a Resource, its `raw` or a report. Rego plan inputs are redacted the
same way (`engine.rego.inputs`).
"""

from __future__ import annotations

from typing import Any

SENSITIVE = "(sensitive)"


# Attributes that are secret whatever after_sensitive says (plans before Terraform 0.15 print
# sensitive values in clear). Checked on the resource object and its first level of blocks.
_ALWAYS_SECRET_KEYS = frozenset(
    {
        "password",
        "admin_password",
        "master_password",
        "disk_encryption_key_raw",
        "raw_key",
        "rsa_encrypted_key",
        "private_key",
        "client_secret",
        "secret_key",
        "access_key",
        "secret_string",
        "sas_token",
        "primary_access_key",
        "secondary_access_key",
        "primary_connection_string",
        "secondary_connection_string",
    }
)


def redact_sensitive(value: Any, sensitive: Any, depth: int = 0) -> Any:
    """`value` with sensitive parts replaced by "(sensitive)"; untouched subtrees are shared.

    `depth` counts objects from the resource (0) to its blocks (1): secret-named attributes are
    looked for there; deeper, only what `after_sensitive` marks.
    """
    if sensitive is True:
        return None if value is None else SENSITIVE
    if isinstance(value, list):
        marks = sensitive if isinstance(sensitive, list) else []
        items = [
            redact_sensitive(item, marks[i] if i < len(marks) else None, depth)
            for i, item in enumerate(value)
        ]
        unchanged = all(new is old for new, old in zip(items, value, strict=True))
        return value if unchanged else items
    if not isinstance(value, dict):
        return value
    marks_by_key = sensitive if isinstance(sensitive, dict) else {}
    changed: dict[str, Any] = {}
    for key, item in value.items():
        mark = True if depth <= 1 and key in _ALWAYS_SECRET_KEYS else marks_by_key.get(key)
        scan_names = depth == 0 and isinstance(item, dict | list)
        if not mark and not scan_names:
            continue
        new = redact_sensitive(item, mark, depth + 1)
        if new is not item:
            changed[key] = new
    return {**value, **changed} if changed else value
