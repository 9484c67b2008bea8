"""The user documentation is executable, so it cannot drift from the code.

- every ```yaml policy block in docs/*.md loads (override blocks on top of the built-in pack),
  and every ```yaml condition block compiles;
- the custom policy example flags what the page says it flags;
- the JSON report sample equals a real run on the sample plan;
- docs/policies.md documents each built-in policy with its real scope, violation, defaults and
  enforcement, and the reference tables list every field, operator, check and estimator;
- the HCL examples declare every data source and variable they reference;
- relative links and their anchors resolve, and the Action / pre-commit docs match their files.

Shell examples (```console transcripts, ```sh commands) are run by tests/test_docs_shell.py;
the blocks are found with Sybil in tests/test_docs_blocks.py, which describes the info strings.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hcl2
import pytest
import yaml

from engine.core.catalog import builtin_catalog
from engine.core.conditions import _OP_ALIASES, CHECKS, OPERATORS, EvalContext, compile_condition
from engine.core.costs import ESTIMATORS
from engine.core.evaluate import Engine
from engine.core.model import Category, Finding, Remediation, Report, ResourceRef, Summary
from engine.core.policy import PolicySpec
from engine.core.yamltext import load_yaml_documents
from engine.demo import demo_snapshot_path
from engine.loading.policies import load_policies
from engine.sources.snapshot import load_snapshot_resources
from remediations.registry import ACTIONS
from tests.conftest import REPO
from tests.test_docs_blocks import (
    DOCS,
    Block,
    all_docs,
    all_pages,
    blocks_tagged,
    fenced_blocks,
    page_path,
)
from tests.test_docs_shell import (  # re-exported for tests/test_telemetry_docs.py
    Transcripts as Transcripts,
)
from tests.test_docs_shell import console_sessions as console_sessions
from tests.test_docs_shell import run_cli

PLANNED_POLICY_IDS = (
    "spot-checkpointing-required",
    "gpu-jobs-queued",
    "gpu-right-size",
    "team-gpu-budget",
    "untrusted-gpu-sandboxed",
    "shared-gpu-requires-mig",
    "gpu-namespace-network-policy",
)


# ---------------------------------------------------------------------------- reading the docs


def named_block(name: str) -> Block:
    matches = [b for d in all_pages() for b in fenced_blocks(d) if b.name == name]
    assert len(matches) == 1, f"expected one block named {name}, found {len(matches)}"
    return matches[0]


def section(doc: str, heading: str) -> str:
    """The text under `heading` (a whole heading line) up to the next heading of its level."""
    text = (DOCS / doc).read_text("utf-8")
    level = heading.split(" ", 1)[0]
    start = text.index("\n" + heading + "\n")
    rest = text[start + len(heading) + 2:]
    following = re.search(rf"^{re.escape(level)} ", rest, re.M)
    return rest[: following.start()] if following else rest


def table_names(text: str) -> set[str]:
    """The names in the first column of Markdown tables: rows starting "| `name` |"."""
    return set(re.findall(r"^\| `([^`]+)`", text, re.M))


# ---------------------------------------------------------------------------- policy blocks


POLICY_BLOCKS = blocks_tagged("yaml", "policy", all_docs())
CONDITION_BLOCKS = blocks_tagged("yaml", "condition", all_docs())


def test_the_docs_hold_the_examples_these_tests_run() -> None:
    names = {b.name for b in POLICY_BLOCKS}
    assert {"big-gpu-fleet.yaml", "overrides.yaml"} <= names
    assert len(CONDITION_BLOCKS) >= 3
    assert blocks_tagged("json", "report", ["json-report.md"])


@pytest.mark.parametrize("block", POLICY_BLOCKS, ids=str)
def test_policy_block_loads(block: Block, tmp_path: Path) -> None:
    path = tmp_path / (block.name or "policy.yaml")
    path.write_text(block.body, "utf-8")
    data = yaml.safe_load(block.body)
    overrides = data.get("overrides") or {}
    loaded = {p.id: p for p in load_policies(["builtin", str(path)] if overrides else [str(path)])}
    declared = {policy["id"] for policy in data.get("policies") or []}
    assert declared or overrides, f"{block}: neither policies nor overrides"
    assert declared <= set(loaded)
    for policy_id, change in overrides.items():
        assert (policy_id in loaded) != bool(change.get("disabled")), policy_id


@pytest.mark.parametrize("block", CONDITION_BLOCKS, ids=str)
def test_condition_block_compiles_and_evaluates(block: Block) -> None:
    [node] = load_yaml_documents(block.body, str(block))
    condition = compile_condition(node, {})
    ctx = EvalContext(now=datetime(2026, 12, 1, 12, tzinfo=UTC), catalog=builtin_catalog())
    resources = load_snapshot_resources(demo_snapshot_path(), ctx.catalog)
    verdicts = {condition.test(resource, ctx) for resource in resources}
    assert verdicts <= {True, False, None} and False in verdicts, block


def test_custom_policy_example_flags_what_the_page_says(tmp_path: Path) -> None:
    block = named_block("big-gpu-fleet.yaml")
    path = tmp_path / "big-gpu-fleet.yaml"
    path.write_text(block.body, "utf-8")
    engine = Engine(load_policies([str(path)]))
    resources = load_snapshot_resources(demo_snapshot_path(), builtin_catalog())
    report = engine.evaluate(resources, datetime(2026, 12, 1, 12, tzinfo=UTC))
    assert {f.resource.id: f.result for f in report.findings} == {
        "Job/research/train-llama-ft": "fail",
        "module.training.aws_instance.trainer": "fail",
        "aws_instance.notebook[0]": "unknown",
    }


# ---------------------------------------------------------------------------- JSON report


def test_json_report_sample_equals_a_real_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(named_block("plan.json").body, "utf-8")
    [sample_block] = blocks_tagged("json", "report", ["json-report.md"])
    sample = json.loads(sample_block.body)
    args = ["check-plan", str(plan), "--format", "json", "--now", sample["generated_at"]]
    code, out = run_cli(args, capsys, monkeypatch)
    assert code == 1
    assert json.loads(out) == sample, (
        "docs/json-report.md's sample is stale: regenerate it with "
        f"`gpuwarden check-plan plan.json --format json --now {sample['generated_at']}`"
    )
    Report.model_validate(sample)


# ---------------------------------------------------------------------------- reference tables


def test_policies_md_documents_each_builtin_policy_as_loaded() -> None:
    for policy in load_policies(["builtin"]):
        spec, doors = policy.spec, policy.spec.enforcement
        text = section("policies.md", f"## {policy.id}")
        assert f"| severity | {spec.severity.value} |" in text, policy.id
        assert (f"plan `{doors.plan}` · admission `{doors.admission}` · "
                f"runtime `{doors.runtime}`") in text, policy.id
        assert f"`{spec.cost}`" in text, policy.id
        for name, default in spec.parameters.items():
            assert _documented_default(text, name) == default, f"{policy.id}: {name}"
        shown = [yaml.safe_load(b.body) for b in _yaml_blocks(text)]
        logic = {"scope": spec.scope, "violation": spec.violation}
        assert {k: v for k, v in logic.items() if v is not None} in shown, policy.id
        summary_row = (f"| [`{policy.id}`](#{policy.id}) | {spec.severity.value} | "
                       f"{doors.plan} | {doors.admission} | {doors.runtime} | `{spec.cost}` |")
        assert summary_row in (DOCS / "policies.md").read_text("utf-8"), policy.id


def _documented_default(text: str, name: str) -> Any:
    found = re.search(rf"`{re.escape(name)}: ([^`]+)`", text)
    assert found, f"parameter {name} is not documented with its default"
    return yaml.safe_load(f"{name}: {found.group(1)}")[name]


def _yaml_blocks(text: str) -> list[Block]:
    bodies = re.findall(r"^```yaml\n(.*?)^```$", text, re.M | re.S)
    return [Block("policies.md", 0, "yaml", frozenset(), (), body) for body in bodies]


def test_policies_md_documents_the_once_planned_ids() -> None:
    """The ids reserved by the design are built in now, each with its section."""
    loaded = {policy.id for policy in load_policies(["builtin"])}
    text = (DOCS / "policies.md").read_text("utf-8")
    for policy_id in PLANNED_POLICY_IDS:
        assert policy_id in loaded and f"\n## {policy_id}\n" in text, policy_id


def test_policy_language_reference_tables_are_complete() -> None:
    fields = table_names(section("policy-language.md", "## Policy fields"))
    assert set(PolicySpec.model_fields) <= fields
    operators = section("policy-language.md", "### Value filter")
    assert set(OPERATORS) <= table_names(operators)
    assert all(f"`{alias}`" in operators for alias in _OP_ALIASES)
    checks = section("policy-language.md", "### Registered checks")
    assert set(CHECKS) <= table_names(checks)
    assert set(ESTIMATORS) <= table_names(section("policy-language.md", "## Cost estimators"))
    categories = section("policy-language.md", "## Resource categories")
    assert {c.value for c in Category} <= table_names(categories)
    text = (DOCS / "policy-language.md").read_text("utf-8")
    assert all(f"`{name}`" in text for name in ACTIONS)


def test_json_report_md_documents_every_report_field() -> None:
    documented = table_names((DOCS / "json-report.md").read_text("utf-8"))
    for model in (Finding, ResourceRef, Remediation, Summary):
        assert set(model.model_fields) <= documented, model.__name__
    report_fields = {f.alias or name for name, f in Report.model_fields.items()}
    assert report_fields <= documented


# ---------------------------------------------------------------------------- links, Action, hooks


def github_slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    slugs: set[str] = set()
    in_code = False
    for line in doc.read_text("utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            slugs.add(github_slug(line.lstrip("#")))
    return slugs


@pytest.mark.parametrize("doc", all_pages())
def test_relative_links_and_anchors_resolve(doc: str) -> None:
    page = page_path(doc)
    text = re.sub(r"^ *```.*?^ *```$", "", page.read_text("utf-8"), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = page if not file else (page.parent / file).resolve()
        assert path.exists(), f"{doc}: broken link {target}"
        if anchor:
            assert anchor in anchors(path), f"{doc}: no heading for #{anchor} in {path.name}"


def test_slugs_follow_github() -> None:
    assert github_slug(" Pointing findings at `.tf` lines: `--tf-dir`") == (
        "pointing-findings-at-tf-lines---tf-dir"
    )
    assert github_slug("Exit codes: what fails the build") == "exit-codes-what-fails-the-build"


def test_action_inputs_and_outputs_are_documented() -> None:
    action_file = REPO / "action.yml"
    if not action_file.exists():
        pytest.skip("no action.yml in this checkout")
    action = yaml.safe_load(action_file.read_text("utf-8"))
    documented = table_names(section("pr-check.md", "## GitHub Action"))
    assert documented == set(action["inputs"]) | set(action.get("outputs") or {})
    for name, spec in action["inputs"].items():
        assert name in documented and (spec.get("required") or "default" in spec), name


def test_pre_commit_hooks_are_documented() -> None:
    hooks_file = REPO / ".pre-commit-hooks.yaml"
    if not hooks_file.exists():
        pytest.skip("no .pre-commit-hooks.yaml in this checkout")
    hooks = yaml.safe_load(hooks_file.read_text("utf-8"))
    documented = table_names(section("pr-check.md", "## pre-commit"))
    assert {hook["id"] for hook in hooks} == documented


# ---------------------------------------------------------------------------- drift, kept away


def test_no_page_installs_gpuwarden_from_a_package_index() -> None:
    """gpuwarden is not on PyPI: pages install from a checkout or a git URL."""
    from_index = re.compile(r"pip install\s+['\"]?gpuwarden(\[[\w,]+\])?(?!\S* @ git\+)")
    for doc in all_pages():
        found = from_index.search(page_path(doc).read_text("utf-8"))
        assert found is None, f"{doc}: `{found.group(0) if found else ''}`"


def test_no_page_cites_internal_issue_numbers() -> None:
    for doc in all_pages():
        found = re.search(r"\bissues? \d+|\(#\d+\)", page_path(doc).read_text("utf-8"))
        assert found is None, f"{doc}: {found.group(0) if found else ''}"


def test_admission_md_lists_every_policy_active_at_admission() -> None:
    table = section("admission.md", "## Endpoints")
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| (deny|warn|audit) \|", table, re.M))
    active = {p.id: p.spec.enforcement.admission for p in load_policies(["builtin"])
              if p.spec.enforcement.admission != "off"}
    assert rows == active


def test_snapshots_md_lists_every_section_the_loader_reads() -> None:
    from engine.sources import snapshot

    keys = table_names(section("snapshots.md", "## Format").split("\n### ")[0])
    assert keys == {*snapshot._HEADER_KEYS, *snapshot.SECTIONS}


def test_every_documented_field_path_loads() -> None:
    """The field paths table of policy-language.md names paths the loader accepts (`has_gpu`,
    documented once, is not one)."""
    table = section("policy-language.md", "### Field paths")
    first_cells = re.findall(r"^\| ((?:`[^`]+`(?:, )?)+) \|", table, re.M)
    paths = [p for cell in first_cells for p in re.findall(r"`([^`]+)`", cell)]
    assert len(paths) >= 30
    for path in paths:
        concrete = path.replace("KEY", "team").replace("PATH", "spec.replicas")
        compile_condition({"field": concrete, "op": "present"}, {})


def test_policy_schema_names_its_dialect_and_is_valid() -> None:
    from jsonschema import Draft202012Validator

    from engine.core.policy import policy_file_schema

    schema = policy_file_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "JSON Schema (dialect 2020-12" in section("policy-language.md",
                                                     "## Editor support: JSON Schema")
    Draft202012Validator.check_schema(schema)
    for block in blocks_tagged("yaml", "policy", all_docs()):
        errors = Draft202012Validator(schema).iter_errors(yaml.safe_load(block.body))
        assert not [e.message for e in errors], block


def test_pr_check_md_lists_every_output_format() -> None:
    from engine.outputs.registry import FORMATS

    options = section("pr-check.md", "## Options")
    assert all(f"`{fmt}`" in options for fmt in FORMATS)
    assert table_names(section("pr-check.md", "## Output formats")) == set(FORMATS)


def test_hcl_examples_declare_the_data_sources_and_variables_they_use() -> None:
    blocks = [b for doc in all_pages() for b in fenced_blocks(doc) if b.lang == "hcl"]
    configurations = [b for b in blocks if re.search(r"^(resource|module) \"", b.body, re.M)]
    assert any(b.name == "infra/main.tf" for b in configurations)
    for block in configurations:
        parsed = hcl2.loads(block.body)
        declared_data = {(kind.strip('"'), name.strip('"')) for entry in parsed.get("data", [])
                         for kind, named in entry.items() for name in named}
        declared_vars = {name.strip('"') for entry in parsed.get("variable", []) for name in entry}
        used_data = set(re.findall(r"\bdata\.([a-z0-9_]+)\.([a-z0-9_]+)", block.body))
        used_vars = set(re.findall(r"\bvar\.([a-z0-9_]+)", block.body))
        assert used_data <= declared_data, f"{block}: undeclared {used_data - declared_data}"
        assert used_vars <= declared_vars, f"{block}: undeclared {used_vars - declared_vars}"


@pytest.mark.parametrize(("command", "doc", "heading"), [
    ("check-plan", "pr-check.md", "## Options"),
    ("webhook", "admission.md", "## Flags"),
])
def test_option_tables_list_every_option_of_the_command(command: str, doc: str,
                                                        heading: str) -> None:
    import typer.main

    from engine.cli import app

    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    options = {o for p in click_command.params for o in p.opts if o.startswith("--")} - {"--help"}
    documented = set(re.findall(r"^\| `(--[a-z-]+)", section(doc, heading), re.M))
    documented |= set(re.findall(r"^\| `--[a-z-]+`, `(--[a-z-]+)`", section(doc, heading), re.M))
    assert options == documented
