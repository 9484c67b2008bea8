"""Live AWS source: read GPU spend through boto3 and normalize it into `Resource` models.

`--source aws` lists, per account and region, EC2 instances and EBS volumes, launch templates,
autoscaling groups, EKS managed node groups, and SageMaker training jobs (in progress), notebook
instances and endpoints. Every list is paginated; (account, region) pairs are read concurrently
by a bounded thread pool; botocore retries in adaptive mode. boto3 is imported inside functions
only.

Reading and normalizing are separate: `scan_region` returns the native describe/list objects
(made JSON-safe), `region_resources` turns them into resources without any I/O. The natives are
the snapshot's `aws:` section, so `--save-snapshot` then `--source snapshot:FILE` replays a scan.

Conventions shared with the Terraform adapter (the same resource gives the same verdict through
either door): `kind` is the Terraform type (`aws_instance`, `aws_ebs_volume`, ...); instances
and volumes are keyed by their ids, launch templates by `lt-...`, everything else by its ARN
(endpoint variants: `<endpoint ARN>/<variant>`); EBS volumes are separate VOLUME resources
carrying the tags of the instance they are attached to under their own (an exemption or `env`
tag on an instance covers its disks); SageMaker `ml.` types keep their name and are priced as
the EC2 type they run on. What it decides on top:

- Instances launched by an autoscaling group (tag `aws:autoscaling:groupName`, or listed by the
  group) are left out: the group stands for them, as a controller stands for its pods, so their
  spend is not counted twice. Autoscaling groups that EKS manages for a node group are left out
  for the same reason. Terminated and shutting-down instances are not listed.
- Spot: `InstanceLifecycle == "spot"`; a launch template's `InstanceMarketOptions.MarketType`;
  an autoscaling group's mixed instances distribution (no on-demand base, 0% on-demand above
  it), else its launch template or launch configuration (`SpotPrice`); EKS `capacityType`;
  SageMaker `EnableManagedSpotTraining`. Notebooks and endpoints have no spot option.
- Customer keys: an EBS volume's `KmsKeyId` is a customer key unless it is an AWS managed key
  (an `alias/aws/...` alias, from `kms:ListAliases` in the region); when the aliases could not
  be read, `customer_key` is unknown. A launch template disk that leaves `Encrypted` unset
  follows the region's EBS encryption-by-default setting.
- Autoscaling group tags are those propagated to instances, plus environment tags
  (`engine.labels.is_environment_key`) and `gpuwarden*` control tags whatever their
  propagation: a production marker on the group must protect the group itself.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine import __version__
from engine.catalog import Catalog
from engine.enrich import enrich
from engine.errors import InputError
from engine.labels import is_environment_key
from engine.model import Capacity, Category, Resource, State
from engine.sources.registry import Collected, ScanOptions

if TYPE_CHECKING:
    from engine.sources.snapshot import SnapshotContext

SESSION_NAME = "gpuwarden"
RETRY_ATTEMPTS = 10  # retries after the first attempt (botocore's `max_attempts`)
# Called with every boto3 client this module creates (scan and remediation alike), e.g. to
# register botocore event handlers: `client.meta.events.register("before-call", check)`.
CLIENT_HOOKS: list[Callable[[Any], None]] = []

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/\S+$")
_EKS_DEFAULT_INSTANCE_TYPE = "t3.medium"
_TYPE_UNKNOWN = frozenset({"instance_type", "gpu", "hourly_usd"})
_ASG_MEMBER_TAG = "aws:autoscaling:groupName"

_CREDENTIAL_CODES = frozenset({
    "ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
    "AuthFailure", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
    "MissingAuthenticationToken", "RequestExpired",
})
_DENIED_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess",
    "AuthorizationError", "Forbidden",
})
_THROTTLE_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
    "TooManyRequestsException", "RequestThrottled", "RequestThrottledException",
    "EC2ThrottledException", "SlowDown",
})


# ---------------------------------------------------------------------------- clients


@dataclass
class Account:
    """One account to scan: its boto3 session and, once known, its id."""

    session: Any
    account_id: str | None = None
    role_arn: str | None = None

    @property
    def label(self) -> str:
        return self.account_id or self.role_arn or "default"


class AwsClients:
    """boto3 clients per (account, region, service), made once and shared by the scan threads
    and the remediation executor. Creating a client from a session is not thread-safe; using
    one is."""

    def __init__(self, accounts: Iterable[Account] = ()) -> None:
        self.accounts: list[Account] = list(accounts)
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()

    def account(self, account_id: str | None) -> Account:
        for account in self.accounts:
            if account_id is not None and account.account_id == account_id:
                return account
        if len(self.accounts) == 1:
            return self.accounts[0]
        raise LookupError(f"no credentials for AWS account {account_id or '(unknown)'}")

    def client(self, service: str, region: str | None, account: str | Account | None = None
               ) -> Any:
        chosen = account if isinstance(account, Account) else self.account(account)
        region = region or chosen.session.region_name or "us-east-1"
        key = (chosen.label, region, service)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = make_client(chosen.session, service, region)
            return self._clients[key]


def make_client(session: Any, service: str, region: str) -> Any:
    """A client with adaptive retries; the endpoint comes from the environment
    (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`) or the profile, as boto3 reads it."""
    from botocore.config import Config

    config = Config(retries={"mode": "adaptive", "max_attempts": RETRY_ATTEMPTS},
                    user_agent_extra=f"gpuwarden/{__version__}")
    client = session.client(service, region_name=region, config=config)
    for hook in CLIENT_HOOKS:
        hook(client)
    return client


def base_session(profile: str | None) -> Any:
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.Session(profile_name=profile)
    except BotoCoreError as exc:  # ProfileNotFound and unreadable config files
        raise InputError(f"aws: {_one_line(exc)}") from None


# ---------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class CallFailure:
    kind: str  # credentials | denied | throttled | connection | region | other
    text: str


def classify(exc: BaseException) -> CallFailure:
    """What went wrong with one call, in one line, and of which kind."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        CredentialRetrievalError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "Unknown")
        message = _one_line(str(error.get("Message") or ""))[:200]
        operation = exc.operation_name
        if code in _CREDENTIAL_CODES:
            return CallFailure("credentials", f"credentials rejected on {operation} "
                               f"({code}: {message})")
        if code in _DENIED_CODES:
            return CallFailure("denied", f"access denied to {operation} ({code}: {message})")
        if code in _THROTTLE_CODES:
            return CallFailure("throttled", f"{operation} still throttled after "
                               f"{RETRY_ATTEMPTS} retries ({code})")
        if code == "OptInRequired":
            return CallFailure("region", f"the region is not enabled for the account ({code})")
        return CallFailure("other", f"{operation} failed ({code}: {message})")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return CallFailure("credentials", _one_line(exc))
    if isinstance(exc, ConnectionError | HTTPClientError):
        return CallFailure("connection", f"cannot connect: {_one_line(exc)}")
    return CallFailure("other", _one_line(exc))


def _boto_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def _one_line(value: object) -> str:
    return " ".join(str(value).split()) or type(value).__name__


class _RegionAbort(Exception):
    """Credentials or the network failed: no other call in this region can succeed."""


@dataclass
class _Tally:
    """Outcomes of the calls of a scan, across threads: `succeeded` counts the inventory reads
    of regions (not the identity and region checks), `failures` every failed call."""

    succeeded: int = 0
    failures: list[CallFailure] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self) -> None:
        with self.lock:
            self.succeeded += 1

    def failed(self, failure: CallFailure) -> None:
        with self.lock:
            self.failures.append(failure)


@dataclass
class _RegionLog:
    """Failures of one (account, region), summarized into warning lines at the end."""

    account: str
    region: str
    tally: _Tally
    failures: list[tuple[str, CallFailure]] = field(default_factory=list)
    attempted: int = 0

    def warnings(self) -> list[str]:
        where = f"aws: account {self.account}, region {self.region}"
        kinds = {failure.kind for _, failure in self.failures}
        if self.failures and len(kinds) == 1 and len(self.failures) == self.attempted:
            service, first = self.failures[0]
            return [f"{where}: nothing could be read: {service}: {first.text}; region skipped"]
        return [f"{where}, {service}: {failure.text}; skipped" for service, failure
                in self.failures]


# ---------------------------------------------------------------------------- reading


def _plain(value: Any) -> Any:
    """A boto3 response as plain JSON data: datetimes as ISO strings, no ResponseMetadata."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _pages(client: Any, operation: str, key: str, **params: Any) -> Iterator[Any]:
    """Every item under `key` of a list/describe call, following its pagination."""
    if client.can_paginate(operation):
        for page in client.get_paginator(operation).paginate(**params):
            yield from page.get(key) or []
    else:
        yield from getattr(client, operation)(**params).get(key) or []


def _instances(ec2: Any) -> list[dict[str, Any]]:
    live = ["pending", "running", "stopping", "stopped"]
    reservations = _pages(ec2, "describe_instances", "Reservations",
                          Filters=[{"Name": "instance-state-name", "Values": live}])
    return [_plain(i) for reservation in reservations for i in reservation.get("Instances") or []]


def _volumes(ec2: Any) -> list[dict[str, Any]]:
    return [_plain(v) for v in _pages(ec2, "describe_volumes", "Volumes")]


def _launch_templates(ec2: Any) -> list[dict[str, Any]]:
    """Each template with its latest (and default, when different) version."""
    templates = []
    for template in _pages(ec2, "describe_launch_templates", "LaunchTemplates"):
        versions = ec2.describe_launch_template_versions(
            LaunchTemplateId=template["LaunchTemplateId"], Versions=["$Latest", "$Default"]
        ).get("LaunchTemplateVersions") or []
        unique = {v.get("VersionNumber"): v for v in versions}
        templates.append(_plain({**template, "Versions": list(unique.values())}))
    return templates


def _ebs_encryption_by_default(ec2: Any) -> bool:
    return bool(ec2.get_ebs_encryption_by_default().get("EbsEncryptionByDefault"))


def _aws_managed_key_aliases(kms: Any) -> list[dict[str, Any]]:
    aliases = _pages(kms, "list_aliases", "Aliases")
    return [{"AliasName": a["AliasName"], "TargetKeyId": a.get("TargetKeyId")}
            for a in aliases if str(a.get("AliasName", "")).startswith("alias/aws/")]


def _autoscaling_groups(autoscaling: Any) -> list[dict[str, Any]]:
    return [_plain(g) for g in _pages(autoscaling, "describe_auto_scaling_groups",
                                      "AutoScalingGroups")]


def _launch_configurations(autoscaling: Any, groups: list[dict[str, Any]]
                           ) -> list[dict[str, Any]]:
    """The launch configurations the groups use (only those: they are a legacy)."""
    names = sorted({g["LaunchConfigurationName"] for g in groups
                    if g.get("LaunchConfigurationName")})
    found: list[dict[str, Any]] = []
    for start in range(0, len(names), 50):
        found.extend(_plain(c) for c in _pages(
            autoscaling, "describe_launch_configurations", "LaunchConfigurations",
            LaunchConfigurationNames=names[start:start + 50]))
    return found


def _node_groups(eks: Any) -> list[dict[str, Any]]:
    groups = []
    for cluster in _pages(eks, "list_clusters", "clusters"):
        for name in _pages(eks, "list_nodegroups", "nodegroups", clusterName=cluster):
            described = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)
            groups.append(_plain(described["nodegroup"]))
    return groups


def _sagemaker_tags(sagemaker: Any, arn: str) -> list[dict[str, Any]]:
    return [_plain(t) for t in _pages(sagemaker, "list_tags", "Tags", ResourceArn=arn)]


def _training_jobs(sagemaker: Any) -> list[dict[str, Any]]:
    """Jobs in progress: finished ones no longer spend."""
    jobs = []
    for summary in _pages(sagemaker, "list_training_jobs", "TrainingJobSummaries",
                          StatusEquals="InProgress"):
        job = sagemaker.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        jobs.append(_plain({**job, "Tags": _sagemaker_tags(sagemaker, job["TrainingJobArn"])}))
    return jobs


def _notebooks(sagemaker: Any) -> list[dict[str, Any]]:
    notebooks = []
    for summary in _pages(sagemaker, "list_notebook_instances", "NotebookInstances"):
        notebook = sagemaker.describe_notebook_instance(
            NotebookInstanceName=summary["NotebookInstanceName"])
        tags = _sagemaker_tags(sagemaker, notebook["NotebookInstanceArn"])
        notebooks.append(_plain({**notebook, "Tags": tags}))
    return notebooks


def _endpoints(sagemaker: Any) -> list[dict[str, Any]]:
    """Endpoints with their endpoint configuration (the variants' instance types)."""
    configs: dict[str, Any] = {}
    endpoints = []
    for summary in _pages(sagemaker, "list_endpoints", "Endpoints"):
        endpoint = sagemaker.describe_endpoint(EndpointName=summary["EndpointName"])
        name = endpoint.get("EndpointConfigName")
        if name and name not in configs:
            configs[name] = sagemaker.describe_endpoint_config(EndpointConfigName=name)
        endpoints.append(_plain({**endpoint, "EndpointConfig": configs.get(name) or {},
                                 "Tags": _sagemaker_tags(sagemaker, endpoint["EndpointArn"])}))
    return endpoints


@dataclass(frozen=True, slots=True)
class _Reader:
    section: str
    service: str
    read: Callable[[Any, Mapping[str, Any]], Any]  # (client, the scan so far) → section
    needs: str | None = None  # a section that must have been read first


_READERS: tuple[_Reader, ...] = (
    _Reader("instances", "ec2", lambda c, _: _instances(c)),
    _Reader("volumes", "ec2", lambda c, _: _volumes(c)),
    _Reader("launch_templates", "ec2", lambda c, _: _launch_templates(c)),
    _Reader("ebs_encryption_by_default", "ec2", lambda c, _: _ebs_encryption_by_default(c)),
    _Reader("kms_aws_managed_aliases", "kms", lambda c, _: _aws_managed_key_aliases(c)),
    _Reader("autoscaling_groups", "autoscaling", lambda c, _: _autoscaling_groups(c)),
    _Reader("launch_configurations", "autoscaling",
            lambda c, scan: _launch_configurations(c, scan["autoscaling_groups"]),
            needs="autoscaling_groups"),
    _Reader("node_groups", "eks", lambda c, _: _node_groups(c)),
    _Reader("training_jobs", "sagemaker", lambda c, _: _training_jobs(c)),
    _Reader("notebook_instances", "sagemaker", lambda c, _: _notebooks(c)),
    _Reader("endpoints", "sagemaker", lambda c, _: _endpoints(c)),
)
_ABORTS_REGION = frozenset({"credentials", "connection", "region"})


def scan_region(clients: AwsClients, account: Account, region: str, log: _RegionLog
                ) -> dict[str, Any]:
    """The native objects of one (account, region); a section that could not be read is
    absent, and its failure is in `log`."""
    scan: dict[str, Any] = {"account": account.account_id, "region": region}
    for reader in _READERS:
        if reader.needs is not None and reader.needs not in scan:
            continue
        log.attempted += 1
        try:
            scan[reader.section] = reader.read(clients.client(reader.service, region, account),
                                               scan)
        except _boto_errors() as exc:
            failure = classify(exc)
            log.failures.append((reader.service, failure))
            log.tally.failed(failure)
            if failure.kind in _ABORTS_REGION:
                break
            continue
        log.tally.ok()
    return scan


# ---------------------------------------------------------------------------- accounts, regions


def _caller_account(session: Any, region: str, tally: _Tally, warnings: list[str]
                    ) -> Account | None:
    account = Account(session)
    try:
        identity = make_client(session, "sts", region).get_caller_identity()
    except _boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        if failure.kind == "credentials":
            warnings.append(f"aws: default credentials: {failure.text}")
            return None
        warnings.append(f"aws: cannot tell the account id (sts GetCallerIdentity: "
                        f"{failure.text}); scanning anyway")
        return account
    account.account_id = str(identity.get("Account") or "") or None
    return account


def _assumed_account(base: Any, role_arn: str, region: str, tally: _Tally,
                     warnings: list[str]) -> Account | None:
    import boto3

    try:
        response = make_client(base, "sts", region).assume_role(
            RoleArn=role_arn, RoleSessionName=SESSION_NAME)
    except _boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        warnings.append(f"aws: cannot assume {role_arn}: {failure.text}; account skipped")
        return None
    credentials = response["Credentials"]
    session = boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=base.region_name,
    )
    return Account(session, account_id=role_arn.split(":")[4], role_arn=role_arn)


def _home_region(session: Any, requested: tuple[str, ...]) -> str:
    if session.region_name:
        return str(session.region_name)
    known = set(session.get_available_regions("ec2"))
    return next((region for region in requested if region in known), "us-east-1")


def account_regions(clients: AwsClients, account: Account, requested: tuple[str, ...],
                    tally: _Tally, warnings: list[str]) -> list[str]:
    """The regions to read in `account`: those asked for that exist and are enabled there,
    every enabled one for `all`, else the session's region."""
    home = _home_region(account.session, requested)
    if not requested:
        return [home]
    try:
        listed = clients.client("ec2", home, account).describe_regions(AllRegions=True)
    except _boto_errors() as exc:
        failure = classify(exc)
        tally.failed(failure)
        if failure.kind in ("credentials", "connection"):
            warnings.append(f"aws: account {account.label}: {failure.text}; account skipped")
            return []
        warnings.append(f"aws: account {account.label}: cannot list regions ({failure.text})")
        return [region for region in requested if region != "all"] or [home]
    status = {r["RegionName"]: r.get("OptInStatus", "opt-in-not-required")
              for r in listed.get("Regions") or []}
    enabled = [name for name, state in status.items() if state != "not-opted-in"]
    chosen: list[str] = []
    for region in requested:
        if region == "all":
            chosen.extend(sorted(enabled))
        elif region not in status:
            warnings.append(f"aws: account {account.label}: region {region!r} does not exist; "
                            "skipped")
        elif status[region] == "not-opted-in":
            warnings.append(f"aws: account {account.label}: region {region} is not enabled; "
                            "skipped")
        else:
            chosen.append(region)
    return list(dict.fromkeys(chosen))


def connect(options: ScanOptions, tally: _Tally, warnings: list[str]) -> AwsClients:
    """Sessions for every account to scan: each `--role-arn` assumed, else the ambient
    credentials (environment, profile, instance role)."""
    for arn in options.role_arns:
        if not _ROLE_ARN.match(arn):
            raise InputError(f"aws: --role-arn {arn!r} is not an IAM role ARN "
                             "(arn:aws:iam::123456789012:role/NAME)")
    base = base_session(options.profile)
    if not options.regions and not base.region_name:
        raise InputError("aws: no region: give --region (or 'all'), or set AWS_REGION or a "
                         "profile region")
    home = _home_region(base, options.regions)
    if options.role_arns:
        found = [_assumed_account(base, arn, home, tally, warnings) for arn in options.role_arns]
    else:
        found = [_caller_account(base, home, tally, warnings)]
    return AwsClients(account for account in found if account is not None)


# ---------------------------------------------------------------------------- collect


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source aws`: every account and region asked for, read concurrently."""
    if arg:
        raise InputError(f"--source aws takes no argument (got aws:{arg}); use --region, "
                         "--role-arn and --profile")
    tally, warnings = _Tally(), list[str]()
    clients = connect(options, tally, warnings)
    targets = [(account, region) for account in clients.accounts
               for region in account_regions(clients, account, options.regions, tally, warnings)]
    logs = [_RegionLog(account.label, region, tally) for account, region in targets]

    def scan(position: int) -> dict[str, Any]:
        account, region = targets[position]
        return scan_region(clients, account, region, logs[position])

    with ThreadPoolExecutor(max_workers=max(1, options.max_workers),
                            thread_name_prefix="gpuwarden-aws") as pool:
        scans = list(pool.map(scan, range(len(targets))))
    for log in logs:
        warnings.extend(log.warnings())
    if tally.succeeded == 0:
        raise InputError(_nothing_read(tally, warnings))
    resources = [r for scan in scans for r in region_resources(scan, catalog)]
    return Collected(resources=resources, snapshot={"aws": scans}, clients={"aws": clients},
                     warnings=warnings)


def _nothing_read(tally: _Tally, warnings: list[str]) -> str:
    if tally.failures and all(f.kind == "credentials" for f in tally.failures):
        return (f"aws: the credentials were rejected: {tally.failures[0].text} "
                "(refresh them, or check AWS_PROFILE / --profile)")
    first = warnings[0].removeprefix("aws: ") if warnings else "no account or region to read"
    more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
    return f"aws: nothing could be read: {first}{more}"


# ---------------------------------------------------------------------------- normalizing


def _tags(value: Any) -> dict[str, str]:
    """EC2/SageMaker `[{Key, Value}]` lists and EKS `{key: value}` maps alike."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return {str(t["Key"]): str(t.get("Value") or "") for t in value
                if isinstance(t, Mapping) and t.get("Key")}
    return {}


def _name(tags: Mapping[str, str], fallback: str) -> str:
    return tags.get("Name") or fallback


def _enrich(resource: Resource, catalog: Catalog) -> Resource:
    """Catalog GPU spec and price; an `ml.` type is priced as the EC2 type it runs on."""
    instance_type = resource.instance_type
    if instance_type and instance_type.startswith("ml."):
        ec2 = resource.model_copy(update={"instance_type": instance_type[3:]})
        return enrich(ec2, catalog).model_copy(update={"instance_type": instance_type})
    return enrich(resource, catalog)


@dataclass(frozen=True)
class _Region:
    """One scanned (account, region), with the joins its normalizers need."""

    scan: Mapping[str, Any]
    catalog: Catalog

    @property
    def account(self) -> str | None:
        value = self.scan.get("account")
        return str(value) if value else None

    @property
    def region(self) -> str | None:
        value = self.scan.get("region")
        return str(value) if value else None

    def items(self, section: str) -> list[dict[str, Any]]:
        value = self.scan.get(section)
        return [item for item in value if isinstance(item, dict)] if isinstance(value, list) \
            else []

    def resource(self, **fields: Any) -> Resource:
        fields.setdefault("name", fields["id"])
        return _enrich(Resource(provider="aws", region=self.region, account=self.account,
                                **fields), self.catalog)

    @cached_property
    def templates(self) -> dict[str, dict[str, Any]]:
        """Launch templates by id and by name."""
        found: dict[str, dict[str, Any]] = {}
        for template in self.items("launch_templates"):
            for key in ("LaunchTemplateId", "LaunchTemplateName"):
                if template.get(key):
                    found[str(template[key])] = template
        return found

    @cached_property
    def aws_managed_keys(self) -> frozenset[str] | None:
        if "kms_aws_managed_aliases" not in self.scan:
            return None
        return frozenset(str(a.get("TargetKeyId")) for a in self.items("kms_aws_managed_aliases"))

    @cached_property
    def launch_configurations(self) -> dict[str, dict[str, Any]]:
        return {str(c.get("LaunchConfigurationName")): c
                for c in self.items("launch_configurations")}


def region_resources(scan: Mapping[str, Any], catalog: Catalog) -> list[Resource]:
    """Every resource of one scanned (account, region). Pure."""
    region = _Region(scan, catalog)
    members = _asg_members(region)
    instances = {str(i.get("InstanceId")): i for i in region.items("instances")}
    found = [instance_resource(region, i) for i in instances.values()
             if not _is_asg_member(i, members, "autoscaling_groups" in scan)]
    found.extend(volume_resource(region, v, instances) for v in region.items("volumes"))
    for template in region.items("launch_templates"):
        found.extend(launch_template_resources(region, template))
    managed = _eks_managed_groups(region)
    found.extend(autoscaling_group_resource(region, g) for g in region.items("autoscaling_groups")
                 if g.get("AutoScalingGroupName") not in managed
                 and "eks:nodegroup-name" not in _tags(g.get("Tags")))
    found.extend(node_group_resource(region, g) for g in region.items("node_groups"))
    found.extend(training_job_resource(region, j) for j in region.items("training_jobs"))
    found.extend(r for n in region.items("notebook_instances")
                 if (r := notebook_resource(region, n)) is not None)
    for endpoint in region.items("endpoints"):
        found.extend(endpoint_resources(region, endpoint))
    return found


# EC2 ---------------------------------------------------------------------------------------

_INSTANCE_STATES = {"pending": State.RUNNING, "running": State.RUNNING,
                    "stopping": State.STOPPED, "stopped": State.STOPPED}


def _asg_members(region: _Region) -> set[str]:
    return {str(i.get("InstanceId")) for g in region.items("autoscaling_groups")
            for i in g.get("Instances") or [] if isinstance(i, Mapping)}


def _is_asg_member(instance: Mapping[str, Any], members: set[str], groups_read: bool) -> bool:
    if not groups_read:
        return False  # no group was read to stand for it: keep its spend visible
    return instance.get("InstanceId") in members or _ASG_MEMBER_TAG in _tags(instance.get("Tags"))


def instance_resource(region: _Region, instance: Mapping[str, Any]) -> Resource:
    tags = _tags(instance.get("Tags"))
    instance_id = str(instance["InstanceId"])
    state = str((instance.get("State") or {}).get("Name") or "")
    spot = instance.get("InstanceLifecycle") == "spot"
    return region.resource(
        kind="aws_instance", category=Category.INSTANCE, id=instance_id,
        name=_name(tags, instance_id), tags=tags, instance_type=instance.get("InstanceType"),
        capacity=Capacity.SPOT if spot else Capacity.ON_DEMAND,
        state=_INSTANCE_STATES.get(state, State.UNKNOWN), raw=dict(instance),
    )


def customer_key(kms_key_id: Any, aws_managed: frozenset[str] | None) -> bool | None:
    """Whether an EBS KMS key is customer managed; None when that cannot be told."""
    if not kms_key_id:
        return False
    key = str(kms_key_id)
    if key.startswith("alias/aws/") or ":alias/aws/" in key:
        return False
    if aws_managed is None:
        return None
    return key.rsplit("/", 1)[-1] not in aws_managed


_VOLUME_STATES = {"in-use": State.RUNNING, "available": State.STOPPED}


def volume_resource(region: _Region, volume: Mapping[str, Any],
                    instances: Mapping[str, Mapping[str, Any]]) -> Resource:
    own = _tags(volume.get("Tags"))
    attached = [str(a.get("InstanceId")) for a in volume.get("Attachments") or []
                if isinstance(a, Mapping) and a.get("InstanceId")]
    parent_tags: dict[str, str] = {}
    for instance_id in attached:
        parent_tags.update(_tags((instances.get(instance_id) or {}).get("Tags")))
    parent_tags.pop("Name", None)
    encrypted = bool(volume.get("Encrypted"))
    key = customer_key(volume.get("KmsKeyId"), region.aws_managed_keys) if encrypted else False
    volume_id = str(volume["VolumeId"])
    return region.resource(
        kind="aws_ebs_volume", category=Category.VOLUME, id=volume_id, name=_name(own, volume_id),
        tags={**parent_tags, **own}, encrypted=encrypted, customer_key=key,
        unknown=frozenset() if key is not None else frozenset({"customer_key"}),
        state=_VOLUME_STATES.get(str(volume.get("State")), State.UNKNOWN),
        owner=attached[0] if attached else None, raw=dict(volume),
    )


def _template_version(template: Mapping[str, Any], version: Any = "$Latest"
                      ) -> dict[str, Any]:
    """The launch template data of `version` ($Latest, $Default or a number) when it was read,
    else of the latest version read."""
    versions = [v for v in template.get("Versions") or [] if isinstance(v, Mapping)]
    if not versions:
        return {}
    chosen: Mapping[str, Any] | None = None
    if version == "$Default":
        chosen = next((v for v in versions if v.get("DefaultVersion")), None)
    elif version not in (None, "$Latest"):
        chosen = next((v for v in versions if str(v.get("VersionNumber")) == str(version)), None)
    if chosen is None:
        chosen = max(versions, key=lambda v: int(v.get("VersionNumber") or 0))
    data = chosen.get("LaunchTemplateData")
    return dict(data) if isinstance(data, Mapping) else {}


def _market_capacity(data: Mapping[str, Any]) -> Capacity:
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    return Capacity.SPOT if str(market).lower() == "spot" else Capacity.ON_DEMAND


def _instance_tag_specifications(data: Mapping[str, Any]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for spec in data.get("TagSpecifications") or []:
        if isinstance(spec, Mapping) and spec.get("ResourceType") in (None, "instance"):
            tags.update(_tags(spec.get("Tags")))
    return tags


def launch_template_resources(region: _Region, template: Mapping[str, Any]) -> list[Resource]:
    data = _template_version(template)
    tags = {**_tags(template.get("Tags")), **_instance_tag_specifications(data)}
    template_id = str(template["LaunchTemplateId"])
    resource = region.resource(
        kind="aws_launch_template", category=Category.LAUNCH_TEMPLATE, id=template_id,
        name=str(template.get("LaunchTemplateName") or template_id), tags=tags,
        instance_type=data.get("InstanceType"), capacity=_market_capacity(data),
        raw=dict(template),
    )
    disks = [
        _template_disk(region, resource, position, mapping["Ebs"])
        for position, mapping in enumerate(data.get("BlockDeviceMappings") or [])
        if isinstance(mapping, Mapping) and isinstance(mapping.get("Ebs"), Mapping)
    ]
    return [resource, *disks]


def _template_disk(region: _Region, template: Resource, position: int,
                   ebs: Mapping[str, Any]) -> Resource:
    """A launch template's EBS mapping; unset `Encrypted` follows the region's default (a disk
    from a snapshot inherits the snapshot's encryption: unknown). Encrypted without a KmsKeyId
    uses the account's default EBS key, which may be a customer key: unknown."""
    explicit, by_default = ebs.get("Encrypted"), region.scan.get("ebs_encryption_by_default")
    encrypted: bool | None = None
    if isinstance(explicit, bool):
        encrypted = explicit
    elif by_default is True:
        encrypted = True
    elif by_default is False and not ebs.get("SnapshotId"):
        encrypted = False
    key: bool | None = None
    if encrypted is False:
        key = False
    elif encrypted and ebs.get("KmsKeyId"):
        key = customer_key(ebs["KmsKeyId"], region.aws_managed_keys)
    unknown = {name for name, value in (("encrypted", encrypted), ("customer_key", key))
               if value is None}
    return region.resource(
        kind="aws_launch_template.block_device_mappings", category=Category.VOLUME,
        id=f"{template.id}.block_device_mappings[{position}]", tags=dict(template.tags),
        encrypted=encrypted, customer_key=key, unknown=frozenset(unknown), raw=dict(ebs),
    )


# Autoscaling -------------------------------------------------------------------------------


def _asg_tags(group: Mapping[str, Any]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for tag in group.get("Tags") or []:
        if not isinstance(tag, Mapping) or not tag.get("Key"):
            continue
        key = str(tag["Key"])
        if (tag.get("PropagateAtLaunch") is not False or is_environment_key(key)
                or key.lower().startswith("gpuwarden")):
            tags[key] = str(tag.get("Value") or "")
    return tags


def _distribution_capacity(policy: Mapping[str, Any]) -> Capacity:
    """All spot when no on-demand base and 0% on-demand above it (AWS defaults: 0 and 100)."""
    distribution = policy.get("InstancesDistribution") or {}
    base = distribution.get("OnDemandBaseCapacity", 0)
    above = distribution.get("OnDemandPercentageAboveBaseCapacity", 100)
    return Capacity.SPOT if (base or 0) == 0 and (above or 0) == 0 else Capacity.ON_DEMAND


def _asg_launch(region: _Region, group: Mapping[str, Any]
                ) -> tuple[str | None, Capacity, dict[str, str], set[str]]:
    """(instance type, capacity, tags from the template, unknown paths) of a group."""
    templates = region.templates
    policy = group.get("MixedInstancesPolicy")
    spec = group.get("LaunchTemplate")
    if isinstance(policy, Mapping):
        launch = policy.get("LaunchTemplate") or {}
        spec = launch.get("LaunchTemplateSpecification") or {}
        overrides = [o for o in launch.get("Overrides") or [] if isinstance(o, Mapping)]
    else:
        overrides = []
    data: dict[str, Any] | None = None
    if isinstance(spec, Mapping) and spec:
        template = templates.get(str(spec.get("LaunchTemplateId"))) \
            or templates.get(str(spec.get("LaunchTemplateName")))
        data = _template_version(template, spec.get("Version")) if template else None
    elif group.get("LaunchConfigurationName"):
        configuration = region.launch_configurations.get(str(group["LaunchConfigurationName"]))
        if configuration is not None:
            capacity = Capacity.SPOT if configuration.get("SpotPrice") else Capacity.ON_DEMAND
            return configuration.get("InstanceType"), capacity, {}, set()
    unknown: set[str] = set()
    typed = [str(o["InstanceType"]) for o in overrides if o.get("InstanceType")]
    instance_type = typed[0] if typed else (data or {}).get("InstanceType")
    if instance_type is None:
        unknown |= _TYPE_UNKNOWN  # attribute-based selection, or a template not read
    if isinstance(policy, Mapping):
        capacity = _distribution_capacity(policy)
    elif data is not None:
        capacity = _market_capacity(data)
    else:
        capacity = Capacity.UNKNOWN
        unknown.add("capacity")
    return instance_type, capacity, _instance_tag_specifications(data or {}), unknown


def autoscaling_group_resource(region: _Region, group: Mapping[str, Any]) -> Resource:
    instance_type, capacity, template_tags, unknown = _asg_launch(region, group)
    desired = int(group.get("DesiredCapacity") or 0)
    return region.resource(
        kind="aws_autoscaling_group", category=Category.AUTOSCALING_GROUP,
        id=str(group.get("AutoScalingGroupARN") or group["AutoScalingGroupName"]),
        name=str(group["AutoScalingGroupName"]), tags={**template_tags, **_asg_tags(group)},
        instance_type=instance_type, capacity=capacity, count=desired,
        state=State.RUNNING if desired > 0 else State.STOPPED, unknown=frozenset(unknown),
        raw=dict(group),
    )


# EKS ---------------------------------------------------------------------------------------


def _eks_managed_groups(region: _Region) -> set[str]:
    return {str(asg.get("name")) for group in region.items("node_groups")
            for asg in (group.get("resources") or {}).get("autoScalingGroups") or []
            if isinstance(asg, Mapping)}


def node_group_resource(region: _Region, group: Mapping[str, Any]) -> Resource:
    scaling = group.get("scalingConfig") or {}
    desired = int(scaling.get("desiredSize") or 0)
    types = group.get("instanceTypes") or []
    unknown: set[str] = set()
    instance_type: str | None = str(types[0]) if types else None
    template_spec = group.get("launchTemplate")
    if instance_type is None and isinstance(template_spec, Mapping):
        templates = region.templates
        template = templates.get(str(template_spec.get("id"))) \
            or templates.get(str(template_spec.get("name")))
        instance_type = _template_version(template, template_spec.get("version")).get(
            "InstanceType") if template else None
        if instance_type is None:
            unknown |= _TYPE_UNKNOWN
    elif instance_type is None:
        instance_type = _EKS_DEFAULT_INSTANCE_TYPE
    spot = str(group.get("capacityType") or "ON_DEMAND").upper() == "SPOT"
    return region.resource(
        kind="aws_eks_node_group", category=Category.NODE_GROUP,
        id=str(group.get("nodegroupArn") or group["nodegroupName"]),
        name=str(group["nodegroupName"]), cluster=group.get("clusterName"),
        tags={**_tags(group.get("labels")), **_tags(group.get("tags"))},
        instance_type=instance_type, capacity=Capacity.SPOT if spot else Capacity.ON_DEMAND,
        count=desired, state=State.RUNNING if desired > 0 else State.STOPPED,
        unknown=frozenset(unknown), raw=dict(group),
    )


# SageMaker ---------------------------------------------------------------------------------


def training_job_resource(region: _Region, job: Mapping[str, Any]) -> Resource:
    config = job.get("ResourceConfig") or {}
    groups = [g for g in config.get("InstanceGroups") or [] if isinstance(g, Mapping)]
    instance_type = config.get("InstanceType") or (groups[0].get("InstanceType") if groups
                                                   else None)
    count = config.get("InstanceCount") or sum(int(g.get("InstanceCount") or 0) for g in groups)
    running = job.get("TrainingJobStatus") == "InProgress"
    return region.resource(
        kind="aws_sagemaker_training_job", category=Category.TRAINING_JOB,
        id=str(job.get("TrainingJobArn") or job["TrainingJobName"]),
        name=str(job["TrainingJobName"]), tags=_tags(job.get("Tags")),
        instance_type=instance_type, count=int(count or 1),
        capacity=Capacity.SPOT if job.get("EnableManagedSpotTraining") else Capacity.ON_DEMAND,
        encrypted=True, customer_key=bool(config.get("VolumeKmsKeyId")),
        checkpoint_uri=_checkpoint_uri(job),
        state=State.RUNNING if running else State.STOPPED,
        unknown=frozenset() if instance_type else _TYPE_UNKNOWN, raw=dict(job),
    )


def _checkpoint_uri(job: Mapping[str, Any]) -> str | None:
    config = job.get("CheckpointConfig")
    uri = config.get("S3Uri") if isinstance(config, Mapping) else None
    return uri if isinstance(uri, str) and uri else None


_NOTEBOOK_STATES = {"Pending": State.RUNNING, "InService": State.RUNNING,
                    "Updating": State.RUNNING, "Stopping": State.STOPPED,
                    "Stopped": State.STOPPED, "Failed": State.STOPPED}


def notebook_resource(region: _Region, notebook: Mapping[str, Any]) -> Resource | None:
    status = str(notebook.get("NotebookInstanceStatus") or "")
    if status == "Deleting":
        return None
    return region.resource(
        kind="aws_sagemaker_notebook_instance", category=Category.NOTEBOOK,
        id=str(notebook.get("NotebookInstanceArn") or notebook["NotebookInstanceName"]),
        name=str(notebook["NotebookInstanceName"]), tags=_tags(notebook.get("Tags")),
        instance_type=notebook.get("InstanceType"), capacity=Capacity.ON_DEMAND,
        encrypted=True, customer_key=bool(notebook.get("KmsKeyId")),
        state=_NOTEBOOK_STATES.get(status, State.UNKNOWN), raw=dict(notebook),
    )


_ENDPOINT_STOPPED = frozenset({"OutOfService"})
_ENDPOINT_GONE = frozenset({"Failed", "Deleting"})


def endpoint_resources(region: _Region, endpoint: Mapping[str, Any]) -> list[Resource]:
    """One ENDPOINT per instance-backed (not serverless) production variant."""
    status = str(endpoint.get("EndpointStatus") or "")
    if status in _ENDPOINT_GONE:
        return []
    config = endpoint.get("EndpointConfig") or {}
    current = {str(v.get("VariantName")): v for v in endpoint.get("ProductionVariants") or []
               if isinstance(v, Mapping)}
    arn = str(endpoint.get("EndpointArn") or endpoint["EndpointName"])
    found = []
    for variant in config.get("ProductionVariants") or []:
        if not isinstance(variant, Mapping) or not variant.get("InstanceType"):
            continue
        name = str(variant.get("VariantName"))
        live = current.get(name) or {}
        count = live.get("CurrentInstanceCount", variant.get("InitialInstanceCount")) or 0
        found.append(region.resource(
            kind="aws_sagemaker_endpoint", category=Category.ENDPOINT, id=f"{arn}/{name}",
            name=f"{endpoint['EndpointName']}/{name}", tags=_tags(endpoint.get("Tags")),
            instance_type=variant["InstanceType"], count=int(count),
            capacity=Capacity.ON_DEMAND, encrypted=True,
            customer_key=bool(config.get("KmsKeyId")),
            state=State.STOPPED if status in _ENDPOINT_STOPPED else State.RUNNING,
            raw={**endpoint, "Variant": variant},
        ))
    return found


# ---------------------------------------------------------------------------- snapshots


def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """The `aws:` section of a snapshot: a list of scanned (account, region) natives."""
    if not isinstance(value, list):
        raise InputError("aws must be a list of scanned regions ({account, region, ...})",
                         file=ctx.file)
    found: list[Resource] = []
    for position, scan in enumerate(value):
        if not isinstance(scan, Mapping) or not isinstance(scan.get("region"), str):
            raise InputError(f"aws[{position}] needs a 'region'", file=ctx.file)
        try:
            found.extend(region_resources(scan, ctx.catalog))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problem = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) \
                else _one_line(exc)
            raise InputError(f"aws[{position}] ({scan['region']}): unreadable object: "
                             f"{type(exc).__name__} {problem}", file=ctx.file) from None
    return found
