"""Every shell example in docs/*.md and README.md runs, and prints what the page shows.

- ```console blocks are transcripts: `$ COMMAND` lines, each followed by its output. The shown
  lines must be printed, in order; a transcript that is not trimmed (no `...` line, no `…` row)
  must be the whole output. The exit code must be the one a following `$ echo $?` shows (or
  `COMMAND > /dev/null; echo $?`); without one, 2 when the transcript shows
  `gpuwarden: error:`, else 0 or 1 (the command was accepted).
- ```sh blocks are commands without output: each must be accepted (exit 0 or 1).
- A block that needs what a test cannot have (credentials, a cluster, the network) says so in
  its info string, ```sh needs=aws,k8s, and is not run; `NEEDS` lists the words. A transcript
  of what a machine without an NVIDIA driver prints is marked `when=no-gpu` and runs only there.

Commands run in a scratch directory that looks like a checkout (the repository's `policies/`
and `tests/` are linked in) holding every named block of the docs (```hcl name=infra/main.tf)
and the few input files the pages name without showing (`SCRATCH_FILES`). `gpuwarden` runs
in-process; pipes into `grep`, `head -N` and plain-path `jq` filters, `> FILE`, and `cat FILE`
are understood. Anything else fails the test with a note to mark the block, so an example is
either run or marked, never skipped silently.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from tests.conftest import REPO
from tests.test_docs_blocks import Block, all_pages, fenced_blocks

SHELL_LANGS = frozenset({"sh", "console"})
NEEDS = {
    "aws": "AWS credentials",
    "gcp": "Google Cloud credentials",
    "azure": "Azure credentials",
    "k8s": "a Kubernetes cluster",
    "terraform": "terraform with provider credentials and a configuration",
    "network": "a package index or git host",
    "docker": "docker and a registry",
    "minutes": "minutes of CPU (benchmarks)",
}
LIVE_SOURCES = frozenset({"aws", "gcp", "azure", "k8s"})
LINKED_FROM_CHECKOUT = ("policies", "tests")
# Inputs the pages name without showing them: a binary plan and a state file (refused with a
# hint), a truncated plan, snapshot bundles and policy files with the mistakes the error
# listings show.
POLICY_FILE = """policies:
  - id: x-policy
    title: An example
    severity: low
    resources: [instance]
    violation: {field: tags.team, op: eq, value: research}
    message: "{{ r.name }} belongs to research"
"""


def _policy_with(old: str, new: str) -> bytes:
    """The example policy file with one line changed, so its error points at that line."""
    assert old in POLICY_FILE
    return POLICY_FILE.replace(old, new).encode()


SCRATCH_FILES: dict[str, bytes] = {
    "tfplan": b"PK\x03\x04\x14\x00\x00\x00\x08\x00tfplan",
    "state.json": json.dumps({"version": 4, "terraform_version": "1.9.8", "serial": 3,
                              "lineage": "5f0c", "outputs": {}, "resources": []}).encode(),
    "trunc.json": b'{\n  "format_version": "1.2",\n  "resource_changes": [\n    {\n'
                  b'      "address": "aws_instance.trainer",\n      "mode": "managed",\n'
                  b'      "type": "aws_instance",\n      "change": {\n'
                  b'        "actions": ["create"],\n        "after": {\n'
                  b'          "instance_type": "g5.12x',
    "bad.json": json.dumps({"kind": "Snapshot", "inventory": []}).encode(),
    "bad2.json": json.dumps({"kind": "Snapshot", "resources": [
        {"provider": "aws", "kind": "aws_instance", "id": "i-1", "name": "x"}]}).encode(),
    "bad3.yaml": b"apiVersion: gpuwarden.io/v1\nresources: []\n",
    "regex.yaml": _policy_with("op: eq, value: research", 'op: regex, value: "team-("'),
    "severity.yaml": _policy_with("severity: low", "severity: urgent"),
    "field.yaml": _policy_with("field: tags.team, op: eq, value: research",
                               "field: gpus.count, op: ge, value: 8"),
    "subfield.yaml": _policy_with("field: tags.team, op: eq, value: research",
                                  "field: gpu.cnt, op: ge, value: 8"),
    "template.yaml": _policy_with("{{ r.name }}", "{{ r.name "),
    "schedule.yaml": _policy_with(
        "{field: tags.team, op: eq, value: research}",
        "{offhours: {}}\n    parameters: {default_schedule: \"off=(M-F,19);tz=mars\", "
        "schedule_tag: gpuwarden-offhours}"),
    "parameter.yaml": _policy_with("{field: tags.team, op: eq, value: research}",
                                   "{unencrypted: {}}"),
    "id.yaml": _policy_with("id: x-policy", "id: X_policy"),
    "key.yaml": b"overrides:\n  gpu-spot-required:\n    parametrs: {}\n",
    "off.yaml": b"overrides:\n  gpu-spot-required:\n    enforcement:\n      plan: off\n",
}
SILENCED = re.compile(r"^(?P<command>.*?) > /dev/null; echo \$\?$")
JQ_PATH = re.compile(r"^(\.[A-Za-z_][\w-]*|\[\d+\])+$")
ERROR_PREFIX = "gpuwarden: error:"


# ---------------------------------------------------------------------------- reading examples


@dataclass
class Session:
    """One command of an example, with the output and exit code the page shows."""

    command: str
    output: list[str] = field(default_factory=list)
    exit_code: int | None = None


def sessions(block: Block) -> list[Session]:
    if block.lang == "console":
        return list(_console_sessions(block.body.splitlines()))
    return list(_sh_commands(block.body.splitlines()))


def console_sessions(doc: str) -> Iterator[Session]:
    for block in fenced_blocks(doc):
        if block.lang == "console" and not block.needs:
            yield from sessions(block)


def _sh_commands(lines: list[str]) -> Iterator[Session]:
    """Commands as the shell reads them: `\\` continues a line, so does an open quote."""
    command = ""
    for line in lines:
        command += line.strip()
        if command.endswith("\\"):
            command = command[:-1].rstrip() + " "
            continue
        try:
            words = shlex.split(command, comments=True)
        except ValueError:  # a quote still open
            command += "\n"
            continue
        if words:
            yield Session(command)
        command = ""
    if command:
        yield Session(command)


def _console_sessions(lines: list[str]) -> Iterator[Session]:
    found: list[Session] = []
    for line in lines:
        if line.startswith("$ "):
            found.append(Session(line[2:]))
        elif found and found[-1].command.endswith("\\") and not found[-1].output:
            found[-1].command = found[-1].command[:-1] + " " + line.strip()
        elif found:
            found[-1].output.append(line)
    for current, following in zip(found, [*found[1:], None], strict=False):
        silenced = SILENCED.match(current.command)
        if silenced:
            current.command = silenced["command"]
            current.exit_code, current.output = int(current.output[0]), []
        elif following is not None and following.command == "echo $?":
            current.exit_code = int(following.output[0])
        if current.command != "echo $?":
            yield current


# ---------------------------------------------------------------------------- what can run


@dataclass(frozen=True)
class Plan:
    """How to run one command: the program's arguments, the filters it is piped through and
    the file its output is redirected to."""

    program: str
    args: list[str]
    filters: list[list[str]]
    redirect: str | None


class NotRunnable(Exception):
    """The command needs something the test does not have; the block must be marked."""


def plan(command: str) -> Plan:
    tokens = shlex.split(command, comments=True)
    redirect = None
    if len(tokens) > 2 and tokens[-2] == ">":
        redirect, tokens = tokens[-1], tokens[:-2]
    if any(t in (">", ">>", "<", ";", "&&", "||", "&") for t in tokens):
        raise NotRunnable(f"`{command}`: only pipes and one final `> FILE` are understood")
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            stages.append([])
        else:
            stages[-1].append(token)
    first, filters = stages[0], stages[1:]
    if first[:1] == ["cat"] and len(first) == 2 and not filters and redirect is None:
        return Plan("cat", first[1:], [], None)
    if first[:1] != ["gpuwarden"]:
        raise NotRunnable(f"`{command}`: runs `{first[0] if first else ''}`, not gpuwarden")
    _check_offline(command, first[1:])
    for stage in filters:
        _check_filter(command, stage)
    return Plan("gpuwarden", first[1:], filters, redirect)


def _check_offline(command: str, args: list[str]) -> None:
    if args[:1] == ["webhook"]:
        raise NotRunnable(f"`{command}`: serves admission requests until stopped")
    for option, value in itertools.pairwise(args):
        if option == "--source" and value.split(":")[0] in LIVE_SOURCES:
            raise NotRunnable(f"`{command}`: reads live {value.split(':')[0]} state")


def _check_filter(command: str, stage: list[str]) -> None:
    if stage[:1] == ["grep"] and len(stage) == 2:
        return
    if stage[:1] == ["head"] and len(stage) == 2 and re.fullmatch(r"-\d+", stage[1]):
        return
    if stage[:1] == ["jq"] and jq_path(stage[1:]) is not None:
        return
    raise NotRunnable(f"`{command}`: cannot pipe into `{' '.join(stage)}` "
                      "(grep TEXT, head -N and jq [-r] .path are understood)")


def jq_path(flags: list[str]) -> tuple[bool, str] | None:
    """(raw, path) of the few `jq` filters the docs use: a plain path, optionally with -r."""
    raw = flags[:1] == ["-r"]
    path = flags[1:] if raw else flags
    if len(path) != 1 or not JQ_PATH.match(path[0]):
        return None
    return raw, path[0]


def jq(document: str, flags: list[str]) -> list[str]:
    parsed = jq_path(flags)
    assert parsed is not None
    raw, path = parsed
    value: Any = json.loads(document)
    for key, index in re.findall(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]", path):
        value = value[key] if key else value[int(index)]
    text = value if raw and isinstance(value, str) else json.dumps(value, indent=2,
                                                                   ensure_ascii=False)
    return text.splitlines()


def filtered(lines: list[str], stage: list[str]) -> list[str]:
    if stage[0] == "grep":
        return [line for line in lines if stage[1] in line]
    if stage[0] == "head":
        return lines[: int(stage[1][1:])]
    return jq("\n".join(lines), stage[1:])


def unrunnable(block: Block) -> list[str]:
    """Why the commands of an unmarked shell block cannot run (empty when they all can)."""
    problems = []
    for session in sessions(block):
        try:
            plan(session.command)
        except NotRunnable as reason:
            problems.append(f"{block}: {reason}: mark the block needs=WHAT ({', '.join(NEEDS)})")
    return problems


# ---------------------------------------------------------------------------- running


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


def prepare_workspace(root: Path) -> None:
    """A scratch checkout: the repository's policies/ and tests/, every named block of the
    docs, and the files the pages name without showing."""
    for name in LINKED_FROM_CHECKOUT:
        (root / name).symlink_to(REPO / name, target_is_directory=True)
    written: dict[str, Block] = {}
    for doc in all_pages():
        for block in fenced_blocks(doc):
            if block.name:
                assert block.name not in written, f"{block} and {written[block.name]} are both "\
                                                  f"named {block.name}"
                written[block.name] = block
                target = root / block.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.body, "utf-8")
    for name, content in SCRATCH_FILES.items():
        (root / name).write_bytes(content)


@dataclass
class Transcripts:
    """Replays the shell examples of the docs in `workspace` (the current directory)."""

    workspace: Path
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    ran: int = 0

    def replay(self, doc: str, session: Session) -> list[str]:
        """Problems found replaying one command (empty when it does what the page shows)."""
        try:
            how = plan(session.command)
        except NotRunnable as reason:
            return [f"{doc}: {reason}: mark the block needs=WHAT"]
        self.ran += 1
        if how.program == "cat":
            return self._cat(doc, how.args[0], session)
        code, output = run_cli(how.args, self.capsys, self.monkeypatch)
        lines = output.splitlines()
        for stage in how.filters:
            lines = filtered(lines, stage)
        if how.redirect is not None:
            (self.workspace / how.redirect).write_text("\n".join(lines) + "\n", "utf-8")
            lines = []
        return _compare(doc, session, code, lines)

    def _cat(self, doc: str, name: str, session: Session) -> list[str]:
        target = self.workspace / name
        if not target.exists():  # the transcript defines the file
            target.write_text("\n".join(session.output) + "\n", "utf-8")
            return []
        return _compare(doc, session, 0, target.read_text("utf-8").splitlines())


def shown_lines(output: list[str]) -> list[str]:
    """The lines of a transcript's output that must appear verbatim (trimmed rows excluded)."""
    return [line.rstrip() for line in output
            if line.strip() and "…" not in line and line.strip() != "..."]


def expected_codes(session: Session) -> set[int]:
    if session.exit_code is not None:
        return {session.exit_code}
    if any(line.startswith(ERROR_PREFIX) for line in session.output):
        return {2}
    return {0, 1}


def _in_order(shown: list[str], actual: list[str]) -> str | None:
    """The first shown line that is not printed after the lines before it."""
    rest = iter(actual)
    for line in shown:
        if not any(line == printed for printed in rest):
            return line
    return None


def _compare(doc: str, session: Session, code: int, lines: list[str]) -> list[str]:
    """The exit code must match; every shown line must be printed, in order; an untrimmed
    transcript must be the whole output."""
    problems: list[str] = []
    expected = expected_codes(session)
    if code not in expected:
        problems.append(f"{doc}: `{session.command}` exits {code}, the page says "
                        f"{' or '.join(map(str, sorted(expected)))}")
    shown = shown_lines(session.output)
    actual = [line.rstrip() for line in lines if line.strip()]
    missing = _in_order(shown, actual)
    if missing is not None:
        problems.append(f"{doc}: `{session.command}` does not print (in this order): {missing}")
    trimmed = len(shown) != len([line for line in session.output if line.strip()])
    if shown and not trimmed and not problems and shown != actual:
        problems.append(f"{doc}: `{session.command}` prints more than the page shows "
                        "(end a trimmed transcript with a line `...`)")
    return problems


# ---------------------------------------------------------------------------- the tests


def applies_here(block: Block) -> bool:
    """`when=no-gpu` transcripts show what a machine without an NVIDIA driver prints."""
    if dict(block.attrs).get("when") != "no-gpu":
        return True
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return True
    pynvml.nvmlShutdown()
    return False


def shell_blocks(doc: str) -> list[Block]:
    return [b for b in fenced_blocks(doc) if b.lang in SHELL_LANGS]


@pytest.mark.parametrize("doc", all_pages())
def test_shell_examples_print_what_the_page_shows(
    doc: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare_workspace(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)  # tables at the width a pipe gets
    replayer = Transcripts(tmp_path, capsys, monkeypatch)
    runnable = [b for b in shell_blocks(doc) if not b.needs and applies_here(b)]
    problems = [problem for block in runnable for session in sessions(block)
                for problem in replayer.replay(str(block), session)]
    assert not problems, "\n".join(problems)
    assert replayer.ran == sum(len(sessions(b)) for b in runnable)


def test_every_shell_block_is_run_or_marked() -> None:
    """A shell example is run, or says what it needs; nothing is skipped silently. Blocks that
    are not shell must not hide a command prompt, and every block names its language."""
    problems: list[str] = []
    for doc in all_pages():
        for block in fenced_blocks(doc):
            problems += _marking_problems(block)
    assert not problems, "\n".join(problems)


def _marking_problems(block: Block) -> list[str]:
    if not block.lang:
        return [f"{block}: a fenced block without a language (```text, ```sh, ...)"]
    if block.lang not in SHELL_LANGS:
        prompts = [line for line in block.body.splitlines() if line.startswith("$ ")]
        return [f"{block}: a ```{block.lang} block holds a command prompt: make it ```console"]\
            if prompts else []
    unknown = [need for need in block.needs if need not in NEEDS]
    if unknown:
        return [f"{block}: unknown needs= {unknown}; one of {', '.join(NEEDS)}"]
    if not sessions(block):
        return [f"{block}: a ```{block.lang} block without a command (output only: ```text)"]
    return [] if block.needs else unrunnable(block)


def test_the_docs_run_many_examples_and_mark_few() -> None:
    blocks = [b for doc in all_pages() for b in shell_blocks(doc)]
    run = [b for b in blocks if not b.needs]
    assert len(run) >= 30 and len(run) > len(blocks) - len(run), (len(run), len(blocks))


def test_sessions_read_exit_codes_continuations_and_comments() -> None:
    console = Block("x.md", 1, "console", frozenset(), (), "\n".join([
        "$ gpuwarden scan --demo \\",
        "    --format json",
        "{}",
        "$ echo $?",
        "1",
        "$ gpuwarden check-plan p.json > /dev/null; echo $?",
        "0",
    ]))
    assert [(s.command, s.exit_code) for s in sessions(console)] == [
        ("gpuwarden scan --demo  --format json", 1),
        ("gpuwarden check-plan p.json", 0),
    ]
    sh = Block("x.md", 1, "sh", frozenset(), (), "# a comment\ngpuwarden policies list  # all\n"
               "gpuwarden scan \\\n  --demo\n")
    assert [s.command for s in sessions(sh)] == ["gpuwarden policies list  # all",
                                                 "gpuwarden scan --demo"]


def test_only_understood_commands_run() -> None:
    assert plan("gpuwarden policies schema > out.json") == Plan(
        "gpuwarden", ["policies", "schema"], [], "out.json")
    assert plan("gpuwarden scan --demo -f json | jq -r '.summary.failed' | head -1").filters == [
        ["jq", "-r", ".summary.failed"], ["head", "-1"]]
    for command in ("kubectl apply -f x.yaml", "gpuwarden scan --demo | jq '.a | keys'",
                    "pip install -e . && gpuwarden scan --demo", "gpuwarden scan < in.json",
                    "gpuwarden scan --source gcp:ml-dev", "gpuwarden webhook --cert c --key k"):
        with pytest.raises(NotRunnable):
            plan(command)
    assert jq('{"a": [{"b": "x"}]}', ["-r", ".a[0].b"]) == ["x"]


def test_comparison_catches_a_missing_line_a_wrong_order_and_a_wrong_exit_code() -> None:
    session = Session("gpuwarden x", ["one", "two", "..."], None)
    assert _compare("d", session, 1, ["one", "two", "three"]) == []
    assert _compare("d", session, 0, ["two", "one"])  # order
    assert _compare("d", session, 2, ["one", "two"])  # 2 is bad input, not shown
    whole = Session("gpuwarden x", ["one"], 0)
    assert _compare("d", whole, 0, ["one", "two"])  # untrimmed: must be the whole output
    error = Session("gpuwarden x", [f"{ERROR_PREFIX} nope"], None)
    assert _compare("d", error, 1, [f"{ERROR_PREFIX} nope"])
