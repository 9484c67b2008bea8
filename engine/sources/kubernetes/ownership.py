"""What joining a GPU to its workload needs of a Kubernetes object: its kind, name, namespace,
owners, `pod-template-hash` label and node (`engine.telemetry.owners` follows the chain)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def minimal_owner(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a snapshot keeps of an ownership object: kind, name, namespace, labels, owners and
    the node a pod runs on."""
    metadata = _metadata(obj)
    kept: dict[str, Any] = {"name": metadata.get("name")}
    for key in ("namespace", "labels", "ownerReferences"):
        if metadata.get(key):
            kept[key] = metadata[key]
    if isinstance(kept.get("ownerReferences"), list):
        kept["ownerReferences"] = [
            {k: r[k] for k in ("apiVersion", "kind", "name", "controller") if k in r}
            for r in kept["ownerReferences"] if isinstance(r, dict)
        ]
    labels = kept.get("labels")
    if isinstance(labels, dict):
        kept["labels"] = {k: v for k, v in labels.items() if k == "pod-template-hash"}
        if not kept["labels"]:
            del kept["labels"]
    document: dict[str, Any] = {"kind": obj.get("kind"), "metadata": kept}
    node = (obj.get("spec") or {}).get("nodeName") if isinstance(obj.get("spec"), dict) else None
    if node:
        document["spec"] = {"nodeName": node}
    return document

