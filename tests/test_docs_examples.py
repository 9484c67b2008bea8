"""The user documentation is executable, so it cannot drift from the code.

- every ```yaml policy block in docs/*.md loads (override blocks on top of the built-in pack),
  and every ```yaml condition block compiles;
- the custom policy example flags what the page says it flags;
- the JSON report sample equals a real run on the sample plan;
- console transcripts (`$ gpuwarden ...` followed by its output) print what the page shows;
- docs/policies.md documents each built-in policy with its real scope, violation, defaults and
  enforcement, and the reference tables list every field, operator, check and estimator;
- relative links and their anchors resolve, and the Action / pre-commit docs match their files.

Fence info strings mark blocks: ```yaml policy name=FILE, ```yaml condition, ```json report,
```hcl name=FILE. Named blocks are written to a scratch directory where transcripts run.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.catalog import builtin_catalog
from engine.cli import main
from engine.conditions import _OP_ALIASES, CHECKS, OPERATORS, EvalContext, compile_condition
from engine.costs import ESTIMATORS
from engine.demo import demo_snapshot_path
from engine.evaluate import Engine
from engine.model import Category, Finding, Remediation, Report, ResourceRef, Summary
from engine.policy import PolicySpec, load_policies
from engine.sources.snapshot import load_snapshot_resources
from engine.yamlsource import load_yaml_documents
from remediations.registry import ACTIONS
from tests.conftest import REPO

DOCS = REPO / "docs"
OWNED_DOCS = (
    "index.md",
    "getting-started.md",
    "policy-language.md",
    "policies.md",
    "pr-check.md",
    "snapshots.md",
    "json-report.md",
)
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


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, tags and `key=value` attributes from the info
    string, and its text."""

    doc: str
    line: int
    lang: str
    tags: frozenset[str]
    attrs: tuple[tuple[str, str], ...]
    body: str

    @property
    def name(self) -> str | None:
        return dict(self.attrs).get("name")

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(doc: str) -> list[Block]:
    found: list[Block] = []
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate((DOCS / doc).read_text("utf-8").splitlines(), start=1):
        if opened is None and line.startswith("```"):
            opened, body = (number, line[3:].strip()), []
        elif opened is not None and line.strip() == "```":
            found.append(_block(doc, opened[0], opened[1], body))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"{doc}:{opened[0] if opened else 0}: unclosed code fence"
    return found


def _block(doc: str, line: int, info: str, body: list[str]) -> Block:
    words = info.split()
    lang = words[0] if words else ""
    pairs = (word.partition("=") for word in words[1:] if "=" in word)
    attrs = tuple((key, value) for key, _, value in pairs)
    tags = frozenset(w for w in words[1:] if "=" not in w)
    return Block(doc, line, lang, tags, attrs, "\n".join(body) + "\n")


def all_docs() -> list[str]:
    return sorted(p.name for p in DOCS.glob("*.md"))


def blocks_tagged(lang: str, tag: str, docs: tuple[str, ...] | list[str]) -> list[Block]:
    return [b for d in docs for b in fenced_blocks(d) if b.lang == lang and tag in b.tags]


def named_block(name: str) -> Block:
    matches = [b for d in OWNED_DOCS for b in fenced_blocks(d) if b.name == name]
    assert len(matches) == 1, f"expected one block named {name}, found {len(matches)}"
    return matches[0]


def write_named_blocks(root: Path) -> None:
    for doc in OWNED_DOCS:
        for block in fenced_blocks(doc):
            if block.name:
                target = root / block.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.body, "utf-8")


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


# ---------------------------------------------------------------------------- running the CLI


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run `gpuwarden ARGS` in-process; (exit code, stdout + stderr)."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["gpuwarden", *args])
    code: int = 0
    try:
        main()
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 0
    out, err = capsys.readouterr()
    return code, out + err


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


# ---------------------------------------------------------------------------- console transcripts

VALUE_OPTIONS = frozenset({
    "--policies", "--format", "-f", "--output", "-o", "--fail-on", "--now", "--unknown",
    "--prices", "--tf-dir", "--baseline", "--write-baseline", "--source", "--at",
})
SILENCED = re.compile(r"^(?P<command>.*?) > /dev/null; echo \$\?$")
JQ_PATH = re.compile(r"^(\.[A-Za-z_][\w-]*|\[\d+\])+$")


@dataclass
class Session:
    command: str
    output: list[str]
    exit_code: int | None = None


def console_sessions(doc: str) -> Iterator[Session]:
    for block in fenced_blocks(doc):
        if block.lang == "console":
            yield from _sessions(block.body.splitlines())


def _sessions(lines: list[str]) -> Iterator[Session]:
    sessions: list[Session] = []
    for line in lines:
        if line.startswith("$ "):
            sessions.append(Session(line[2:], []))
        elif sessions and sessions[-1].command.endswith("\\") and not sessions[-1].output:
            sessions[-1].command = sessions[-1].command[:-1] + " " + line.strip()
        elif sessions:
            sessions[-1].output.append(line)
    for current, following in zip(sessions, [*sessions[1:], None], strict=True):
        silenced = SILENCED.match(current.command)
        if silenced:
            current.command = silenced["command"]
            current.exit_code, current.output = int(current.output[0]), []
        elif following is not None and following.command == "echo $?":
            current.exit_code = int(following.output[0])
        if current.command != "echo $?":
            yield current


def required_paths(args: list[str]) -> list[str]:
    """Files a gpuwarden command reads; the transcript is skipped when one is not at hand."""
    paths: list[str] = []
    positionals: list[str] = []
    iterator = iter(args)
    for arg in iterator:
        if arg in VALUE_OPTIONS:
            value = next(iterator, "")
            if arg in ("--policies", "--prices", "--baseline", "--tf-dir"):
                paths.append(value)
            elif arg == "--source" and value.startswith("snapshot:"):
                paths.append(value.removeprefix("snapshot:"))
        elif not arg.startswith("-"):
            positionals.append(arg)
    if positionals[:1] == ["check-plan"] and len(positionals) > 1:
        paths.append(positionals[1])
    if positionals[:2] == ["policies", "validate"]:
        paths.extend(positionals[2:])
    return [p for p in paths if p not in ("builtin", "-")]


def jq(document: str, flags: list[str]) -> list[str] | None:
    """The few `jq` filters the docs use: a plain path, optionally with -r."""
    raw = flags[:1] == ["-r"]
    path = flags[1:] if raw else flags
    if len(path) != 1 or not JQ_PATH.match(path[0]):
        return None
    value: Any = json.loads(document)
    for key, index in re.findall(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]", path[0]):
        value = value[key] if key else value[int(index)]
    text = value if raw and isinstance(value, str) else json.dumps(value, indent=2,
                                                                   ensure_ascii=False)
    return text.splitlines()


def pipe_through(output: str, stages: list[list[str]]) -> list[str] | None:
    lines = output.splitlines()
    for stage in stages:
        if stage[:1] == ["grep"] and len(stage) == 2:
            lines = [line for line in lines if stage[1] in line]
        elif stage[:1] == ["jq"]:
            filtered = jq("\n".join(lines), stage[1:])
            if filtered is None:
                return None
            lines = filtered
        else:
            return None
    return lines


def shown_lines(output: list[str]) -> list[str]:
    """The lines of a transcript's output that must appear verbatim (trimmed rows excluded)."""
    return [line.rstrip() for line in output
            if line.strip() and "…" not in line and line.strip() != "..."]


@dataclass
class Transcripts:
    workspace: Path
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    ran: int = 0

    def replay(self, doc: str, session: Session) -> list[str]:
        """Problems found replaying one session (empty when it matches or cannot be run)."""
        tokens = shlex.split(session.command)
        if tokens[:1] == ["cat"] and len(tokens) == 2:
            return self._cat(doc, tokens[1], session)
        stages = _split_pipes(tokens)
        if stages is None or stages[0][:1] != ["gpuwarden"]:
            return []
        args = stages[0][1:]
        if any(not (self.workspace / p).exists() for p in required_paths(args)):
            return []
        code, output = run_cli(args, self.capsys, self.monkeypatch)
        lines = pipe_through(output, stages[1:])
        if lines is None:
            return []
        self.ran += 1
        return _compare(doc, session, code, lines)

    def _cat(self, doc: str, name: str, session: Session) -> list[str]:
        target = self.workspace / name
        if not target.exists():  # the transcript defines the file
            target.write_text("\n".join(session.output) + "\n", "utf-8")
            return []
        self.ran += 1
        return _compare(doc, session, 0, target.read_text("utf-8").splitlines())


def _split_pipes(tokens: list[str]) -> list[list[str]] | None:
    if any(t in (">", ">>", "<", ";", "&&", "||") for t in tokens):
        return None
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            stages.append([])
        else:
            stages[-1].append(token)
    return stages


def _compare(doc: str, session: Session, code: int, lines: list[str]) -> list[str]:
    """Every shown line must be printed; an untrimmed transcript must be the whole output."""
    problems: list[str] = []
    if session.exit_code is not None and code != session.exit_code:
        problems.append(f"{doc}: `{session.command}` exits {code}, the page says "
                        f"{session.exit_code}")
    shown = shown_lines(session.output)
    actual = [line.rstrip() for line in lines if line.strip()]
    problems += [f"{doc}: `{session.command}` does not print: {line}"
                 for line in shown if line not in actual]
    trimmed = len(shown) != len([line for line in session.output if line.strip()])
    if shown and not trimmed and not problems and shown != actual:
        problems.append(f"{doc}: `{session.command}` prints more than the page shows "
                        "(end a trimmed transcript with a line `...`)")
    return problems


def test_console_transcripts_print_what_the_docs_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_named_blocks(tmp_path)
    monkeypatch.chdir(tmp_path)
    replayer = Transcripts(tmp_path, capsys, monkeypatch)
    problems = [
        problem
        for doc in OWNED_DOCS
        for session in console_sessions(doc)
        for problem in replayer.replay(doc, session)
    ]
    assert not problems, "\n".join(problems)
    assert replayer.ran >= 25, f"only {replayer.ran} transcripts could be replayed"


def test_transcript_parsing_reads_exit_codes_and_continuations() -> None:
    lines = [
        "$ gpuwarden scan --demo \\",
        "    --format json",
        "{}",
        "$ echo $?",
        "1",
        "$ gpuwarden check-plan p.json > /dev/null; echo $?",
        "0",
    ]
    sessions = list(_sessions(lines))
    assert [(s.command, s.exit_code) for s in sessions] == [
        ("gpuwarden scan --demo  --format json", 1),
        ("gpuwarden check-plan p.json", 0),
    ]
    assert jq('{"a": [{"b": "x"}]}', ["-r", ".a[0].b"]) == ["x"]
    assert jq('{"a": 1}', [".a | keys"]) is None


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


@pytest.mark.parametrize("doc", OWNED_DOCS)
def test_relative_links_and_anchors_resolve(doc: str) -> None:
    text = re.sub(r"^```.*?^```$", "", (DOCS / doc).read_text("utf-8"), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = DOCS / doc if not file else (DOCS / file).resolve()
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
