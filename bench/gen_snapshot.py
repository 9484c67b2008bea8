"""Generate a realistic snapshot bundle with about N resources (deterministic for a seed).

The bundle holds what `gpuwarden scan --save-snapshot` writes for a large multi-cloud estate,
in the native shapes the live adapters save (docs/snapshots.md):

- `aws`: one entry per scanned (account, region) with EC2 instances (GPU and CPU types, spot
  and on-demand, running and stopped), EBS volumes (attached and not, encrypted or not) and
  EKS node groups;
- `gcp`: projects with Compute Engine instances (GPU machine types, attached accelerators,
  spot) and disks;
- `azure`: subscriptions with VMs (with their instance view), managed disks and AKS clusters
  with agent pools;
- `kubernetes`: one cluster's Namespaces, Nodes, Deployments, StatefulSets, Jobs and Pods
  asking for GPUs, some pinned to spot or a GPU product;
- `telemetry`: DCGM readings for some of the pods, with the owners that join them;
- `resources`: a few already-normalized resources.

Tags and labels vary: some resources miss a team or cost centre, some are production, some
carry an off-hours schedule or an exemption.

    python bench/gen_snapshot.py          # 100,000 resources: bench/out/snapshot-100000.json
    python bench/gen_snapshot.py -n 3000 --seed 7 -o /tmp/s.json
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CATALOG_CSV = REPO / "engine" / "data" / "catalog" / "gpu_instances.csv"
OUT_DIR = Path(__file__).resolve().parent / "out"
CAPTURED_AT = "2026-06-17T14:00:00Z"

AWS_PLAIN_TYPES = ("m5.large", "m5.xlarge", "t3.medium", "c5.2xlarge", "r5.large")
AWS_REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
GCP_PLAIN_TYPES = ("e2-medium", "n2-standard-8", "n1-standard-8")
GCP_ATTACHABLE = ("nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-l4")
GCP_ZONES = ("us-central1-a", "us-east1-b", "europe-west4-a")
AZURE_PLAIN_SIZES = ("Standard_D4s_v5", "Standard_D8s_v5", "Standard_E4s_v5")
AZURE_LOCATIONS = ("eastus", "westeurope", "westus2")
K8S_PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "Tesla-T4")
TEAMS = ("ml-research", "inference", "platform", "data", "vision", "speech")
PROJECTS = ("llm-pretrain", "ranking", "asr", "diffusion", "embeddings", "forecasting")
ENVS = ("dev", "staging", "production", "prod", "test")
OFFHOURS = "off=(M-F,19);on=(M-F,7);tz=pt"

# native kind → share of the resources (AKS clusters count by their pools, 3 each)
SHARES: dict[str, float] = {
    "aws_instance": 0.27,
    "aws_volume": 0.12,
    "aws_node_group": 0.03,
    "gcp_instance": 0.12,
    "gcp_disk": 0.06,
    "azure_vm": 0.10,
    "azure_disk": 0.05,
    "azure_pool": 0.03,
    "k8s_deployment": 0.06,
    "k8s_statefulset": 0.02,
    "k8s_job": 0.04,
    "k8s_pod": 0.09,
    "normalized": 0.01,
}
PER_AWS_REGION = 1500  # resources per scanned (account, region)
PER_PROJECT = 1200
PER_SUBSCRIPTION = 1200
TELEMETRY_SHARE = 0.05  # pods with DCGM readings


def gpu_types(cloud: str) -> list[str]:
    with CATALOG_CSV.open(encoding="utf-8") as handle:
        return [row["instance_type"] for row in csv.DictReader(handle) if row["cloud"] == cloud]


class Estate:
    """The generator's state: its random source and the GPU types per cloud."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.gpu = {cloud: gpu_types(cloud) for cloud in ("aws", "gcp", "azure")}
        self.serial = 0

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial

    def hexid(self, width: int = 17) -> str:
        return f"{self.rng.getrandbits(4 * width):0{width}x}"

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def labels(self) -> dict[str, str]:
        """Owner labels, complete most of the time; some production, off-hours or exempt."""
        rng = self.rng
        found: dict[str, str] = {}
        if self.chance(0.85):
            found["team"] = rng.choice(TEAMS)
        if self.chance(0.75):
            found["project"] = rng.choice(PROJECTS)
        if self.chance(0.7):
            found["cost-center"] = f"cc-{rng.randrange(1000, 9999)}"
        if self.chance(0.8):
            found["env"] = rng.choice(ENVS)
        if self.chance(0.05):
            found["gpuwarden-offhours"] = OFFHOURS
        if self.chance(0.02):
            found["gpuwarden-exempt"] = rng.choice(("gpu-spot-required", "all"))
        return found

    def instance_type(self, cloud: str, plain: tuple[str, ...], gpu_share: float) -> str:
        return self.rng.choice(self.gpu[cloud]) if self.chance(gpu_share) \
            else self.rng.choice(plain)


def aws_tags(labels: dict[str, str], name: str) -> list[dict[str, str]]:
    return [{"Key": "Name", "Value": name}, *({"Key": k, "Value": v} for k, v in labels.items())]


# ---------------------------------------------------------------------------- AWS


def aws_instance(estate: Estate, region: str) -> dict[str, Any]:
    rng = estate.rng
    instance_id = f"i-{estate.hexid()}"
    running = estate.chance(0.8)
    zone = f"{region}{rng.choice('abc')}"
    item: dict[str, Any] = {
        "InstanceId": instance_id,
        "InstanceType": estate.instance_type("aws", AWS_PLAIN_TYPES, 0.55),
        "ImageId": f"ami-{estate.hexid()}",
        "State": {"Code": 16, "Name": "running"} if running else {"Code": 80, "Name": "stopped"},
        "Placement": {"AvailabilityZone": zone, "Tenancy": "default"},
        "PrivateDnsName": f"ip-10-{rng.randrange(256)}-{rng.randrange(256)}-"
                          f"{rng.randrange(256)}.ec2.internal",
        "LaunchTime": f"2026-0{rng.randrange(1, 6)}-{rng.randrange(10, 28)}T08:00:00+00:00",
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda",
                                 "Ebs": {"VolumeId": f"vol-{estate.hexid()}",
                                         "Status": "attached", "DeleteOnTermination": True}}],
        "Tags": aws_tags(estate.labels(), f"node-{estate.next_serial()}"),
    }
    if estate.chance(0.25):
        item["InstanceLifecycle"] = "spot"
    return item


def aws_volume(estate: Estate, region: str) -> dict[str, Any]:
    rng = estate.rng
    volume_id = f"vol-{estate.hexid()}"
    zone = f"{region}{rng.choice('abc')}"
    attached = estate.chance(0.7)
    item: dict[str, Any] = {
        "VolumeId": volume_id,
        "Size": rng.choice((100, 500, 1000, 4000)),
        "VolumeType": rng.choice(("gp3", "gp2", "io2")),
        "Encrypted": estate.chance(0.7),
        "State": "in-use" if attached else "available",
        "AvailabilityZone": zone,
        "CreateTime": "2026-03-01T10:00:00+00:00",
        "Attachments": [{"InstanceId": f"i-{estate.hexid()}", "Device": "/dev/xvdb",
                         "State": "attached"}] if attached else [],
        "Tags": [{"Key": k, "Value": v} for k, v in estate.labels().items()],
    }
    if item["Encrypted"] and estate.chance(0.3):
        item["KmsKeyId"] = f"arn:aws:kms:{region}:123456789012:key/{estate.hexid(32)}"
    return item


def aws_node_group(estate: Estate, region: str, account: str) -> dict[str, Any]:
    rng = estate.rng
    name = f"gpu-{estate.next_serial()}"
    cluster = f"ml-{rng.choice(('dev', 'prod', 'batch'))}"
    desired = rng.randrange(0, 6)
    return {
        "nodegroupName": name,
        "nodegroupArn": f"arn:aws:eks:{region}:{account}:nodegroup/{cluster}/{name}/"
                        f"{estate.hexid(8)}",
        "clusterName": cluster,
        "status": "ACTIVE",
        "capacityType": rng.choice(("ON_DEMAND", "SPOT")),
        "instanceTypes": [estate.instance_type("aws", AWS_PLAIN_TYPES, 0.8)],
        "scalingConfig": {"minSize": 0, "maxSize": 10, "desiredSize": desired},
        "labels": {"workload": rng.choice(("training", "inference"))},
        "tags": estate.labels(),
    }


def aws_section(estate: Estate, counts: dict[str, int]) -> list[dict[str, Any]]:
    total = counts["aws_instance"] + counts["aws_volume"] + counts["aws_node_group"]
    scans = max(1, total // PER_AWS_REGION)
    entries = []
    for index in range(scans):
        account = f"{100000000000 + index // len(AWS_REGIONS) * 7919:012d}"
        region = AWS_REGIONS[index % len(AWS_REGIONS)]
        entries.append({
            "account": account, "region": region,
            "instances": [aws_instance(estate, region)
                          for _ in range(share(counts["aws_instance"], index, scans))],
            "volumes": [aws_volume(estate, region)
                        for _ in range(share(counts["aws_volume"], index, scans))],
            "node_groups": [aws_node_group(estate, region, account)
                            for _ in range(share(counts["aws_node_group"], index, scans))],
            "ebs_encryption_by_default": index % 2 == 0,
        })
    return entries


# ---------------------------------------------------------------------------- GCP


def gcp_instance(estate: Estate, project: str) -> dict[str, Any]:
    rng = estate.rng
    zone = rng.choice(GCP_ZONES)
    name = f"vm-{estate.next_serial()}"
    base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
    machine = estate.instance_type("gcp", GCP_PLAIN_TYPES, 0.5)
    accelerators = []
    if machine == "n1-standard-8" and estate.chance(0.5):
        accelerators = [{"acceleratorType": f"{base}/acceleratorTypes/"
                                            f"{rng.choice(GCP_ATTACHABLE)}",
                         "acceleratorCount": rng.choice((1, 2, 4))}]
    spot = estate.chance(0.2)
    return {
        "id": str(rng.getrandbits(52)),
        "name": name,
        "zone": base,
        "machineType": f"{base}/machineTypes/{machine}",
        "status": "RUNNING" if estate.chance(0.8) else "TERMINATED",
        "scheduling": {"provisioningModel": "SPOT" if spot else "STANDARD",
                       "onHostMaintenance": "TERMINATE", "preemptible": False,
                       "automaticRestart": not spot, "nodeAffinities": []},
        "disks": [{"boot": True, "mode": "READ_WRITE", "type": "PERSISTENT", "deviceName": name,
                   "source": f"{base}/disks/{name}", "autoDelete": True}],
        "selfLink": f"{base}/instances/{name}",
        "labels": estate.labels(),
        "guestAccelerators": accelerators,
        "labelFingerprint": "42WmSpB8rSM=",
        "networkInterfaces": [], "serviceAccounts": [],
    }


def gcp_disk(estate: Estate, project: str) -> dict[str, Any]:
    rng = estate.rng
    zone = rng.choice(GCP_ZONES)
    name = f"disk-{estate.next_serial()}"
    base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
    disk: dict[str, Any] = {
        "id": str(rng.getrandbits(52)),
        "name": name,
        "type": f"{base}/diskTypes/{rng.choice(('pd-balanced', 'pd-ssd'))}",
        "zone": base,
        "status": "READY",
        "selfLink": f"{base}/disks/{name}",
        "sizeGb": str(rng.choice((100, 500, 2000))),
        "labels": estate.labels(),
        "users": [f"{base}/instances/vm-{rng.randrange(1, estate.serial + 1)}"]
        if estate.chance(0.6) else [],
    }
    if estate.chance(0.3):
        disk["diskEncryptionKey"] = {
            "kmsKeyName": f"projects/{project}/locations/us/keyRings/gpu/cryptoKeys/disks"}
    return disk


def gcp_section(estate: Estate, counts: dict[str, int]) -> dict[str, Any]:
    total = counts["gcp_instance"] + counts["gcp_disk"]
    scopes = max(1, total // PER_PROJECT)
    projects = []
    for index in range(scopes):
        project = f"ml-{index:04d}"
        projects.append({
            "project": {"name": f"projects/{300000000000 + index}", "projectId": project,
                        "state": "ACTIVE", "labels": {"env": ENVS[index % len(ENVS)]}},
            "instances": [gcp_instance(estate, project)
                          for _ in range(share(counts["gcp_instance"], index, scopes))],
            "disks": [gcp_disk(estate, project)
                      for _ in range(share(counts["gcp_disk"], index, scopes))],
        })
    return {"projects": projects}


# ---------------------------------------------------------------------------- Azure


def azure_vm(estate: Estate, subscription: str) -> dict[str, Any]:
    rng = estate.rng
    name = f"vm-{estate.next_serial()}"
    power = rng.choice(("running", "running", "running", "stopped", "deallocated"))
    spot = estate.chance(0.2)
    group = f"/subscriptions/{subscription}/resourceGroups/rg-{rng.choice(TEAMS)}"
    properties: dict[str, Any] = {
        "vmId": f"00000000-0000-4000-8000-{estate.hexid(12)}",
        "hardwareProfile": {"vmSize": estate.instance_type("azure", AZURE_PLAIN_SIZES, 0.5)},
        "priority": "Spot" if spot else "Regular",
        "storageProfile": {"osDisk": {
            "osType": "Linux", "name": f"{name}_OsDisk", "createOption": "FromImage",
            "managedDisk": {"id": f"{group}/providers/Microsoft.Compute/disks/{name}_OsDisk",
                            "storageAccountType": "Premium_LRS"}}},
        "provisioningState": "Succeeded",
        "instanceView": {"statuses": [
            {"code": "ProvisioningState/succeeded", "level": "Info"},
            {"code": f"PowerState/{power}", "level": "Info", "displayStatus": f"VM {power}"}]},
    }
    if spot:
        properties["evictionPolicy"] = "Deallocate"
    return {"id": f"{group}/providers/Microsoft.Compute/virtualMachines/{name}", "name": name,
            "location": rng.choice(AZURE_LOCATIONS),
            "type": "Microsoft.Compute/virtualMachines", "tags": estate.labels(),
            "properties": properties}


def azure_disk(estate: Estate, subscription: str) -> dict[str, Any]:
    rng = estate.rng
    name = f"disk-{estate.next_serial()}"
    group = f"/subscriptions/{subscription}/resourceGroups/rg-{rng.choice(TEAMS)}"
    encryption = rng.choice(("EncryptionAtRestWithPlatformKey",
                             "EncryptionAtRestWithCustomerKey"))
    disk: dict[str, Any] = {
        "id": f"{group}/providers/Microsoft.Compute/disks/{name}", "name": name,
        "location": rng.choice(AZURE_LOCATIONS), "tags": estate.labels(),
        "type": "Microsoft.Compute/disks", "sku": {"name": "Premium_LRS"},
        "properties": {"creationData": {"createOption": "Empty"},
                       "diskSizeGB": rng.choice((128, 1024)),
                       "encryption": {"type": encryption},
                       "diskState": rng.choice(("Attached", "Unattached")),
                       "provisioningState": "Succeeded"},
    }
    return disk


def azure_cluster(estate: Estate, subscription: str) -> dict[str, Any]:
    rng = estate.rng
    name = f"aks-{estate.next_serial()}"
    pools = [{"name": "system", "count": 3, "vmSize": "Standard_D4s_v5", "osType": "Linux",
              "mode": "System", "type": "VirtualMachineScaleSets",
              "scaleSetPriority": "Regular", "nodeLabels": {}, "powerState": {"code": "Running"}}]
    for position in range(2):
        spot = estate.chance(0.4)
        pool: dict[str, Any] = {
            "name": f"gpu{position}", "count": rng.randrange(0, 4),
            "vmSize": rng.choice(estate.gpu["azure"]), "osType": "Linux", "mode": "User",
            "type": "VirtualMachineScaleSets", "scaleSetPriority": "Spot" if spot else "Regular",
            "nodeLabels": estate.labels(), "powerState": {"code": "Running"}}
        if spot:
            pool["scaleSetEvictionPolicy"] = "Delete"
        pools.append(pool)
    return {"id": f"/subscriptions/{subscription}/resourceGroups/rg-aks/providers/"
                  f"Microsoft.ContainerService/managedClusters/{name}",
            "name": name, "location": rng.choice(AZURE_LOCATIONS),
            "type": "Microsoft.ContainerService/ManagedClusters", "tags": estate.labels(),
            "properties": {"kubernetesVersion": "1.30.5", "powerState": {"code": "Running"},
                           "agentPoolProfiles": pools, "provisioningState": "Succeeded"}}


def azure_section(estate: Estate, counts: dict[str, int]) -> dict[str, Any]:
    clusters = counts["azure_pool"] // 3
    total = counts["azure_vm"] + counts["azure_disk"] + counts["azure_pool"]
    scopes = max(1, total // PER_SUBSCRIPTION)
    subscriptions = []
    for index in range(scopes):
        subscription = f"{index:08x}-8c4e-4b7a-9d21-0a3e5c7b9f10"
        subscriptions.append({
            "subscription": {"id": f"/subscriptions/{subscription}",
                             "subscriptionId": subscription, "displayName": f"ml-{index}",
                             "state": "Enabled", "tags": {"env": ENVS[index % len(ENVS)]}},
            "virtual_machines": [azure_vm(estate, subscription)
                                 for _ in range(share(counts["azure_vm"], index, scopes))],
            "disks": [azure_disk(estate, subscription)
                      for _ in range(share(counts["azure_disk"], index, scopes))],
            "managed_clusters": [azure_cluster(estate, subscription)
                                 for _ in range(share(clusters, index, scopes))],
        })
    return {"subscriptions": subscriptions}


# ---------------------------------------------------------------------------- Kubernetes


def namespaces(count: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": f"ns-{index}",
                          "labels": {"env": ENVS[index % len(ENVS)],
                                     "team": TEAMS[index % len(TEAMS)]}}}
            for index in range(count)]


def pod_spec(estate: Estate) -> dict[str, Any]:
    rng = estate.rng
    selector: dict[str, str] = {}
    if estate.chance(0.5):
        selector["karpenter.sh/capacity-type"] = rng.choice(("spot", "on-demand"))
    if estate.chance(0.7):
        selector["nvidia.com/gpu.product"] = rng.choice(K8S_PRODUCTS)
    limits: dict[str, Any] = {"memory": "16Gi"}
    if estate.chance(0.8):
        limits["nvidia.com/gpu"] = rng.choice((1, 1, 2, 4, 8))
    spec: dict[str, Any] = {"containers": [{
        "name": "main", "image": f"ghcr.io/acme/{rng.choice(PROJECTS)}:1.{rng.randrange(9)}",
        "resources": {"limits": limits}}]}
    if selector:
        spec["nodeSelector"] = selector
    return spec


def workload(estate: Estate, kind: str, namespace_count: int) -> dict[str, Any]:
    rng = estate.rng
    name = f"{kind.lower()}-{estate.next_serial()}"
    metadata: dict[str, Any] = {"name": name,
                                "namespace": f"ns-{rng.randrange(namespace_count)}",
                                "labels": estate.labels()}
    if kind == "Job" and estate.chance(0.5):
        metadata["annotations"] = {"gpuwarden.io/checkpoint": f"s3://acme-ml/ckpt/{name}/"}
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec(estate)}
    api = "batch/v1" if kind == "Job" else "apps/v1"
    spec: dict[str, Any] = {"template": template}
    if kind == "Job":
        template["spec"]["restartPolicy"] = "OnFailure"
        spec["parallelism"] = rng.randrange(1, 4)
    else:
        spec.update(replicas=rng.randrange(0, 4), selector={"matchLabels": {"app": name}})
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


def pod(estate: Estate, namespace_count: int, node: str) -> dict[str, Any]:
    rng = estate.rng
    name = f"pod-{estate.next_serial()}-{estate.hexid(5)}"
    spec = pod_spec(estate)
    spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": f"ns-{rng.randrange(namespace_count)}",
                         "labels": estate.labels()},
            "spec": spec, "status": {"phase": "Running"}}


def node(index: int, product: str) -> dict[str, Any]:
    name = f"ip-10-9-{index // 250}-{index % 250}.ec2.internal"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "karpenter.sh/capacity-type": "on-demand",
                "nvidia.com/gpu.product": product}},
            "spec": {"providerID": f"aws:///us-east-1a/i-{index:017x}"}}


def kubernetes_section(estate: Estate, counts: dict[str, int]) -> dict[str, Any]:
    namespace_count = max(2, counts["k8s_pod"] // 200)
    node_count = max(1, counts["k8s_pod"] // 20)
    objects: list[dict[str, Any]] = [*namespaces(namespace_count)]
    objects += [node(index, K8S_PRODUCTS[index % len(K8S_PRODUCTS)])
                for index in range(node_count)]
    for kind, key in (("Deployment", "k8s_deployment"), ("StatefulSet", "k8s_statefulset"),
                      ("Job", "k8s_job")):
        objects += [workload(estate, kind, namespace_count) for _ in range(counts[key])]
    objects += [pod(estate, namespace_count, objects[namespace_count + index % node_count]
                    ["metadata"]["name"]) for index in range(counts["k8s_pod"])]
    return {"cluster": "ml-prod-eks", "objects": objects}


def telemetry_section(estate: Estate, cluster: dict[str, Any]) -> dict[str, Any]:
    """DCGM readings for a share of the pods that hold GPUs, joined through the pods."""
    rng = estate.rng
    pods = [o for o in cluster["objects"] if o["kind"] == "Pod"
            and "nvidia.com/gpu" in o["spec"]["containers"][0]["resources"]["limits"]]
    gpus = []
    for item in pods[: int(len(pods) * TELEMETRY_SHARE)]:
        meta = item["metadata"]
        for gpu in range(int(item["spec"]["containers"][0]["resources"]["limits"]
                             ["nvidia.com/gpu"])):
            gpus.append({"hostname": item["spec"]["nodeName"],
                         "uuid": f"GPU-{estate.hexid(8)}-{estate.hexid(4)}-{estate.hexid(12)}",
                         "gpu": str(gpu), "model": "NVIDIA A100-SXM4-80GB",
                         "pod": meta["name"], "namespace": meta["namespace"],
                         "container": "main",
                         "activity_pct": round(rng.choice((0.5, 3.0, 25.0, 60.0, 95.0))
                                               * rng.uniform(0.8, 1.2), 1),
                         "activity_metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "samples": 240,
                         "window_seconds": 3600, "memory_used_mib": rng.randrange(0, 81920),
                         "memory_total_mib": 81920})
    return {"source": "prometheus http://prometheus.monitoring:9090", "end": CAPTURED_AT,
            "window_seconds": 3600, "gpus": gpus, "owners": []}


# ---------------------------------------------------------------------------- normalized


def normalized(estate: Estate) -> dict[str, Any]:
    rng = estate.rng
    return {"provider": "aws", "kind": "aws_instance", "category": "instance",
            "id": f"i-{estate.hexid()}", "name": f"imported-{estate.next_serial()}",
            "region": "us-east-1", "account": "123456789012",
            "instance_type": rng.choice(estate.gpu["aws"]),
            "state": "running", "capacity": rng.choice(("on-demand", "spot")),
            "tags": estate.labels(),
            "telemetry": {"average_activity_pct": round(rng.uniform(0, 100), 1),
                          "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "samples": 2016,
                          "window_seconds": 604800,
                          "peak_memory_gib": round(rng.uniform(1, 70), 1)}}


# ---------------------------------------------------------------------------- the bundle


def share(total: int, index: int, parts: int) -> int:
    """Part `index` of `total` split into `parts` nearly equal parts."""
    return total // parts + (1 if index < total % parts else 0)


def counts_for(resources: int) -> dict[str, int]:
    return {kind: max(1, round(resources * weight)) for kind, weight in SHARES.items()}


def generate_snapshot(resources: int = 100_000, seed: int = 42) -> dict[str, Any]:
    estate = Estate(seed)
    counts = counts_for(resources)
    builders: dict[str, Callable[[Estate, dict[str, int]], Any]] = {
        "aws": aws_section, "gcp": gcp_section, "azure": azure_section,
        "kubernetes": kubernetes_section}
    bundle: dict[str, Any] = {"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot",
                              "captured_at": CAPTURED_AT,
                              "description": f"generated estate, {resources} resources, "
                                             f"seed {seed}"}
    for name, build in builders.items():
        bundle[name] = build(estate, counts)
    bundle["telemetry"] = telemetry_section(estate, bundle["kubernetes"])
    bundle["resources"] = [normalized(estate) for _ in range(counts["normalized"])]
    return bundle


def write_snapshot(path: Path, bundle: dict[str, Any]) -> int:
    """Write compactly, as `--save-snapshot` output minified would be; returns the size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(bundle, separators=(",", ":")).encode("utf-8")
    path.write_bytes(data)
    return len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--resources", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    output = args.output or OUT_DIR / f"snapshot-{args.resources}.json"
    size = write_snapshot(output, generate_snapshot(args.resources, args.seed))
    print(f"{output}: about {args.resources} resources, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
