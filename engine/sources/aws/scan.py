"""`--source aws`: every (account, region) read concurrently by a bounded thread pool, then
normalized. Reading and normalizing are separate: `scan_region` returns the native objects (made
JSON-safe), which are also the snapshot's `aws:` section."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.core.catalog import Catalog
from engine.core.errors import InputError
from engine.sources.aws.clients import Account, AwsClients
from engine.sources.aws.discovery import account_regions, connect
from engine.sources.aws.failures import ABORTS_REGION, RegionLog, Tally, boto_errors, classify
from engine.sources.aws.inventory import SECTIONS, region_resources
from engine.sources.aws.organization import connect_organization
from engine.sources.registry import Collected, ScanOptions


def scan_region(clients: AwsClients, account: Account, region: str, log: RegionLog
                ) -> dict[str, Any]:
    """The native objects of one (account, region); a section that could not be read is
    absent, and its failure is in `log`."""
    scan: dict[str, Any] = {"account": account.account_id, "region": region}
    for entry in SECTIONS:
        if entry.needs is not None and entry.needs not in scan:
            continue
        log.attempted += 1
        try:
            scan[entry.name] = entry.read(clients.client(entry.service, region, account), scan)
        except boto_errors() as exc:
            failure = classify(exc)
            log.failures.append((entry.service, failure))
            log.tally.failed(failure)
            if failure.kind in ABORTS_REGION:
                break
            continue
        log.tally.ok()
    return scan


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source aws`: every account and region asked for, read concurrently."""
    if arg:
        raise InputError(f"--source aws takes no argument (got aws:{arg}); use --region, "
                         "--role-arn and --profile")
    tally, warnings = Tally(), list[str]()
    clients = (connect_organization if options.organization else connect)(options, tally, warnings)
    targets = [(account, region) for account in clients.accounts
               for region in account_regions(clients, account, options.regions, tally, warnings)]
    logs = [RegionLog(account.label, region, tally) for account, region in targets]

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


def _nothing_read(tally: Tally, warnings: list[str]) -> str:
    if tally.failures and all(f.kind == "credentials" for f in tally.failures):
        return (f"aws: the credentials were rejected: {tally.failures[0].text} "
                "(refresh them, or check AWS_PROFILE / --profile)")
    first = warnings[0].removeprefix("aws: ") if warnings else "no account or region to read"
    more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
    return f"aws: nothing could be read: {first}{more}"
