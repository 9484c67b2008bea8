"""The GPU model of an Azure VM size, read from its name, for sizes learnt at runtime: the
Resource SKUs API gives a size's GPU count but never its model. Azure names the accelerator in the
size (`Standard_NC24ads_A100_v4`, `Standard_ND96isr_H100_v5`); older series name none and are
known by family and version (`Standard_NC6s_v3` is a V100). Names follow
https://learn.microsoft.com/azure/virtual-machines/vm-naming-conventions."""

from __future__ import annotations

import re

GpuFacts = tuple[str, float]  # model, GiB of memory per GPU

_SIZE = re.compile(r"^standard_(?P<family>nc|ncc|nd|nv|ng)(?P<vcpus>\d+)(?P<features>[a-z]*)"
                   r"(?:_(?P<tokens>(?!v\d+$)[a-z0-9_]+?))?(?:_v(?P<version>\d+))?$")

# An accelerator named in the size; H100 and A100 differ between the NC (PCIe/NVL) and ND (SXM)
# families.
_NAMED: dict[str, GpuFacts] = {
    "h200": ("NVIDIA H200 141GB", 141), "gb200": ("NVIDIA GB200", 186),
    "gb300": ("NVIDIA GB300", 279), "b200": ("NVIDIA B200", 180),
    "mi300x": ("AMD Instinct MI300X", 192), "a10": ("NVIDIA A10", 24),
    "t4": ("NVIDIA T4", 16), "v620": ("AMD Radeon PRO V620", 32), "l4": ("NVIDIA L4", 24),
    "l40s": ("NVIDIA L40S", 48), "v710": ("AMD Radeon PRO V710", 24),
    "rtxpro6000bse": ("NVIDIA RTX PRO 6000 Blackwell", 96),  # Blackwell Server Edition
}
_BY_FAMILY: dict[tuple[str, str], GpuFacts] = {
    ("nc", "h100"): ("NVIDIA H100 NVL", 94), ("ncc", "h100"): ("NVIDIA H100 NVL", 94),
    ("nd", "h100"): ("NVIDIA H100 80GB SXM", 80), ("nc", "a100"): ("NVIDIA A100 80GB PCIe", 80),
    ("nd", "a100"): ("NVIDIA A100 80GB SXM", 80),
}
# Series that name no accelerator: (family, version) → GPU; version "" is the first generation.
_UNNAMED: dict[tuple[str, str], GpuFacts] = {
    ("nc", ""): ("NVIDIA K80", 12), ("nc", "2"): ("NVIDIA P100", 16),
    ("nc", "3"): ("NVIDIA V100", 16), ("nd", ""): ("NVIDIA P40", 24),
    ("nd", "2"): ("NVIDIA V100 32GB", 32), ("nd", "4"): ("NVIDIA A100 40GB SXM", 40),
    ("nv", ""): ("NVIDIA M60", 8), ("nv", "2"): ("NVIDIA M60", 8), ("nv", "3"): ("NVIDIA M60", 8),
    ("nv", "4"): ("AMD Radeon Instinct MI25", 16),
}


def gpu_facts(size: str) -> GpuFacts | None:
    """The GPU model and memory of the VM size `size` (any case), or None when its name says
    neither (a series this table does not know yet)."""
    name = size.strip().lower()
    match = _SIZE.match(name) if len(name) <= 64 else None
    if match is None:
        return None
    family, version = match["family"], match["version"] or ""
    for token in (match["tokens"] or "").split("_"):
        if (family, token) in _BY_FAMILY:
            return _BY_FAMILY[(family, token)]
        if token in _NAMED:
            return _NAMED[token]
    return None if match["tokens"] else _UNNAMED.get((family, version))
