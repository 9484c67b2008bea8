"""Enforce mode on AWS: apply planned `stop` and `mark-violation` remediations.

`stop`, per kind of resource:

- EC2 instance: `StopInstances`; skipped when already stopping/stopped (or terminated). When one
  of its EBS volumes carries `gpuwarden:snapshot-before-stop=true`, `CreateSnapshot` of that
  volume comes first, and the instance is not stopped if the snapshot cannot be started.
- Autoscaling group: the size is recorded in the group tag `gpuwarden:previous-size`
  ("min,max,desired"), then `UpdateAutoScalingGroup` MinSize=0 DesiredCapacity=0.
- EKS node group: the same tag on the node group, then `UpdateNodegroupConfig` with minSize 0
  and desiredSize 0 (maxSize is kept: EKS requires at least 1).
- SageMaker notebook instance: the stop mark (`AddTags`), then `StopNotebookInstance`.

`resume` (planned at on-hours for what carries gpuwarden's stop mark) starts an instance, restores
a group's or node group's recorded size, and starts a notebook instance that is still `Stopped`
(`StartNotebookInstance`), then deletes the mark.

`mark-violation` tags the resource `gpuwarden:violation=<policy>@<YYYY-MM-DD>` (Cloud
Custodian's mark-for-op idea); marks of several policies are kept comma-separated, and a policy
already marked is left alone, so the date is that of the first mark.

Each method that calls AWS declares the IAM actions it calls (`IAM.declare`), next to the calls:
the fresh reads, and the mutating actions with the remediation (`remediation_actions` in the
Terraform module) that grants them; tests/test_iam_permissions.py holds the module's policy to
exactly these and checks them against the calls a run really makes.

Each check reads the resource fresh (Describe/List/Get), its tags included, just before
anything is changed: a resource that has become production or exempt since the scan is skipped
(`engine.core.labels.protection`), with a `check` line in the audit log. Every call goes through a
client with at most `CALL_ATTEMPTS` attempts (botocore standard retries), so a throttled API
costs seconds, not the scan's minutes of adaptive retries. The runner (`remediations.runner`)
supplies the blast radius, deadline, audit log and failure handling. Spot, encryption and tags
cannot be fixed in place: those findings carry advice, not actions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.core.labels import protection
from engine.core.model import Finding, Report, Resource
from engine.sources.aws import AwsClients, apply_client_hooks
from engine.sources.aws.permissions import IamDeclarations
from remediations.planning import RESUME_SCHEDULE_TAG, STOPPED_BY_TAG, resume_refusal, stop_marks
from remediations.runner import (
    Change,
    Check,
    Clock,
    Deadline,
    NoChange,
    run_enforcement,
    utc_now,
)

PREVIOUS_SIZE_TAG = "gpuwarden:previous-size"
VIOLATION_TAG = "gpuwarden:violation"
SNAPSHOT_TAG = "gpuwarden:snapshot-before-stop"
SNAPSHOT_OF_TAG = "gpuwarden:snapshot-of"
CALL_ATTEMPTS = 3  # per call, the first included; the scan's clients allow 11 adaptive ones
IAM = IamDeclarations()


def apply_aws_remediations(
    report: Report,
    resources: list[Resource],
    clients: AwsClients,
    *,
    max_actions: int,
    audit_log: Path,
    actor: str | None = None,
    clock: Clock = utc_now,
    deadline: Deadline | None = None,
) -> Report:
    """The report with each planned AWS action applied (or skipped/failed), mode enforce."""
    actions = AwsActions(clients, clock, marked_at=report.generated_at)
    checks: dict[str, Check] = {"stop": actions.stop, "mark-violation": actions.mark,
                                "resume": actions.resume}
    return run_enforcement(report, resources, provider="aws", checks=checks,
                           max_actions=max_actions, audit_log=audit_log, actor=actor,
                           clock=clock, deadline=deadline)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "")


def _tag_map(tags: Any) -> dict[str, str]:
    """`[{"Key": k, "Value": v}]` (EC2, autoscaling, SageMaker) as a dict."""
    return {str(t.get("Key")): str(t.get("Value") or "") for t in tags or []
            if isinstance(t, dict) and t.get("Key") is not None}


def capped_client(read_client: Any, session: Any) -> Any:
    """A client like `read_client` (endpoint, region, user agent, hooks) whose calls are tried
    at most CALL_ATTEMPTS times."""
    from botocore.config import Config

    config = read_client.meta.config.merge(
        Config(retries={"mode": "standard", "total_max_attempts": CALL_ATTEMPTS}))
    return apply_client_hooks(session.client(read_client.meta.service_model.service_name,
                                             region_name=read_client.meta.region_name,
                                             config=config))


def _stop_marks(finding: Finding, now: datetime) -> list[dict[str, str]]:
    """gpuwarden's mark (`planning.stop_marks`) as AWS tags."""
    return [{"Key": key, "Value": value} for key, value in stop_marks(finding, now).items()]


def _parse_size(text: str) -> dict[str, int] | None:
    parts = text.split(",")
    if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
        return None
    minimum, maximum, desired = (min(int(part), 10_000) for part in parts)
    return _size(minimum, maximum, desired)


def _size(minimum: int, maximum: int, desired: int) -> dict[str, int]:
    return {"min": minimum, "max": maximum, "desired": desired}


def _scaling_size(scaling: dict[str, Any]) -> dict[str, int]:
    """An EKS node group's `scalingConfig` as min, max, desired."""
    return _size(scaling.get("minSize", 0), scaling.get("maxSize", 1),
                 scaling.get("desiredSize", 0))


def _node_group_names(resource: Resource) -> tuple[str, str]:
    """The EKS cluster and node group names of a node group resource."""
    return (str(resource.raw.get("clusterName") or resource.cluster),
            str(resource.raw.get("nodegroupName") or resource.name))


def _group_name(resource: Resource) -> str:
    return str(resource.raw.get("AutoScalingGroupName") or resource.name)


def _describe_group(autoscaling: Any, name: str) -> dict[str, Any] | None:
    groups = autoscaling.describe_auto_scaling_groups(
        AutoScalingGroupNames=[name])["AutoScalingGroups"]
    return groups[0] if groups else None


def _group_size(group: dict[str, Any]) -> dict[str, int]:
    return _size(group["MinSize"], group["MaxSize"], group["DesiredCapacity"])


def _size_tag(size: dict[str, int]) -> str:
    return f"{size['min']},{size['max']},{size['desired']}"


class AwsActions:
    """The checks for each action; each reads fresh state and returns what to do."""

    def __init__(self, clients: AwsClients, clock: Clock, *,
                 marked_at: datetime | None = None) -> None:
        self.clients = clients
        self.clock = clock
        self.marked_at = marked_at  # the evaluation instant (`--now`), written in stop marks
        self._capped: dict[tuple[str | None, str | None, str], Any] = {}

    def _client(self, service: str, resource: Resource) -> Any:
        key = (resource.account, resource.region, service)
        if key not in self._capped:
            read = self.clients.client(service, resource.region, resource.account)
            session = self.clients.account(resource.account).session
            self._capped[key] = capped_client(read, session)
        return self._capped[key]

    # stop ----------------------------------------------------------------------------------

    def stop(self, finding: Finding, resource: Resource) -> Change | NoChange:
        stoppers: dict[str, Callable[[Finding, Resource], Change | NoChange]] = {
            "aws_instance": self._stop_instance,
            "aws_autoscaling_group": self._scale_group,
            "aws_eks_node_group": self._scale_node_group,
            "aws_sagemaker_notebook_instance": self._stop_notebook,
        }
        stopper = stoppers.get(resource.kind)
        if stopper is None:
            return NoChange(f"no stop action for a {resource.kind}")
        return stopper(finding, resource)

    @IAM.declare(remediation="stop", reads=["ec2:DescribeInstances", "ec2:DescribeVolumes"],
                 writes=["ec2:StopInstances", "ec2:CreateTags"],
                 tag_keys=[STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _stop_instance(self, finding: Finding, resource: Resource) -> Change | NoChange:
        ec2 = self._client("ec2", resource)
        try:
            reservations = ec2.describe_instances(InstanceIds=[resource.id])["Reservations"]
        except Exception as exc:
            if _error_code(exc) == "InvalidInstanceID.NotFound":
                return NoChange(f"{resource.id} no longer exists")
            raise
        instances = [i for r in reservations for i in r.get("Instances") or []]
        if not instances:
            return NoChange(f"{resource.id} no longer exists")
        instance = instances[0]
        state = instance["State"]["Name"]
        before = {"state": state, "instance_type": instance.get("InstanceType")}
        protected = protection(finding.policy, _tag_map(instance.get("Tags")))
        if protected:
            return NoChange(protected, before)
        if state in ("stopping", "stopped", "shutting-down", "terminated"):
            return NoChange(f"{resource.id} is already {state}", before)
        volumes = self._volumes_to_snapshot(ec2, resource.id)
        request: dict[str, Any] = {"StopInstances": {"InstanceIds": [resource.id]}}
        if volumes:
            request["CreateSnapshot"] = [{"VolumeId": v} for v in volumes]

        def apply() -> dict[str, Any]:
            snapshots = [self._snapshot(ec2, volume, resource.id, finding.policy)
                         for volume in volumes]
            marks = _stop_marks(finding, self.marked_at or self.clock())
            ec2.create_tags(Resources=[resource.id], Tags=marks)  # the way back, first
            stopping = ec2.stop_instances(InstanceIds=[resource.id])["StoppingInstances"]
            after: dict[str, Any] = {"state": stopping[0]["CurrentState"]["Name"]}
            if snapshots:
                after["snapshots"] = snapshots
            return after

        saved = f"; snapshots of {', '.join(volumes)} started" if volumes else ""
        return Change(before, request, apply,
                      f"stopped {resource.id} ({before['instance_type']}, was {state}){saved}")

    @IAM.declare(remediation="stop", reads=["ec2:DescribeInstances"],
                 writes=["ec2:StartInstances", "ec2:DeleteTags"],
                 tag_keys=[STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def resume(self, finding: Finding, resource: Resource) -> Change | NoChange:
        """Start an instance gpuwarden stopped (its mark still on it), then remove the mark."""
        if resource.kind == "aws_autoscaling_group":
            return self._resume_group(finding, resource)
        if resource.kind == "aws_eks_node_group":
            return self._resume_node_group(finding, resource)
        if resource.kind == "aws_sagemaker_notebook_instance":
            return self._resume_notebook(finding, resource)
        if resource.kind != "aws_instance":
            return NoChange(f"no resume action for a {resource.kind}")
        ec2 = self._client("ec2", resource)
        instances = [i for r in ec2.describe_instances(InstanceIds=[resource.id])["Reservations"]
                     for i in r.get("Instances") or []]
        if not instances:
            return NoChange(f"{resource.id} no longer exists")
        state = instances[0]["State"]["Name"]
        before = {"state": state, "instance_type": instances[0].get("InstanceType")}
        if STOPPED_BY_TAG not in _tag_map(instances[0].get("Tags")):
            return NoChange(f"{resource.id} carries no {STOPPED_BY_TAG} mark", before)
        if state != "stopped":
            return NoChange(f"{resource.id} is {state}, not stopped", before)
        marks = [{"Key": STOPPED_BY_TAG}, {"Key": RESUME_SCHEDULE_TAG}]
        request = {"StartInstances": {"InstanceIds": [resource.id]},
                   "DeleteTags": {"Resources": [resource.id], "Tags": marks}}

        def apply() -> dict[str, Any]:
            starting = ec2.start_instances(InstanceIds=[resource.id])["StartingInstances"]
            ec2.delete_tags(Resources=[resource.id], Tags=marks)
            return {"state": starting[0]["CurrentState"]["Name"]}

        return Change(before, request, apply,
                      f"resumed {resource.id} ({before['instance_type']}, stopped by gpuwarden)")

    @IAM.declare(remediation="stop", reads=["autoscaling:DescribeAutoScalingGroups"],
                 writes=["autoscaling:UpdateAutoScalingGroup", "autoscaling:DeleteTags"],
                 tag_keys=[PREVIOUS_SIZE_TAG, STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _resume_group(self, finding: Finding, resource: Resource) -> Change | NoChange:
        """Restore the size gpuwarden recorded when it scaled the group to zero."""
        autoscaling = self._client("autoscaling", resource)
        name = _group_name(resource)
        group = _describe_group(autoscaling, name)
        if group is None:
            return NoChange(f"autoscaling group {name} no longer exists")
        tags = _tag_map(group.get("Tags"))
        before = _group_size(group)
        previous = _parse_size(tags.get(PREVIOUS_SIZE_TAG, ""))
        refused = resume_refusal(f"autoscaling group {name}", STOPPED_BY_TAG,
                                 marked=STOPPED_BY_TAG in tags and previous is not None,
                                 at_zero=before["desired"] == 0)
        if refused:
            return NoChange(refused, before)
        assert previous is not None  # marked: its size was readable
        update = {"AutoScalingGroupName": name, "MinSize": previous["min"],
                  "MaxSize": previous["max"], "DesiredCapacity": previous["desired"]}
        marks = [{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": key}
                 for key in (STOPPED_BY_TAG, RESUME_SCHEDULE_TAG, PREVIOUS_SIZE_TAG)
                 if key in tags]

        def apply() -> dict[str, Any]:
            autoscaling.update_auto_scaling_group(**update)
            autoscaling.delete_tags(Tags=marks)
            return previous

        return Change(before, {"UpdateAutoScalingGroup": update, "DeleteTags": marks}, apply,
                      f"restored autoscaling group {name} to {_size_tag(previous)}"
                      " min,max,desired")

    @IAM.declare(remediation="stop", reads=["eks:DescribeNodegroup"],
                 writes=["eks:UpdateNodegroupConfig", "eks:UntagResource"],
                 tag_keys=[PREVIOUS_SIZE_TAG, STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _resume_node_group(self, finding: Finding, resource: Resource) -> Change | NoChange:
        """Restore the scaling config gpuwarden recorded when it scaled the node group to zero."""
        eks = self._client("eks", resource)
        cluster, name = _node_group_names(resource)
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
        scaling, tags = group.get("scalingConfig") or {}, dict(group.get("tags") or {})
        before = _scaling_size(scaling)
        previous = _parse_size(str(tags.get(PREVIOUS_SIZE_TAG, "")))
        refused = resume_refusal(f"node group {cluster}/{name}", STOPPED_BY_TAG,
                                 marked=STOPPED_BY_TAG in tags and previous is not None,
                                 at_zero=before["desired"] == 0)
        if refused:
            return NoChange(refused, before)
        assert previous is not None  # marked: its size was readable
        update = {"clusterName": cluster, "nodegroupName": name, "scalingConfig": {
            "minSize": previous["min"], "maxSize": max(1, previous["max"]),
            "desiredSize": previous["desired"]}}
        keys = [key for key in (STOPPED_BY_TAG, RESUME_SCHEDULE_TAG, PREVIOUS_SIZE_TAG)
                if key in tags]

        def apply() -> dict[str, Any]:
            response = eks.update_nodegroup_config(**update)
            eks.untag_resource(resourceArn=group["nodegroupArn"], tagKeys=keys)
            return {**previous, "update_id": (response.get("update") or {}).get("id")}

        return Change(before, {"UpdateNodegroupConfig": update, "UntagResource": keys}, apply,
                      f"restored node group {cluster}/{name} to {_size_tag(previous)}"
                      " min,max,desired")

    @staticmethod
    def _volumes_to_snapshot(ec2: Any, instance_id: str) -> list[str]:
        paginator = ec2.get_paginator("describe_volumes")
        pages = paginator.paginate(Filters=[{"Name": "attachment.instance-id",
                                             "Values": [instance_id]}])
        return [volume["VolumeId"] for page in pages for volume in page.get("Volumes") or []
                if any(t.get("Key") == SNAPSHOT_TAG and str(t.get("Value")).lower() == "true"
                       for t in volume.get("Tags") or [])]

    @staticmethod
    @IAM.declare(remediation="snapshot-before-stop",
                 writes=["ec2:CreateSnapshot", "ec2:CreateTags"],  # tags in TagSpecifications
                 tag_keys=[SNAPSHOT_OF_TAG])
    def _snapshot(ec2: Any, volume_id: str, instance_id: str, policy: str) -> str:
        response = ec2.create_snapshot(
            VolumeId=volume_id,
            Description=f"gpuwarden: {volume_id} of {instance_id} before stop ({policy})",
            TagSpecifications=[{"ResourceType": "snapshot", "Tags": [
                {"Key": SNAPSHOT_OF_TAG, "Value": instance_id}]}],
        )
        return str(response["SnapshotId"])

    @IAM.declare(remediation="stop", reads=["autoscaling:DescribeAutoScalingGroups"],
                 writes=["autoscaling:CreateOrUpdateTags", "autoscaling:UpdateAutoScalingGroup"],
                 tag_keys=[PREVIOUS_SIZE_TAG, STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _scale_group(self, finding: Finding, resource: Resource) -> Change | NoChange:
        autoscaling = self._client("autoscaling", resource)
        name = _group_name(resource)
        group = _describe_group(autoscaling, name)
        if group is None:
            return NoChange(f"autoscaling group {name} no longer exists")
        before = _group_size(group)
        protected = protection(finding.policy, _tag_map(group.get("Tags")))
        if protected:
            return NoChange(protected, before)
        if before["min"] == 0 and before["desired"] == 0:
            return NoChange(f"autoscaling group {name} is already at zero", before)
        tags = [{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": mark["Key"],
                 "Value": mark["Value"], "PropagateAtLaunch": False}
                for mark in [{"Key": PREVIOUS_SIZE_TAG, "Value": _size_tag(before)},
                             *_stop_marks(finding, self.marked_at or self.clock())]]
        update = {"AutoScalingGroupName": name, "MinSize": 0, "DesiredCapacity": 0}

        def apply() -> dict[str, Any]:
            autoscaling.create_or_update_tags(Tags=tags)  # the way back, before the change
            autoscaling.update_auto_scaling_group(**update)
            return _group_size(autoscaling.describe_auto_scaling_groups(
                AutoScalingGroupNames=[name])["AutoScalingGroups"][0])

        return Change(before, {"CreateOrUpdateTags": tags, "UpdateAutoScalingGroup": update},
                      apply, f"scaled autoscaling group {name} to zero (was {_size_tag(before)}"
                      f" min,max,desired; kept in tag {PREVIOUS_SIZE_TAG})")

    @IAM.declare(remediation="stop", reads=["eks:DescribeNodegroup"],
                 writes=["eks:TagResource", "eks:UpdateNodegroupConfig"],
                 tag_keys=[PREVIOUS_SIZE_TAG, STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _scale_node_group(self, finding: Finding, resource: Resource) -> Change | NoChange:
        eks = self._client("eks", resource)
        cluster, name = _node_group_names(resource)
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
        scaling = group.get("scalingConfig") or {}
        before = _scaling_size(scaling)
        protected = protection(finding.policy, dict(group.get("tags") or {}))
        if protected:
            return NoChange(protected, before)
        if before["min"] == 0 and before["desired"] == 0:
            return NoChange(f"node group {cluster}/{name} is already at zero", before)
        tags = {PREVIOUS_SIZE_TAG: _size_tag(before),
                **{mark["Key"]: mark["Value"]
                   for mark in _stop_marks(finding, self.marked_at or self.clock())}}
        maximum = max(1, before["max"])
        update = {"clusterName": cluster, "nodegroupName": name,
                  "scalingConfig": {"minSize": 0, "maxSize": maximum, "desiredSize": 0}}

        def apply() -> dict[str, Any]:
            eks.tag_resource(resourceArn=group["nodegroupArn"], tags=tags)
            response = eks.update_nodegroup_config(**update)
            return {**_size(0, maximum, 0), "update_id": (response.get("update") or {}).get("id")}

        return Change(before, {"TagResource": tags, "UpdateNodegroupConfig": update}, apply,
                      f"scaled node group {cluster}/{name} to zero (was {_size_tag(before)} "
                      f"min,max,desired; kept in tag {PREVIOUS_SIZE_TAG})")

    @IAM.declare(remediation="stop",
                 reads=["sagemaker:DescribeNotebookInstance", "sagemaker:ListTags"],
                 writes=["sagemaker:AddTags", "sagemaker:StopNotebookInstance"],
                 tag_keys=[STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _stop_notebook(self, finding: Finding, resource: Resource) -> Change | NoChange:
        sagemaker = self._client("sagemaker", resource)
        name = str(resource.raw.get("NotebookInstanceName") or resource.name)
        notebook = sagemaker.describe_notebook_instance(NotebookInstanceName=name)
        status = notebook["NotebookInstanceStatus"]
        before = {"status": status}
        arn = notebook["NotebookInstanceArn"]
        tags = sagemaker.list_tags(ResourceArn=arn).get("Tags")
        protected = protection(finding.policy, _tag_map(tags))
        if protected:
            return NoChange(protected, before)
        if status in ("Stopping", "Stopped", "Deleting", "Failed"):
            return NoChange(f"notebook instance {name} is already {status.lower()}", before)
        marks = _stop_marks(finding, self.marked_at or self.clock())

        def apply() -> dict[str, Any]:
            sagemaker.add_tags(ResourceArn=arn, Tags=marks)  # the way back, first
            sagemaker.stop_notebook_instance(NotebookInstanceName=name)
            return {"status": sagemaker.describe_notebook_instance(
                NotebookInstanceName=name)["NotebookInstanceStatus"]}

        return Change(before, {"AddTags": {"ResourceArn": arn, "Tags": marks},
                               "StopNotebookInstance": {"NotebookInstanceName": name}}, apply,
                      f"stopped notebook instance {name} (was {status})")

    @IAM.declare(remediation="stop",
                 reads=["sagemaker:DescribeNotebookInstance", "sagemaker:ListTags"],
                 writes=["sagemaker:StartNotebookInstance", "sagemaker:DeleteTags"],
                 tag_keys=[STOPPED_BY_TAG, RESUME_SCHEDULE_TAG])
    def _resume_notebook(self, finding: Finding, resource: Resource) -> Change | NoChange:
        """Start a notebook instance gpuwarden stopped (still Stopped, its mark still on it),
        then delete the mark."""
        from botocore.exceptions import ClientError

        sagemaker = self._client("sagemaker", resource)
        name = str(resource.raw.get("NotebookInstanceName") or resource.name)
        try:
            notebook = sagemaker.describe_notebook_instance(NotebookInstanceName=name)
        except ClientError as exc:
            if _error_code(exc) == "ValidationException":  # SageMaker's "RecordNotFound"
                return NoChange(f"notebook instance {name} no longer exists")
            raise
        status, arn = notebook["NotebookInstanceStatus"], notebook["NotebookInstanceArn"]
        before = {"status": status}
        tags = _tag_map(sagemaker.list_tags(ResourceArn=arn).get("Tags"))
        if STOPPED_BY_TAG not in tags:
            return NoChange(f"notebook instance {name} carries no {STOPPED_BY_TAG} mark", before)
        if status != "Stopped":
            return NoChange(f"notebook instance {name} is {status}, not Stopped", before)
        keys = [key for key in (STOPPED_BY_TAG, RESUME_SCHEDULE_TAG) if key in tags]

        def apply() -> dict[str, Any]:
            sagemaker.start_notebook_instance(NotebookInstanceName=name)
            sagemaker.delete_tags(ResourceArn=arn, TagKeys=keys)
            return {"status": sagemaker.describe_notebook_instance(
                NotebookInstanceName=name)["NotebookInstanceStatus"]}

        return Change(before, {"StartNotebookInstance": {"NotebookInstanceName": name},
                               "DeleteTags": {"ResourceArn": arn, "TagKeys": keys}}, apply,
                      f"resumed notebook instance {name} (stopped by gpuwarden)")

    # mark-violation --------------------------------------------------------------------------

    def mark(self, finding: Finding, resource: Resource) -> Change | NoChange:
        taggers = self._taggers(resource)
        if taggers is None:
            return NoChange(f"no tagging action for a {resource.kind}")
        read, write = taggers
        tags = read()
        current = tags.get(VIOLATION_TAG)
        marks = [m for m in (current or "").split(",") if m]
        before = {VIOLATION_TAG: current}
        protected = protection(finding.policy, tags)
        if protected:
            return NoChange(protected, before)
        if any(m.split("@", 1)[0] == finding.policy for m in marks):
            return NoChange(f"{resource.id} is already marked for {finding.policy}", before)
        value = ",".join([*marks, f"{finding.policy}@{self.clock().date().isoformat()}"])

        def apply() -> dict[str, Any]:
            write(value)
            return {VIOLATION_TAG: read().get(VIOLATION_TAG)}

        return Change(before, {"Tag": {VIOLATION_TAG: value}}, apply,
                      f"tagged {resource.id} {VIOLATION_TAG}={value}")

    def _taggers(self, resource: Resource
                 ) -> tuple[Callable[[], dict[str, str]], Callable[[str], None]] | None:
        """(read the resource's tags now, write the violation tag) for the resource's kind."""
        if resource.kind in ("aws_instance", "aws_ebs_volume", "aws_launch_template"):
            return self._ec2_taggers(resource)
        if resource.kind == "aws_autoscaling_group":
            return self._group_taggers(resource)
        if resource.kind == "aws_eks_node_group":
            return self._node_group_taggers(resource)
        arn_keys = {"aws_sagemaker_training_job": "TrainingJobArn",
                    "aws_sagemaker_notebook_instance": "NotebookInstanceArn",
                    "aws_sagemaker_endpoint": "EndpointArn"}
        if resource.kind in arn_keys and resource.raw.get(arn_keys[resource.kind]):
            return self._sagemaker_taggers(resource, str(resource.raw[arn_keys[resource.kind]]))
        return None

    @IAM.declare(remediation="mark-violation", reads=["ec2:DescribeTags"],
                 writes=["ec2:CreateTags"], tag_keys=[VIOLATION_TAG])
    def _ec2_taggers(self, resource: Resource
                     ) -> tuple[Callable[[], dict[str, str]], Callable[[str], None]]:
        ec2 = self._client("ec2", resource)
        filters = [{"Name": "resource-id", "Values": [resource.id]}]

        def read() -> dict[str, str]:
            pages = ec2.get_paginator("describe_tags").paginate(Filters=filters)
            return _tag_map([tag for page in pages for tag in page.get("Tags") or []])

        def write(value: str) -> None:
            ec2.create_tags(Resources=[resource.id], Tags=[{"Key": VIOLATION_TAG,
                                                             "Value": value}])

        return read, write

    @IAM.declare(remediation="mark-violation", reads=["autoscaling:DescribeAutoScalingGroups"],
                 writes=["autoscaling:CreateOrUpdateTags"], tag_keys=[VIOLATION_TAG])
    def _group_taggers(self, resource: Resource
                       ) -> tuple[Callable[[], dict[str, str]], Callable[[str], None]]:
        autoscaling = self._client("autoscaling", resource)
        name = _group_name(resource)

        def read() -> dict[str, str]:
            group = _describe_group(autoscaling, name)
            return _tag_map(group.get("Tags") if group else [])

        def write(value: str) -> None:
            autoscaling.create_or_update_tags(Tags=[{
                "ResourceId": name, "ResourceType": "auto-scaling-group", "Key": VIOLATION_TAG,
                "Value": value, "PropagateAtLaunch": False}])

        return read, write

    @IAM.declare(remediation="mark-violation", reads=["eks:DescribeNodegroup"],
                 writes=["eks:TagResource"], tag_keys=[VIOLATION_TAG])
    def _node_group_taggers(self, resource: Resource
                            ) -> tuple[Callable[[], dict[str, str]], Callable[[str], None]]:
        eks = self._client("eks", resource)
        cluster, name = _node_group_names(resource)

        def read() -> dict[str, str]:
            group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
            return {str(k): str(v) for k, v in (group.get("tags") or {}).items()}

        def write(value: str) -> None:
            arn = str(resource.raw.get("nodegroupArn") or resource.id)
            eks.tag_resource(resourceArn=arn, tags={VIOLATION_TAG: value})

        return read, write

    @IAM.declare(remediation="mark-violation", reads=["sagemaker:ListTags"],
                 writes=["sagemaker:AddTags"], tag_keys=[VIOLATION_TAG])
    def _sagemaker_taggers(self, resource: Resource, arn: str
                           ) -> tuple[Callable[[], dict[str, str]], Callable[[str], None]]:
        sagemaker = self._client("sagemaker", resource)

        def read() -> dict[str, str]:
            return _tag_map(sagemaker.list_tags(ResourceArn=arn).get("Tags"))

        def write(value: str) -> None:
            sagemaker.add_tags(ResourceArn=arn, Tags=[{"Key": VIOLATION_TAG, "Value": value}])

        return read, write
