"""`checkpoint-missing`: interrupted work could not resume (no checkpoint location)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from engine.core.check_args import CheckpointArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.model import Category, Resource
from engine.core.tristate import Tri


class CheckpointMissing(Check):
    key = "checkpoint-missing"
    description = (
        "Interrupted work could not resume: a training job without a checkpoint location "
        "(SageMaker CheckpointConfig.S3Uri), or a Kubernetes workload with neither a "
        "gpuwarden.io/checkpoint annotation nor a persistent volume mounted at a path matching "
        "the `paths_param` globs."
    )
    Args = CheckpointArgs

    def __init__(self, args: CheckpointArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        globs = param_value(params, args.paths_param)
        if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
            raise ValueError(f"parameter {args.paths_param!r} must be a list of globs")
        self.globs = [g.lower() for g in globs]

    def matching_mounts(self, resource: Resource) -> list[str]:
        paths = resource.workload.volume_mount_paths if resource.workload else []
        return [p for p in paths if any(fnmatch.fnmatchcase(p.lower(), g) for g in self.globs)]

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if "checkpoint_uri" in resource.unknown:
            return None
        if resource.checkpoint_uri:
            return False
        if resource.category is not Category.WORKLOAD:
            return True
        if resource.workload is None:
            return None  # a workload normalized without its Kubernetes facts
        return not (resource.workload.checkpoint or self.matching_mounts(resource))

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if "checkpoint_uri" in resource.unknown:
            return {"unknown": ["checkpoint_uri"]}
        if resource.category is Category.WORKLOAD and resource.workload is None:
            return {"unknown": ["workload"]}
        mounts = resource.workload.volume_mount_paths if resource.workload else []
        return {"checkpoint_paths": self.globs, "persistent_mounts": mounts}


register_check(CheckpointMissing)
