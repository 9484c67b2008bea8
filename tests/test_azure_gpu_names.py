"""Azure VM sizes learnt at runtime get their GPU model from the size's name (the Resource SKUs
API gives only the count). The name rules are checked against every GPU size of the built-in
catalog, whose models come from other public sources (engine/data/catalog/README.md)."""

from __future__ import annotations

import pytest

from engine.core.catalog import builtin_catalog
from engine.sources.azure.gpu_names import gpu_facts
from engine.sources.azure.vm_sizes import instance_type, learned_catalog


def test_every_gpu_size_of_the_catalog_is_named_as_the_catalog_names_it() -> None:
    sizes = [spec for spec in builtin_catalog().table.gpu_types() if spec.cloud == "azure"]
    assert len(sizes) > 30
    wrong = {spec.name: (gpu_facts(spec.name), (spec.gpu_model, spec.gpu_memory_gib))
             for spec in sizes
             if gpu_facts(spec.name) != (spec.gpu_model, spec.gpu_memory_gib)}
    assert not wrong


@pytest.mark.parametrize(("size", "model"), [
    ("standard_nc6s_v3", "NVIDIA V100"),  # any case, as configs write it
    ("Standard_NC80adis_H100_v6", "NVIDIA H100 NVL"),  # a size newer than the catalog
    ("Standard_ND128isr_NDR_GB200_v6", "NVIDIA GB200"),
    ("Standard_ND96isr_H100_v6", "NVIDIA H100 80GB SXM"),
    ("Standard_NG32ads_V620_v1", "AMD Radeon PRO V620"),
    ("Standard_NC36ds_xl_RTXPRO6000BSE_v6", "NVIDIA RTX PRO 6000 Blackwell"),  # not in the catalog
    ("Standard_NV4ads_V710_v5", "AMD Radeon PRO V710"),
])
def test_sizes_name_their_gpu(size: str, model: str) -> None:
    facts = gpu_facts(size)
    assert facts is not None and facts[0] == model


@pytest.mark.parametrize("size", [
    "Standard_D4s_v5", "Standard_NC96ads_Z9_v9", "Standard_NC" + "9" * 500, "", "NC6s_v3",
    "Standard_NV6ads_A10_v5\n", "Standard_NC6s_v3; DROP",
])
def test_names_that_say_no_gpu_model_give_none(size: str) -> None:
    facts = gpu_facts(size)
    assert facts is None or size.strip() == "Standard_NV6ads_A10_v5"


def test_a_learnt_size_carries_its_model_into_the_catalog() -> None:
    item = {"name": "Standard_NC80adis_H100_v6",
            "capabilities": {"GPUs": "2", "vCPUs": "80", "MemoryGB": "640"}}
    spec = instance_type(item)
    assert spec is not None
    assert (spec.gpu_model, spec.gpu_count, spec.gpu_memory_gib) == ("NVIDIA H100 NVL", 2, 94)
    learned = learned_catalog(builtin_catalog(), [item]).instance_type("Standard_NC80adis_H100_v6")
    assert learned is not None and learned.gpu_model == "NVIDIA H100 NVL"
    cpu = instance_type({"name": "Standard_D96ads_v9", "capabilities": {"vCPUs": "96"}})
    assert cpu is not None and (cpu.gpu_model, cpu.gpu_count) == ("", 0)
