"""The normalizer registry: one function per Terraform resource type turns a planned change into
`Resource` models. The cloud modules (`aws`, `aws_sagemaker`, `gcp`, `azure`) register theirs
with `@normalizer`; the package `__init__` imports them all.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from engine.core.catalog import Catalog
from engine.core.enrich import enrich
from engine.core.errors import InputError, printable
from engine.core.model import Resource
from engine.inputfiles import bounded_resource
from engine.sources.terraform.plan_index import PlannedChange

Normalizer = Callable[[PlannedChange], list[Resource]]

_NORMALIZERS: dict[str, Normalizer] = {}


def normalizer(*types: str) -> Callable[[Normalizer], Normalizer]:
    """Register the function that turns a planned change of `types` into resources."""

    def register(function: Normalizer) -> Normalizer:
        for type_ in types:
            _NORMALIZERS[type_] = function
        return function

    return register


def normalize(planned: PlannedChange, source: str) -> list[Resource]:
    # The change indexed at an address is the first one planned there, which need not be of the
    # type the caller saw when two changes share an address (deposed objects, broken plans).
    function = _NORMALIZERS.get(planned.type)
    try:
        return function(planned) if function is not None else []
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = ".".join(str(part) for part in problem.get("loc", ()))
        raise InputError(
            f"{printable(planned.address)}: cannot read {field or 'the resource'}: "
            f"{printable(str(problem.get('msg')))}",
            file=source,
        ) from None


def enriched(resource: Resource, catalog: Catalog) -> Resource:
    instance_type = resource.instance_type
    if resource.kind.startswith("aws_sagemaker") and instance_type and instance_type[:3] == "ml.":
        # An ML instance is priced as the EC2 type it runs on (SageMaker adds a premium).
        ec2 = resource.model_copy(update={"instance_type": instance_type[3:]})
        resource = enrich(ec2, catalog).model_copy(update={"instance_type": instance_type})
    else:
        resource = enrich(resource, catalog)
    return bounded_resource(resource)


def is_supported(type_: object) -> bool:
    """Whether resources of Terraform type `type_` are normalized (a registered normalizer)."""
    return type_ in _NORMALIZERS


def supported_types() -> frozenset[str]:
    return frozenset(_NORMALIZERS)
