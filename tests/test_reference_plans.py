"""Every real public plan in tests/data/reference/terraform-plans reads and normalizes as expected.

The plans come from checkov, infracost, conftest, terraform-validator and terraform-compliance
test suites (see tests/data/reference/SOURCES.md): UTF-16, deletes, reads, unknowns, nested
modules, count and for_each keys, and format versions 0.1 to 1.2.
"""

from __future__ import annotations

import pytest

from engine.core.model import Capacity, Category, Resource
from engine.sources.terraform import plan_resources, read_plan
from tests.conftest import REFERENCE

PLANS = REFERENCE / "terraform-plans"
PLAN_FILES = sorted(p.name for p in PLANS.glob("*.json"))


def resources_of(name: str) -> dict[str, Resource]:
    path = str(PLANS / name)
    return {r.id: r for r in plan_resources(read_plan(path), path)}


def test_reference_plans_are_present() -> None:
    assert PLANS.is_dir(), f"missing {PLANS}"
    assert len(PLAN_FILES) >= 16


@pytest.mark.parametrize("name", PLAN_FILES)
def test_every_reference_plan_reads_and_normalizes(name: str) -> None:
    path = str(PLANS / name)
    document = read_plan(path)
    assert document["resource_changes"]
    for resource in plan_resources(document, path):
        assert resource.state == "planned"
        assert resource.id.startswith(resource.kind.split(".")[0]) or "module." in resource.id
        resource.model_dump_json()


def test_conftest_gke_node_pool_is_spot_through_preemptible() -> None:
    found = resources_of("conftest-gke-show.json")
    assert list(found) == ["google_container_node_pool.primary_preemptible_nodes"]
    pool = found["google_container_node_pool.primary_preemptible_nodes"]
    # location us-central1 is a region: node_count 1 per zone in GKE's three default zones
    assert (pool.capacity, pool.instance_type, pool.count) == (Capacity.SPOT, "n1-standard-1", 3)
    assert pool.region == "us-central1" and pool.cluster == "my-gke-cluster"
    assert pool.gpu is None and pool.unknown == frozenset()


def test_checkov_utf16_plan_bucket() -> None:
    found = resources_of("checkov-plan-win-utf16.json")
    assert list(found) == ["aws_s3_bucket.data"]
    bucket = found["aws_s3_bucket.data"]
    assert (bucket.category, bucket.encrypted, bucket.customer_key) == (
        Category.BUCKET,
        True,
        False,
    )
    assert bucket.raw["bucket"] == "mike-abcd123data"


def test_checkov_eks_node_group_defaults() -> None:
    group = resources_of("checkov-eks-node-group.json")["aws_eks_node_group.test"]
    # capacity_type and instance_types are computed defaults: the config sets neither
    assert (group.capacity, group.instance_type, group.count) == (
        Capacity.ON_DEMAND,
        "t3.medium",
        1,
    )
    assert group.cluster == "test" and not group.has_gpu


def test_checkov_tags_variety_autoscaling_groups_both_tag_shapes() -> None:
    found = resources_of("checkov-plan-tags-variety.json")
    assert set(found) == {"aws_autoscaling_group.example", "aws_autoscaling_group.example2"}
    for group in found.values():
        assert group.tags == {"tag1": "test", "tag2": "test"}
        # launch configuration "test" is not in the plan: type and capacity cannot be told
        assert group.capacity == Capacity.UNKNOWN and "instance_type" in group.unknown
        assert group.count == 1


def test_checkov_booleans_gce_instance_has_no_gpu() -> None:
    found = resources_of("checkov-plan-booleans.json")
    assert set(found) == {
        "google_compute_instance.default",
        "google_compute_instance.default.boot_disk[0]",
    }
    vm = found["google_compute_instance.default"]
    assert (vm.instance_type, vm.capacity, vm.gpu) == ("e2-medium", Capacity.ON_DEMAND, None)
    assert vm.region == "us-central1" and vm.unknown == frozenset()
    disk = found["google_compute_instance.default.boot_disk[0]"]
    assert (disk.encrypted, disk.customer_key) == (True, False)


def test_checkov_data_and_deleted_plans_hold_no_mapped_creates() -> None:
    assert resources_of("checkov-plan-data-partial-values.json") == {}
    # a create-before-destroy replace of an unmapped type (aws_secretsmanager_secret)
    assert resources_of("checkov-plan-deleted-resources.json") == {}


def test_checkov_provisioners_instance() -> None:
    found = resources_of("checkov-plan-provisioners.json")
    web = found["aws_instance.web"]
    assert (web.instance_type, web.capacity, web.tags) == (
        "t3.micro",
        Capacity.ON_DEMAND,
        {"Name": "HelloWorld"},
    )
    root = found["aws_instance.web.root_block_device[0]"]
    assert root.encrypted is None and root.is_unknown("encrypted")


def test_checkov_tags_plan() -> None:
    found = resources_of("checkov-plan-tags.json")
    buckets = {r.id for r in found.values() if r.category == Category.BUCKET}
    assert buckets == {
        f"aws_s3_bucket.{n}"
        for n in ("data", "data_science", "financials", "flowbucket", "logs", "operations")
    }
    assert found["aws_ebs_volume.web_host_storage"].is_unknown("encrypted")
    assert found["aws_instance.web_host"].tags == {"Name": "123456789123-acme-corp-ec2"}
    # logs bucket: inline aws:kms with a key created in the same plan
    assert found["aws_s3_bucket.logs"].customer_key is True
    assert found["aws_s3_bucket.data"].customer_key is False
    assert len(found) == 11 and all(r.region == "us-west-2" for r in found.values())


def test_infracost_tf014_skips_no_ops_and_keeps_keys() -> None:
    found = resources_of("infracost-tf014-plan.json")
    instances = {r.id for r in found.values() if r.category == Category.INSTANCE}
    assert instances == {
        "aws_instance.instance_2",
        "aws_instance.instance_counted[1]",
        'aws_instance.instance_named["test.2"]',
        "module.instances.aws_instance.module_instance_2",
        "module.instances.aws_instance.module_instance_counted[1]",
        'module.instances.aws_instance.module_instance_named["test.2"]',
    }
    assert len(found) == 12  # each with its root volume
    assert found['aws_instance.instance_named["test.2"]'].tags == {"Name": "test.2"}
    assert all(r.region == "us-east-1" for r in found.values())


def test_infracost_default_tags_reach_tags_all() -> None:
    found = resources_of("infracost-policy-upload-plan.json")
    web = found["aws_instance.web_app"]
    assert web.tags == {
        "DefaultNotOverride": "defaultnotoverride",
        "DefaultOverride": "defaultoverride",
        "foo": "bar",
    }
    assert found["aws_instance.web_app.ebs_block_device[0]"].tags["baz"] == "bat"
    assert "mock_secret_key" not in "".join(r.model_dump_json() for r in found.values())


def test_tfc_279_autoscaling_group_joins_its_launch_template() -> None:
    found = resources_of("tfc-issue-279.json")
    group = found["aws_autoscaling_group.bar"]
    assert (group.instance_type, group.capacity, group.count) == ("t2.micro", Capacity.ON_DEMAND, 1)
    assert found["aws_launch_template.foobar"].category == Category.LAUNCH_TEMPLATE


def test_tfc_294_legacy_azure_vms_in_modules() -> None:
    found = resources_of("tfc-issue-294.json")
    vms = {r.id: r for r in found.values() if r.category == Category.INSTANCE}
    assert set(vms) == {
        "module.linuxservers-fail.azurerm_virtual_machine.vm-linux[0]",
        "module.windowsservers-pass.azurerm_virtual_machine.vm-windows[0]",
    }
    assert {r.instance_type for r in vms.values()} == {"Standard_D2s_v3"}
    assert (
        vms["module.linuxservers-fail.azurerm_virtual_machine.vm-linux[0]"].tags["project"] == "bar"
    )
    assert len(found) == 4  # plus their OS disks


def test_tfc_456_module_count_and_for_each_addresses() -> None:
    found = resources_of("tfc-issue-456.json")
    instances = {r.id for r in found.values() if r.category == Category.INSTANCE}
    assert len(instances) == 15  # 2 root, 3 + 2 + 1 + 7 in module instances
    assert 'module.ecr_repository_with_for["repository_2"].aws_instance.ecr_repository' in instances
    assert "module.other_ecr_repository_with_count[6].aws_instance.ecr_repository" in instances
    assert found["aws_instance.server[1]"].tags == {"Name": "Server 1"}
    assert len(found) == 31  # 15 instances, 15 root volumes, 1 bucket


def test_tfv_compute_instances_preemptible_and_placeholder_accelerators() -> None:
    found = resources_of("tfv-full-compute-instance.json")
    first = found["google_compute_instance.full_list_default_1"]
    assert first.capacity == Capacity.SPOT and first.gpu is not None
    assert first.gpu.count == 84 and first.gpu.model is None  # 2 x 42 of placeholder types
    assert found["google_compute_instance.full_list_default_1.boot_disk[0]"].customer_key is True
    assert (
        found["google_compute_instance.full_list_default_1.attached_disk[1]"].customer_key is False
    )
    second = found["google_compute_instance.full_list_default_2"]
    assert (second.capacity, second.gpu) == (Capacity.ON_DEMAND, None)


def test_tfv_container_node_pool() -> None:
    pool = resources_of("tfv-full-container-node-pool.json")[
        "google_container_node_pool.full_list_default_1"
    ]
    # regional (us-central1): 42 per zone × GKE's three default zones
    assert (pool.capacity, pool.count, pool.cluster) == (Capacity.SPOT, 126, "test-cluster")
    assert pool.gpu is not None and pool.gpu.count == 2
    assert pool.tags == {"test-label-key": "test-label-value"}
