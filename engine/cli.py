"""The `gpuwarden` command line. Thin: parse options, call the pipeline, print, exit.

Exit codes: 0 no gating finding, 1 gating findings, 2 bad input or usage (one line on stderr).
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from engine import console
from engine.core.errors import ECHO_LIMIT, LINE_LIMIT, InputError, printable
from engine.core.model import Report, Resource, Severity
from engine.history import commands as history_commands
from engine.outputs.registry import FORMATS

if TYPE_CHECKING:
    from engine.notify.targets import Target
    from engine.pipeline import ScanRequest
    from remediations.runner import Deadline

app = typer.Typer(
    name="gpuwarden",
    help="Policy-as-code guardrails for GPU cloud spend.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
policies_app = typer.Typer(help="List, show, validate policies; print their JSON Schema.",
                           no_args_is_help=True)
app.add_typer(policies_app, name="policies")
telemetry_app = typer.Typer(help="GPU telemetry: this node through NVML, or the readings a scan "
                            "joins to resources.", no_args_is_help=True)
app.add_typer(telemetry_app, name="telemetry")

PoliciesOpt = Annotated[
    list[str] | None,
    typer.Option("--policies", help="Policy file or directory (repeatable); 'builtin' is the "
                 "built-in pack. Default: builtin."),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="|".join(FORMATS))]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Write the report here.")]
FailOnOpt = Annotated[Severity, typer.Option("--fail-on", help="Lowest severity that fails.")]
NowOpt = Annotated[str | None, typer.Option("--now", help="Evaluation clock, ISO 8601.")]
HistoryOpt = Annotated[str | None, typer.Option(
    "--history", metavar="URL", help="Run history: an SQLite file (sqlite:///path.db or a path) "
    "or s3://bucket/prefix/; each run's report and snapshot are recorded.")]
UnknownOpt = Annotated[str, typer.Option("--unknown", help="warn|fail|pass")]
SoftFailOpt = Annotated[bool, typer.Option("--soft-fail", help="Always exit 0 on findings.")]
ShowPassedOpt = Annotated[bool, typer.Option("--show-passed", help="List passes too.")]
PricesOpt = Annotated[Path | None, typer.Option("--prices", help="CSV of instance_type,"
                                                "on_demand_usd_hr overriding list prices.")]
CatalogOpt = Annotated[Path | None, typer.Option("--catalog", help="CSV of instance types to add "
                                                 "or override (the columns of instance_types.csv;"
                                                 " region,on_demand_usd_per_h optional).")]
SourceOpt = Annotated[list[str] | None, typer.Option(
    "--source", help="aws | gcp | azure | k8s | snapshot:FILE (repeatable)")]
KubeconfigOpt = Annotated[str | None, typer.Option(
    "--kubeconfig", help="kubeconfig for --source k8s (default: in-cluster or ~/.kube/config).")]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context.")]
PrometheusUrlOpt = Annotated[str | None, typer.Option(
    "--prometheus-url", help="Prometheus with DCGM exporter metrics, for GPU telemetry.")]
PrometheusTokenOpt = Annotated[str | None, typer.Option(
    "--prometheus-token", envvar="GPUWARDEN_PROMETHEUS_TOKEN", help="Bearer token.")]
PrometheusBasicAuthOpt = Annotated[str | None, typer.Option(
    "--prometheus-basic-auth", envvar="GPUWARDEN_PROMETHEUS_BASIC_AUTH", help="user:password.")]
PrometheusCaOpt = Annotated[str | None, typer.Option(
    "--prometheus-ca", help="CA bundle for Prometheus TLS.")]
DcgmUrlOpt = Annotated[str | None, typer.Option(
    "--dcgm-url", help="A dcgm-exporter /metrics endpoint, for an instant reading.")]
WindowOpt = Annotated[int, typer.Option(
    "--telemetry-window", min=60, help="Telemetry look-back window in seconds.")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress or informational lines on stderr (warnings and errors "
    "still print).")]
INTERRUPTED = 130
DEBUG_HINT = "rerun as 'gpuwarden --log-level debug ...' for the traceback"


def _show_version(value: bool) -> None:
    if value:
        from engine import installed_version
        from engine.core.compiled import core_kind

        typer.echo(f"gpuwarden {installed_version()} (core: {core_kind()})")
        raise typer.Exit(0)


@app.callback()
def root(
    _version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_show_version, help="Print the version and exit.")
    ] = False,
    log_level: Annotated[str, typer.Option(
        "--log-level", envvar="GPUWARDEN_LOG_LEVEL", help="debug|info|warning|error. Provider "
        "SDKs log errors only, unless debug; debug also prints tracebacks.")] = "warning",
) -> None:
    """Policy-as-code guardrails for GPU cloud spend."""
    _check_choice("--log-level", log_level, console.LOG_LEVELS)
    console.configure_logging(log_level)


def _fail(message: str) -> NoReturn:
    typer.echo(_error_line(message), err=True)
    raise typer.Exit(2)


def _error_line(message: str) -> str:
    return f"gpuwarden: error: {printable(message, LINE_LIMIT)}"


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        _fail(f"{name}: {printable(value)!r} is not one of {', '.join(choices)}")


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        output.write_text(text, "utf-8")
    except OSError as exc:
        raise InputError(f"cannot write report: {exc.strerror or exc}", file=str(output)) from None


def _finish(report: Report, engine: object, fmt: str, output: Path | None,
            source_file: str | None, fail_on: Severity, unknown: str, soft_fail: bool,
            quiet: bool = False, *, by_account: bool = False,
            extras: dict[str, Any] | None = None) -> NoReturn:
    from engine.core.evaluate import Engine
    from engine.outputs.registry import render
    from engine.pipeline import Gate, apply_unknown_mode, render_context

    assert isinstance(engine, Engine)
    report = apply_unknown_mode(report, unknown)  # type: ignore[arg-type]
    if fmt == "table" and output is None and console.wants_colour(sys.stdout):
        from engine.outputs.table import renderables

        width = console.report_width(sys.stdout)
        console.print_renderable(renderables(render_context(report, engine, source_file, width,
                                                            by_account=by_account)))
    else:
        width = console.report_width(sys.stdout if output is None else None)
        context = render_context(report, engine, source_file, width, by_account=by_account)
        if fmt == "json" and output is not None:  # a piece at a time: reports can be large
            from engine.outputs.json_report import write_file

            write_file(context, output)
        else:
            _emit(render(fmt, replace(context, **(extras or {}))), output)
    if output is not None:
        count = len(report.findings)
        console.note(f"wrote {fmt} report to {output} ({count} finding{'s' * (count != 1)})",
                     quiet=quiet)
    code = Gate(fail_on, unknown, soft_fail).exit_code(report)  # type: ignore[arg-type]
    raise typer.Exit(code)


@app.command("check-plan")
def check_plan(
    plans: Annotated[list[str], typer.Argument(
        metavar="PLAN...", help="terraform show -json output(s), or - for stdin"
    )],
    policies: PoliciesOpt = None,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    fail_on: FailOnOpt = Severity.INFO,
    now: NowOpt = None,
    unknown: UnknownOpt = "warn",
    soft_fail: SoftFailOpt = False,
    show_passed: ShowPassedOpt = False,
    prices: PricesOpt = None,
    catalog: CatalogOpt = None,
    tf_dir: Annotated[Path | None, typer.Option(
        "--tf-dir", help="Terraform configuration directory, to point findings at .tf lines."
    )] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="Accept the findings "
                                                  "listed in this baseline file.")] = None,
    write_baseline: Annotated[Path | None, typer.Option("--write-baseline", help="Write the "
                                                        "current findings as a baseline.")] = None,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """PR check: evaluate Terraform plans (JSON) against the policies."""
    _check_choice("--format", fmt, FORMATS)
    _check_choice("--unknown", unknown, ("warn", "fail", "pass"))
    from engine.pipeline import build_engine, evaluate_and_plan, parse_instant
    from engine.sources.terraform import read_plan_inputs

    instant = parse_instant(now)
    engine = build_engine(policies, prices, catalog)
    # The plan documents are kept only for policies that read whole plans (`input: plan`).
    inputs = read_plan_inputs(plans, engine.catalog, keep_documents=any(
        p.rego is not None and p.rego.reads_documents for p in engine.policies))
    resources = inputs.resources
    if tf_dir is not None:
        resources = _with_locations(resources, tf_dir)
    report = evaluate_and_plan(engine, resources, instant, door="plan", show_passed=show_passed,
                               plans=inputs.documents, cost_changes=inputs.cost_changes)
    if write_baseline is not None:
        from engine.baseline import baseline_document

        write_baseline.write_bytes(baseline_document(report, instant))
    if baseline is not None:
        from engine.baseline import apply_baseline, read_baseline

        report = apply_baseline(report, read_baseline(baseline))
    if history is not None:
        from engine.history.record import record_run, resources_snapshot
        from engine.pipeline import render_report

        record_run(history, at=instant, command="check-plan", source=",".join(plans),
                   report_json=render_report(report, "json", engine),
                   snapshot=resources_snapshot(resources))
    source = _display_path(plans[0]) if len(plans) == 1 else None
    _finish(report, engine, fmt, output, source, fail_on, unknown, soft_fail, quiet,
            extras=history_commands.html_extras(fmt, resources, engine, history))


@app.command("check-manifests")
def check_manifests(
    paths: Annotated[list[str], typer.Argument(
        metavar="PATH...", help="Kubernetes manifests (YAML/JSON files, directories), or - for "
        "stdin")],
    policies: PoliciesOpt = None,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    fail_on: FailOnOpt = Severity.INFO,
    now: NowOpt = None,
    unknown: UnknownOpt = "warn",
    soft_fail: SoftFailOpt = False,
    show_passed: ShowPassedOpt = False,
    prices: PricesOpt = None,
    catalog: CatalogOpt = None,
    namespace_labels: Annotated[str | None, typer.Option(
        "--namespace-labels", help="YAML mapping of namespace to its labels (production is "
        "read from them); Namespace objects among the manifests count too.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """PR check: judge Kubernetes manifests as the admission webhook would."""
    _check_choice("--format", fmt, FORMATS)
    _check_choice("--unknown", unknown, ("warn", "fail", "pass"))
    from engine.manifests import (
        admission_resources,
        namespace_labels_in,
        read_manifests,
        read_namespace_labels,
    )
    from engine.pipeline import build_engine, evaluate_and_plan, parse_instant

    instant = parse_instant(now)
    engine = build_engine(policies, prices, catalog)
    manifests = read_manifests(paths)
    labels = namespace_labels_in(manifests)
    if namespace_labels is not None:
        labels.update(read_namespace_labels(namespace_labels))
    resources = admission_resources(manifests, engine.catalog, labels)
    report = evaluate_and_plan(engine, resources, instant, door="admission",
                               show_passed=show_passed)
    source = _display_path(paths[0]) if len(paths) == 1 and not Path(paths[0]).is_dir() else None
    _finish(report, engine, fmt, output, source, fail_on, unknown, soft_fail, quiet)


def _display_path(path: str) -> str | None:
    """The plan as SARIF should name it: relative to the working directory when inside it."""
    if path == "-":
        return None
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path


def _with_locations(resources: list[Resource], tf_dir: Path) -> list[Resource]:
    from engine.sources.terraform.locations import apply_locations, locate_resources

    if not tf_dir.is_dir():
        raise InputError("--tf-dir is not a directory", file=str(tf_dir))
    return apply_locations(resources, locate_resources(tf_dir))


@app.command("scan")
def scan(
    demo: Annotated[bool, typer.Option("--demo", help="Scan the bundled sample estate.")] = False,
    source: SourceOpt = None,
    policies: PoliciesOpt = None,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    fail_on: FailOnOpt = Severity.INFO,
    now: NowOpt = None,
    unknown: UnknownOpt = "warn",
    soft_fail: SoftFailOpt = False,
    show_passed: ShowPassedOpt = False,
    prices: PricesOpt = None,
    catalog: CatalogOpt = None,
    billing: Annotated[str | None, typer.Option("--billing", help="A FOCUS 1.x cost export: "
                                                "a file, a folder or s3://bucket/prefix/ (CSV, "
                                                "CSV.gz, or .parquet with the [billing] extra): "
                                                "resources in it are priced at their billed "
                                                "rate.")] = None,
    enforce: Annotated[bool, typer.Option(
        "--enforce", help="Apply remediations (default: dry-run, which changes nothing).")] = False,
    max_actions: Annotated[int, typer.Option(
        "--max-actions", min=0, help="Enforce: most changes in one run (blast radius).")] = 10,
    audit_log: Annotated[Path, typer.Option(
        "--audit-log", help="Enforce: JSONL audit log (appended).")
    ] = Path("gpuwarden-audit.jsonl"),
    deadline: Annotated[float | None, typer.Option(
        "--deadline", min=0, metavar="SECONDS", help="Enforce: start no action later than "
        "SECONDS after the scan began; the rest are skipped as 'deadline reached'.")] = None,
    save_snapshot: Annotated[Path | None, typer.Option(
        "--save-snapshot", help="Save what the sources read, to replay with snapshot:FILE.")
    ] = None,
    notify: Annotated[list[str] | None, typer.Option(
        "--notify", metavar="URL", help="Send new failing findings, once, as one digest: a "
        "Slack incoming webhook, any other http(s) URL (JSON), or sns:ARN (repeatable).")
    ] = None,
    notify_state: Annotated[Path | None, typer.Option(
        "--notify-state", help="Which findings were already notified (default: "
        "gpuwarden-notified.json next to --audit-log).")] = None,
    region: Annotated[list[str] | None, typer.Option(
        "--region", help="AWS regions (repeatable; default: the profile's region).")] = None,
    role_arn: Annotated[list[str] | None, typer.Option(
        "--role-arn", help="AWS role to assume per account (repeatable).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="AWS profile.")] = None,
    project: Annotated[list[str] | None, typer.Option(
        "--project", help="GCP projects (repeatable; default: all the credentials see).")] = None,
    subscription: Annotated[list[str] | None, typer.Option(
        "--subscription", help="Azure subscriptions (repeatable; default: all visible).")
    ] = None,
    organization: Annotated[bool, typer.Option(
        "--organization", help="Whole organisations: every active AWS account of the "
        "organization (through --role-name), every active GCP project (under --folder), every "
        "enabled Azure subscription; outputs group findings by account.")] = False,
    role_name: Annotated[str | None, typer.Option(
        "--role-name", help="--organization: the role assumed in each AWS member account "
        "(default OrganizationAccountAccessRole).")] = None,
    folder: Annotated[list[str] | None, typer.Option(
        "--folder", help="GCP: only the projects under this folder or organization "
        "(folders/ID or organizations/ID; repeatable; implies --organization).")] = None,
    max_accounts: Annotated[int, typer.Option(
        "--max-accounts", min=1, max=10_000, help="--organization: most accounts, projects or "
        "subscriptions read per provider.")] = 1000,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    prometheus_url: PrometheusUrlOpt = None,
    prometheus_token: PrometheusTokenOpt = None,
    prometheus_basic_auth: PrometheusBasicAuthOpt = None,
    prometheus_ca: PrometheusCaOpt = None,
    dcgm_url: DcgmUrlOpt = None,
    window: WindowOpt = 3600,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Scan live or exported state (or the demo estate) against the policies."""
    _check_choice("--format", fmt, FORMATS)
    _check_choice("--unknown", unknown, ("warn", "fail", "pass"))
    from engine.pipeline import ScanRequest, parse_instant, run_scan
    from engine.sources.registry import ScanOptions

    sources, policies = _scan_sources(demo, source, policies)
    if enforce and all(spec.startswith("snapshot") for spec in sources):
        _fail("--enforce acts on live state: give a live --source (aws, gcp, azure, k8s); "
              "snapshots and the demo are always dry-run")
    if role_name is not None and not organization:
        _fail("--role-name names the role assumed in each account of --organization; give "
              "--organization too (or --role-arn for single accounts)")
    options = ScanOptions(
        regions=tuple(region or ()), role_arns=tuple(role_arn or ()), profile=profile,
        projects=tuple(project or ()), subscriptions=tuple(subscription or ()),
        organization=organization or bool(folder), role_name=role_name,
        folders=tuple(folder or ()), max_accounts=max_accounts, kubeconfig=kubeconfig,
        context=context, prometheus_url=prometheus_url,
        prometheus_token=prometheus_token, prometheus_basic_auth=prometheus_basic_auth,
        prometheus_ca=prometheus_ca, dcgm_url=dcgm_url, telemetry_window_s=window,
    )
    instant = parse_instant(now)
    if enforce and now is not None:
        console.warn(f"enforcing with a replayed clock --now {instant.isoformat()}; actions run "
                     "against real resources")
    request = ScanRequest(
        sources=tuple(sources), options=options, now=instant, policies=tuple(policies or ()),
        prices=prices, mode="enforce" if enforce else "dry-run", show_passed=show_passed,
        catalog_file=catalog, billing=billing,
        max_actions=max_actions, deadline=_run_deadline(deadline), audit_log=audit_log,
        save_snapshot=save_snapshot, notify=_notify_targets(notify), notify_state=notify_state,
        keep_natives=history is not None or fmt == "html",
        notify_known=history_commands.notify_known(history, notify, instant, console.warn))
    result = run_scan(request, _ScanProgress(show=not quiet))
    if history is not None:
        history_commands.record_scan(history, request, result)
    _finish(result.report, result.engine, fmt, output, None, fail_on, unknown, soft_fail, quiet,
            by_account=options.organization, extras=history_commands.html_extras(
                fmt, result.collected.resources, result.engine, history))


def _notify_targets(values: list[str] | None) -> tuple[Target, ...]:
    if not values:
        return ()
    from engine.notify.targets import parse_targets

    return parse_targets(values)


def _scan_sources(demo: bool, source: list[str] | None, policies: list[str] | None
                  ) -> tuple[list[str], list[str] | None]:
    """The sources to read (the demo estate's snapshot with --demo) and the policies (the demo
    pack with --demo, unless --policies)."""
    sources = list(source or [])
    if demo:
        from engine.demo import demo_policy_paths, demo_snapshot_path

        sources.append(f"snapshot:{demo_snapshot_path()}")
        policies = policies or demo_policy_paths()
    if not sources:
        _fail("nothing to scan: give --demo or --source aws|gcp|azure|k8s|snapshot:FILE")
    return sources, policies


def _run_deadline(seconds: float | None) -> Deadline | None:
    if seconds is None:
        return None
    from remediations.runner import Deadline

    return Deadline.after(seconds)


@dataclass(frozen=True, slots=True)
class _ScanProgress:
    """The scan's hooks in a terminal: a delayed spinner while live sources are read, then
    their warnings on stderr."""

    show: bool

    def stage(self, name: str, fields: dict[str, Any]) -> AbstractContextManager[dict[str, Any]]:
        return nullcontext(fields)

    def reading(self, request: ScanRequest) -> AbstractContextManager[object]:
        live = [spec.partition(":")[0] for spec in request.sources
                if not spec.startswith("snapshot")]
        live += ["GPU telemetry"] if request.options.wants_telemetry else []
        return console.progress(f"reading {', '.join(live)}…", enabled=self.show and bool(live))

    def warning(self, message: str) -> None:
        console.warn(message)


@app.command("savings")
def savings_cmd(
    audit_log: Annotated[str, typer.Option(
        "--audit-log", help="Enforcement audit log (JSONL): a file, s3://bucket/key, or "
        "s3://bucket/prefix/ (every *.jsonl under it, as the Lambda writes them).")],
    since: Annotated[str | None, typer.Option("--since", help="Stops from (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="Still-stopped resources count until (ISO 8601; default now).")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table|json|markdown")] = "table",
) -> None:
    """What enforcement saved: each stop's hours until its resume × the rate it recorded,
    totalled by policy, team, account and month. A bad audit line: exit 2."""
    _check_choice("--format", fmt, ("table", "json", "markdown"))
    from engine.pipeline import parse_instant
    from remediations.ledger import read_audit_at, render, savings

    ledger = savings(read_audit_at(audit_log), since=parse_instant(since) if since else None,
                     until=parse_instant(until))
    typer.echo(render(ledger, fmt))


@app.command("offhours")
def offhours_cmd(
    schedule: Annotated[str, typer.Argument(help="offhours tag value, e.g. "
                                            "'off=(M-F,19);on=(M-F,7);tz=pt'")],
    at: Annotated[str | None, typer.Option("--at", help="Instant to explain (ISO 8601).")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text|json")] = "text",
) -> None:
    """Explain an off-hours schedule: valid or not, time zone, on/off at an instant, next
    transitions. Exit 2 when the schedule does not parse."""
    _check_choice("--format", fmt, ("text", "json"))
    import orjson

    from engine.core.offhours import explain
    from engine.pipeline import parse_instant

    result = explain(schedule, parse_instant(at))
    if fmt == "json":
        typer.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    elif result["valid"]:
        typer.echo(f"schedule   {result['schedule']}\ntimezone   {result['timezone']}\n"
                   f"at         {result['at']}: {result['state']}")
        for transition in result["next_transitions"]:
            typer.echo(f"next       {transition['at']}: {transition['state']}")
    if not result["valid"]:
        _fail(f"invalid schedule {printable(schedule)!r}: {result['error']}")


@policies_app.command("list")
def policies_list(policies: PoliciesOpt = None) -> None:
    """One line per policy: id, severity, enforcement per door, title."""
    from engine.core.policy import BUILTIN
    from engine.loading.policies import load_policies

    for policy in load_policies(policies or [BUILTIN]):
        doors = " ".join(f"{d}={policy.enforcement(d)}" for d in ("plan", "admission", "runtime"))
        typer.echo(f"{policy.id:<26} {policy.spec.severity.value:<8} {doors:<40} "
                   f"{policy.spec.title}")


@policies_app.command("show")
def policies_show(
    policy_id: Annotated[str, typer.Argument(metavar="ID")], policies: PoliciesOpt = None
) -> None:
    """Print one policy as loaded (after overrides), in YAML."""
    import yaml

    from engine.core.policy import BUILTIN
    from engine.loading.policies import load_policies

    found = {p.id: p for p in load_policies(policies or [BUILTIN])}
    if policy_id not in found:
        _fail(f"no policy {printable(policy_id)!r} (have: {', '.join(found)})")
    data = found[policy_id].spec.model_dump(mode="json")
    typer.echo(yaml.safe_dump(data, sort_keys=False, width=100).rstrip())


@policies_app.command("validate")
def policies_validate(paths: Annotated[list[str], typer.Argument(metavar="PATH...")]) -> None:
    """Load and compile policy files; exit 2 with file:line on the first error."""
    from engine.loading.policies import load_policies

    loaded = load_policies(paths)
    typer.echo(f"ok: {len(loaded)} policies valid")


@policies_app.command("test")
def policies_test(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Policies and their tests.")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List passing tests too.")
                       ] = False,
) -> None:
    """Run policy unit tests: Rego `test_` rules and YAML cases (`*_test.yaml`: input file →
    expected findings). Exit 1 when a test fails."""
    from engine.rego.testing import render_results, run_tests

    results = run_tests(directory)
    typer.echo(render_results(results, verbose))
    raise typer.Exit(0 if all(result.status == "pass" for result in results) else 1)


@policies_app.command("import-gatekeeper")
def policies_import_gatekeeper(
    template: Annotated[Path, typer.Argument(metavar="TEMPLATE.yaml")],
    constraints: Annotated[list[Path], typer.Argument(metavar="CONSTRAINT.yaml...")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write into.")
                   ] = Path("."),
) -> None:
    """Write gpuwarden policy files from a Gatekeeper ConstraintTemplate and its Constraints
    (the template's Rego and libs unmodified; one policy per Constraint)."""
    from engine.rego.gatekeeper import import_gatekeeper

    for path in import_gatekeeper(template, constraints, out):
        typer.echo(f"wrote {path}")


@policies_app.command("schema")
def policies_schema() -> None:
    """JSON Schema of policy files, for editors."""
    import orjson

    from engine.core.policy import policy_file_schema

    typer.echo(orjson.dumps(policy_file_schema(), option=orjson.OPT_INDENT_2).decode())


@telemetry_app.command("nvml")
def telemetry_nvml(
    fmt: Annotated[str, typer.Option("--format", "-f", help="table|json")] = "table",
    save: Annotated[Path | None, typer.Option(
        "--save", help="Also write the readings as a snapshot bundle (scan it with "
        "--source snapshot:FILE).")] = None,
    duration: Annotated[float, typer.Option(
        "--duration", min=0, help="Sample utilization for this many seconds and average "
        "(default: one instant reading).")] = 0.0,
    interval: Annotated[float, typer.Option(
        "--interval", min=0.1, help="Seconds between utilization samples.")] = 1.0,
    hostname: Annotated[str | None, typer.Option(
        "--hostname", help="Node name to record (default: $NODE_NAME, else the host name).")
    ] = None,
    now: NowOpt = None,
) -> None:
    """This node's GPUs through NVML: utilization, memory, MIG devices, processes, power.
    Without NVIDIA drivers it says so in one line and exits 0."""
    _check_choice("--format", fmt, ("table", "json"))
    import orjson

    from engine.pipeline import parse_instant
    from engine.telemetry.commands import render_nvml, save_snapshot
    from engine.telemetry.nvml import read_nvml

    instant = parse_instant(now)
    result = read_nvml(hostname=hostname, duration_s=duration, interval_s=interval)
    if result.error and fmt == "json":
        typer.echo(orjson.dumps({"source": "nvml", "error": result.error, "gpus": []}).decode())
    elif result.error:
        typer.echo(f"gpuwarden: {result.error}")
    else:
        sys.stdout.write(render_nvml(result.readings, fmt, result.driver_version))
    if save is not None:
        save_snapshot(save, result.readings, source="nvml", now=instant,
                      window_seconds=int(duration))


@telemetry_app.command("show")
def telemetry_show(
    demo: Annotated[bool, typer.Option("--demo", help="The bundled sample estate.")] = False,
    source: SourceOpt = None,
    prometheus_url: PrometheusUrlOpt = None,
    prometheus_token: PrometheusTokenOpt = None,
    prometheus_basic_auth: PrometheusBasicAuthOpt = None,
    prometheus_ca: PrometheusCaOpt = None,
    dcgm_url: DcgmUrlOpt = None,
    window: WindowOpt = 3600,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    now: NowOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table|json")] = "table",
) -> None:
    """Each GPU reading a scan would use, and the resource it joins to (or none)."""
    _check_choice("--format", fmt, ("table", "json"))
    from engine.core.catalog import builtin_catalog
    from engine.pipeline import parse_instant
    from engine.sources.registry import ScanOptions, collect_sources
    from engine.telemetry.commands import gather_and_join, render_joins

    sources = list(source or [])
    if demo:
        from engine.demo import demo_snapshot_path

        sources.append(f"snapshot:{demo_snapshot_path()}")
    options = ScanOptions(
        kubeconfig=kubeconfig, context=context, prometheus_url=prometheus_url,
        prometheus_token=prometheus_token, prometheus_basic_auth=prometheus_basic_auth,
        prometheus_ca=prometheus_ca, dcgm_url=dcgm_url, telemetry_window_s=window,
    )
    catalog = builtin_catalog()
    collected = collect_sources(sources, options, catalog)
    if not (options.wants_telemetry or "telemetry" in collected.snapshot):
        _fail("no telemetry to show: give --prometheus-url, --dcgm-url, --demo or a snapshot "
              "with a telemetry section")
    joins, warnings = gather_and_join(collected, options, parse_instant(now), catalog)
    for warning in warnings:
        typer.echo(f"gpuwarden: warning: {warning}", err=True)
    sys.stdout.write(render_joins(joins, fmt))


@app.command("webhook")
def webhook(
    cert: Annotated[Path | None, typer.Option("--cert", help="TLS certificate (PEM); reloaded "
                                              "when the file changes.")] = None,
    key: Annotated[Path | None, typer.Option("--key", help="TLS private key (PEM).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8443,
    policies: PoliciesOpt = None,
    cloud: Annotated[str | None, typer.Option("--cloud", help="Spot label the mutating webhook "
                                              "writes: aws (Karpenter), eks, gke, azure; "
                                              "default: the GPU nodes' cloud.")] = None,
    mig_swap: Annotated[str, typer.Option("--mig-swap", help="offered (when a node "
                                          "offers the MIG resource), always, off.")] = "offered",
    timeout: Annotated[float, typer.Option("--timeout", help="The webhook's timeoutSeconds, "
                                           "when the API server does not send one.")] = 3.0,
    deadline_fraction: Annotated[float, typer.Option("--deadline-fraction", help="Share of the "
                                                     "timeout evaluation may use.")] = 0.8,
    no_cluster: Annotated[bool, typer.Option("--no-cluster", help="Run without a Kubernetes "
                                             "API (no namespace labels or GPU nodes).")] = False,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Kubeconfig to use "
                                                   "instead of the in-cluster account.")] = None,
    resync: Annotated[float, typer.Option("--resync", help="Seconds between cluster "
                                          "cache lists.")] = 30.0,
    cert_reload_interval: Annotated[float, typer.Option("--cert-reload-interval",
                                    help="Seconds between certificate file checks.")] = 10.0,
    insecure_http: Annotated[bool, typer.Option("--insecure-http", help="Serve plain HTTP "
                                                "(tests only; the API server needs TLS).")] = False,
    client_ca: Annotated[Path | None, typer.Option("--client-ca", help="CA bundle (PEM): require "
                                                   "client certificates it signed.")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug|info|warning")] = "info",
) -> None:
    """Run the Kubernetes admission webhook (POST /validate, /mutate; GET /healthz, /readyz,
    /metrics)."""
    from remediations.kubernetes_patch import CLOUDS

    if cloud is not None:
        _check_choice("--cloud", cloud, CLOUDS)
    _check_choice("--mig-swap", mig_swap, ("offered", "always", "off"))
    _check_choice("--log-level", log_level, ("debug", "info", "warning"))
    if not insecure_http and (cert is None or key is None):
        _fail("--cert and --key are required (or --insecure-http for plain HTTP)")
    if timeout <= 0 or not 0 < deadline_fraction <= 1:
        _fail("--timeout must be positive and --deadline-fraction in (0, 1]")
    for path in (cert, key) if not insecure_http else ():
        if path is not None and not path.is_file():
            raise InputError("not a readable file", file=str(path))
    from engine.pipeline import build_engine
    from engine.webhook.admission import AdmissionSettings
    from engine.webhook.app import WebhookSettings, create_app
    from engine.webhook.caches import cluster_cache
    from engine.webhook.tls import ServerSettings, run_server

    settings = WebhookSettings(AdmissionSettings(cloud, mig_swap), timeout,  # type: ignore[arg-type]
                               deadline_fraction)
    caches = cluster_cache(no_cluster=no_cluster, kubeconfig=kubeconfig, resync_seconds=resync)
    web = create_app(build_engine(policies), settings=settings, caches=caches)
    console.set_sdk_log_level(0)  # a server logs its clients' retries at its own --log-level
    run_server(web, ServerSettings(host, port, cert, key, insecure_http, cert_reload_interval,
                                   log_level, client_ca=client_ca))


catalog_app = typer.Typer(help="The instance-type catalog: refresh prices from a cloud's API.",
                          no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("refresh")
def catalog_refresh(
    cloud: Annotated[str, typer.Option("--cloud", help="aws | azure | gcp")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The --catalog FILE to write.")],
    region: Annotated[list[str] | None, typer.Option("--region", help="Region (repeatable); "
                                                     "default: the cloud's default one.")] = None,
    endpoint_url: Annotated[str | None, typer.Option("--endpoint-url", help="The price API's "
                                                     "address (tests, proxies).")] = None,
) -> None:
    """Write a --catalog FILE of current GPU prices from the cloud's own price API."""
    from engine.core.catalog import builtin_catalog
    from engine.pricing.refresh import refreshed_file

    text, skipped = refreshed_file(cloud, list(region or []), builtin_catalog(), endpoint_url)
    if skipped:
        typer.echo(f"gpuwarden: {len(skipped)} types were left out (not in the catalog, or not "
                   f"fully priced by the API): {printable(', '.join(skipped[:5]))}",
                   err=True)
    _emit(text, output)


app.command("history")(history_commands.history_cmd)
app.command("what-if")(history_commands.what_if_cmd)


def _usage_line(exc: typer.TyperException) -> str:
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"gpuwarden: error: {message or 'missing command'}{hint}"


def main() -> None:
    """Console entry point: usage errors and InputError become one line on stderr, exit 2; so
    does any other exception (a CI gate must not read a crash as a policy failure, exit 1)."""
    from engine.pipeline import tune_collector

    tune_collector()
    try:
        code = app(standalone_mode=False, prog_name="gpuwarden")
    except InputError as exc:
        typer.echo(_error_line(str(exc)), err=True)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("gpuwarden: interrupted", err=True)
        sys.exit(INTERRUPTED)
    except typer.TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" and getattr(exc, "ctx", None) is not None:
            typer.echo(exc.ctx.get_help(), err=True)  # type: ignore[attr-defined]
        else:
            typer.echo(printable(_usage_line(exc), LINE_LIMIT), err=True)
        sys.exit(2)
    except Exception as exc:
        _report_internal_error(exc)
        sys.exit(2)
    if code == INTERRUPTED:  # typer's answer to Ctrl-C while a command runs
        typer.echo("gpuwarden: interrupted", err=True)
    sys.exit(code if isinstance(code, int) else 0)


def _report_internal_error(exc: Exception) -> None:
    if console.debugging():
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    detail = printable(f"{type(exc).__name__}: {exc}", ECHO_LIMIT)
    hint = "" if console.debugging() else f" ({DEBUG_HINT})"
    typer.echo(f"gpuwarden: internal error: {detail}{hint}", err=True)

