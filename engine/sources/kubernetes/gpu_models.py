"""GPU-model matching: a node's GPU feature discovery labels (`nvidia.com/gpu.product`,
`nvidia.com/gpu.memory`) to the catalog's GPU model and its memory per GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.core.catalog import Catalog
from engine.sources.kubernetes.placement import Term, pinned_value

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU (GPU feature discovery)
MAX_LABEL_VALUE_CHARS = 63  # Kubernetes' limit on a label value


def gpu_model(product: str, catalog: Catalog) -> tuple[str, float | None]:
    """(catalog GPU model name, memory GiB per GPU) for a `nvidia.com/gpu.product` label value.

    "NVIDIA-A100-SXM4-80GB" -> ("NVIDIA A100 80GB SXM", 80.0). A label the catalog does not know
    (or that fits several models of different memory) keeps its own name, with the memory its
    name states, if any. A value longer than a label value can be is no node's product: it is
    neither matched nor remembered.
    """
    if len(product) > MAX_LABEL_VALUE_CHARS:
        return product, None
    return catalog.remembered(("product", product, None), lambda: _gpu_model(product, catalog))


def _gpu_model(product: str, catalog: Catalog) -> tuple[str, float | None]:
    """Linear in the label: its words are read once, then each catalog model's words (parsed
    once per catalog) are looked up in them."""
    wanted = _Words.of(product)
    scored: list[tuple[int, str, float]] = []
    for name, (memory, words) in _catalog_models(catalog).items():
        score = _match_score(wanted, words)
        if score is not None:
            scored.append((score, name, memory))
    if scored:
        best = max(score for score, _, _ in scored)
        top = sorted((len(n), n, m) for s, n, m in scored if s == best)
        if len({memory for _, _, memory in top}) == 1:
            return top[0][1], top[0][2]
    stated = re.search(r"(\d+)GB", product.upper())
    return product, float(stated.group(1)) if stated else None


def _catalog_models(catalog: Catalog) -> dict[str, tuple[float, list[str]]]:
    """Every catalog GPU model name → (memory GiB, its words)."""
    def parse() -> dict[str, tuple[float, list[str]]]:
        models = {a.gpu_model: a.gpu_memory_gib for a in catalog.accelerators.values()}
        models.update({i.gpu_model: i.gpu_memory_gib for i in catalog.instances.values()})
        return {name: (memory, _product_tokens(name)) for name, memory in models.items()}

    return catalog.remembered(("product-models", None, None), parse)


def _product_tokens(name: str) -> list[str]:
    return [token for token in re.split(r"[-_\s]+", name.upper()) if token]


@dataclass(frozen=True)
class _Words:
    """A product label's words, with the memory sizes and form factors it states."""

    all: frozenset[str]
    memory: frozenset[str]
    forms: tuple[str, ...]

    @classmethod
    def of(cls, label: str) -> _Words:
        words = _product_tokens(label)
        return cls(frozenset(words), frozenset(w for w in words if _word_kind(w) == "memory"),
                   tuple(w for w in words if _word_kind(w) == "form"))

    def carry(self, model_word: str) -> bool:
        if _word_kind(model_word) == "form":
            return any(form.startswith(model_word) for form in self.forms)  # SXM4 is an SXM part
        return model_word in self.all


def _match_score(label: _Words, model: list[str]) -> int | None:
    """How many of a catalog model's words the label carries; None when they contradict.

    The chip (the word after NVIDIA) must appear as is; a memory size or SXM/PCIe form factor
    stated on both sides must agree.
    """
    chip = model[1] if len(model) > 1 and model[0] == "NVIDIA" else model[0]
    if chip not in label.all:
        return None
    for word in model:
        kind = _word_kind(word)
        stated = label.memory if kind == "memory" else label.forms if kind == "form" else ()
        if stated and not label.carry(word):
            return None
    return sum(1 for word in model if label.carry(word))


def _word_kind(word: str) -> str | None:
    if re.fullmatch(r"\d+GB", word):
        return "memory"
    if word.startswith(("SXM", "PCIE")):
        return "form"
    return None


def memory_label_gib(value: str | None) -> float | None:
    if value is None or not re.fullmatch(r"[0-9]{1,9}", value) or int(value) == 0:
        return None
    return int(value) / 1024.0


# Node labels that name a node's GPU, by cloud, tried in this order after nvidia.com/gpu.product.
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_GPU_NAME_LABELS = (
    "k8s.amazonaws.com/accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
    "kubernetes.azure.com/accelerator",
)
# Karpenter instance families with one GPU model (karpenter.k8s.aws/instance-family).
_FAMILY_GPUS = {
    "p3": "NVIDIA-V100", "p3dn": "NVIDIA-V100-32GB", "p4d": "NVIDIA-A100-40GB",
    "p4de": "NVIDIA-A100-80GB", "p5": "NVIDIA-H100-80GB", "p5e": "NVIDIA-H200",
    "p5en": "NVIDIA-H200", "g4dn": "NVIDIA-T4", "g5": "NVIDIA-A10G", "g5g": "NVIDIA-T4G",
    "g6": "NVIDIA-L4", "g6e": "NVIDIA-L40S", "gr6": "NVIDIA-L4",
}
# Short GPU names as labels write them (t4, a10g, nvidia-tesla-v100, h100) → product words.
_NAME_PREFIXES = ("nvidia-tesla-", "nvidia-", "tesla-")


def placement_gpu_model(terms: list[Term], catalog: Catalog) -> tuple[str | None, float | None]:
    """(GPU model, memory) from the cloud labels a pod's node selection pins, else (None, None)."""
    accelerator = pinned_value(terms, GKE_ACCELERATOR_LABEL)
    if accelerator and len(accelerator) <= MAX_LABEL_VALUE_CHARS:
        found = catalog.accelerator(accelerator)
        if found is not None:
            return found.gpu_model, found.gpu_memory_gib
        return _named_model(accelerator, catalog)
    for key in INSTANCE_TYPE_LABELS:
        instance = catalog.instance(pinned_value(terms, key))
        if instance is not None and instance.gpu_count > 0:
            return instance.gpu_model, instance.gpu_memory_gib
    for key in _GPU_NAME_LABELS:
        name = pinned_value(terms, key)
        if name and len(name) <= MAX_LABEL_VALUE_CHARS:
            return _named_model(name, catalog)
    family = _FAMILY_GPUS.get(pinned_value(terms, "karpenter.k8s.aws/instance-family") or "")
    return gpu_model(family, catalog) if family else (None, None)


def _named_model(name: str, catalog: Catalog) -> tuple[str | None, float | None]:
    lowered = name.lower()
    if lowered in ("nvidia", "true", "gpu") or "$" in lowered:
        return None, None  # a vendor or a template placeholder names no model
    for prefix in _NAME_PREFIXES:
        if lowered.startswith(prefix):
            lowered = lowered[len(prefix):]
            break
    model, memory = gpu_model("NVIDIA-" + lowered.upper(), catalog)
    return model, memory


def mig_profile_model(migs: dict[str, int], catalog: Catalog) -> tuple[str | None, float | None]:
    """The GPU model a MIG profile belongs to when only one catalog family has it."""
    families = {family for family, profiles in catalog.mig_profiles.items()
                if any(p.name in migs for p in profiles)}
    if len(families) != 1:
        return None, None
    family = families.pop()
    return f"NVIDIA {family}", _family_memory(family)


def _family_memory(family: str) -> float | None:
    stated = re.search(r"(\d+)GB", family.upper())
    return float(stated.group(1)) if stated else None
