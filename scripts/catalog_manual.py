"""Hand-kept tables of scripts/build_catalog.py: figures that no downloaded source file gives in a
form the generator reads, each read from a named public page and kept with that page's date.

Nothing here is estimated: a size one of whose figures no reachable source states is left out
(engine/data/catalog/README.md, "Left out or known gaps").
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

# GCP machine types no machine-readable source maps; the figures are Google's GPU machine types
# page: machine type -> (canonical GPU model, GPU count).
GCP_MANUAL_GPUS: dict[str, tuple[str, Fraction]] = {
    "a3-edgegpu-8g": ("NVIDIA H100 80GB", Fraction(8)),
}
# Left out rather than guessed: no source here names their GPU.
GCP_LEFT_OUT = frozenset({"a4x-maxgpu-4g-metal"})

# Azure sizes holding part of one GPU: the Resource SKUs API reports 1 GPU; Microsoft's size
# tables give the share.
AZURE_PARTIAL_GPU: dict[str, Fraction] = {
    "standard_nv6ads_a10_v5": Fraction(1, 6),
    "standard_nv12ads_a10_v5": Fraction(1, 3),
    "standard_nv18ads_a10_v5": Fraction(1, 2),
    "standard_nv4as_v4": Fraction(1, 8),
    "standard_nv8as_v4": Fraction(1, 4),
    "standard_nv16as_v4": Fraction(1, 2),
}


@dataclass(frozen=True)
class Reference:
    """A public document figures were read from (facts only; no text of it is copied)."""

    id: str
    label: str
    url: str
    as_of: str


# vCPUs and memory (the API's MemoryGB, GiB like the autoscaler's MemoryMb / 1024) of Azure sizes
# newer than the autoscaler's table, as the Resource SKUs API reports them.
AZURE_SKU_SIZES = Reference(
    "aspire-aks-vm-sizes@6e81ade",
    "microsoft/aspire@6e81ade src/Aspire.Hosting.Azure.Kubernetes/AksNodeVmSizes.Generated.cs: "
    "each size's vCPUs, MemoryGB and GPUs as the Azure Resource SKUs API reports them (written "
    "by its GenVmSizes tool; the API gives no GPU count for ND GB200 v6 and NVads V710 v5)",
    "https://github.com/microsoft/aspire/blob/6e81adea28659005aee54168de9d8d3f9d2df29f/"
    "src/Aspire.Hosting.Azure.Kubernetes/AksNodeVmSizes.Generated.cs",
    "2026-06-23")
AZURE_ND_GB200_V6 = Reference(
    "ms-learn-nd-gb200-v6@2bc777f",
    "Microsoft Learn, ND GB200-v6 sizes series (MicrosoftDocs/azure-compute-docs@2bc777f "
    "articles/virtual-machines/sizes/gpu-accelerated/nd-gb200-v6-series.md, ms.date "
    "03/20/2025): 4 accelerators per VM",
    "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nd-gb200-v6-series",
    "2025-03-20")
AZURE_NVADS_V710_V5 = Reference(
    "ms-learn-nvads-v710-v5@0f864c9",
    "Microsoft Learn, NVads V710 v5-series (MicrosoftDocs/azure-compute-docs@0f864c9 "
    "articles/virtual-machines/sizes/gpu-accelerated/nvadsv710-v5-series.md, ms.date "
    "09/16/2024): accelerators per size 1/6, 1/3, 1/2, 1, 1 of a 24 GB AMD Radeon PRO V710",
    "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nvadsv710-v5-series",
    "2024-09-16")
AZURE_NC_RTXPRO6000_V6 = Reference(
    "ms-learn-ncv6-overview@2026-06-03",
    "Microsoft Learn, NC RTX PRO 6000 Blackwell v6 sizes series overview (MicrosoftDocs/"
    "azure-compute-docs nc-rtxpro6000-bse-v6-series-overview.md, ms.date 06/03/2026): the GA "
    "sizes NC144ds/lds replace the 1-GPU NC128ds/lds and NC288ds/lds the 2-GPU NC256ds/lds and "
    "NC320ds/lds (whole GPUs; the series spans 0.25 to 2 GPUs of 96 GB); with the GPU count the "
    "Resource SKUs API reports (aspire-aks-vm-sizes@6e81ade)",
    "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/"
    "nc-rtxpro6000-bse-v6-series-overview",
    "2026-06-03")
MANUAL_REFERENCES = (AZURE_SKU_SIZES, AZURE_ND_GB200_V6, AZURE_NVADS_V710_V5,
                     AZURE_NC_RTXPRO6000_V6)


@dataclass(frozen=True)
class AzureSize:
    """One Azure size: vCPUs and memory as the API reports them (AZURE_SKU_SIZES; the
    autoscaler's table where it lists the size), GPU model and count from `gpus`."""

    name: str
    vcpus: int
    memory_gib: int
    gpu_model: str
    gpu_count: Fraction
    gpus: Reference


RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell"
V710 = "AMD Radeon PRO V710"

# N-series sizes that Karpenter's Azure price table prices and the autoscaler's type table
# predates, or lists with 0 GPUs because the API reports none (NVads V710 v5). Left out (README):
# the partial-GPU NC RTX PRO 6000 sizes (NC24lds, NC36ds/lds, NC72ds/lds: the API reports 1 GPU,
# and no reachable Microsoft table gives the share), the preview sizes (NC8lds to NC64ds, NC128
# to NC324), Standard_ND128isrf_NDR_GB200_v6 (no source states its figures) and ND GB300 v6
# (Karpenter's table does not price it yet).
AZURE_MANUAL_SIZES: tuple[AzureSize, ...] = (
    AzureSize("Standard_ND128isr_NDR_GB200_v6", 128, 864, "NVIDIA GB200", Fraction(4),
              AZURE_ND_GB200_V6),
    AzureSize("Standard_NC144ds_xl_RTXPRO6000BSE_v6", 144, 516, RTX_PRO_6000, Fraction(1),
              AZURE_NC_RTXPRO6000_V6),
    AzureSize("Standard_NC144lds_xl_RTXPRO6000BSE_v6", 144, 264, RTX_PRO_6000, Fraction(1),
              AZURE_NC_RTXPRO6000_V6),
    AzureSize("Standard_NC288ds_xl_RTXPRO6000BSE_v6", 288, 1032, RTX_PRO_6000, Fraction(2),
              AZURE_NC_RTXPRO6000_V6),
    AzureSize("Standard_NC288lds_xl_RTXPRO6000BSE_v6", 288, 516, RTX_PRO_6000, Fraction(2),
              AZURE_NC_RTXPRO6000_V6),
    AzureSize("Standard_NV4ads_V710_v5", 4, 16, V710, Fraction(1, 6), AZURE_NVADS_V710_V5),
    AzureSize("Standard_NV8ads_V710_v5", 8, 32, V710, Fraction(1, 3), AZURE_NVADS_V710_V5),
    AzureSize("Standard_NV12ads_V710_v5", 12, 64, V710, Fraction(1, 2), AZURE_NVADS_V710_V5),
    AzureSize("Standard_NV24ads_V710_v5", 24, 128, V710, Fraction(1), AZURE_NVADS_V710_V5),
    AzureSize("Standard_NV28adms_V710_v5", 28, 160, V710, Fraction(1), AZURE_NVADS_V710_V5),
)
AZURE_MANUAL_BY_NAME = {size.name.lower(): size for size in AZURE_MANUAL_SIZES}
