"""The command line as a person and a CI job meet it: version, completion, colour only on a
terminal, a table that fits, one line per message on stderr, no traceback, exit codes that a
gate can trust."""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import re
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from engine import console
from engine.core.catalog import Catalog
from engine.core.errors import InputError, install_hint, printable
from engine.sources.registry import Collected, ScanOptions
from tests.conftest import EXPECT_COMPILED, REPO
from tests.test_cli import GPU_PLAN, run_cli

ANSI_ESCAPE = re.compile(r"\x1b[\[\]()]")
NOW = "2026-12-01T21:00:00Z"
DEMO = ["scan", "--demo", "--now", NOW]


def plain_env(**extra: str) -> dict[str, str]:
    """This environment without the variables that steer colour and width."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["TERM"] = "xterm-256color"
    env.update(extra)
    return env


def run_module(args: list[str], env: dict[str, str],
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_on_terminal(args: list[str], env: dict[str, str], columns: int = 100
                    ) -> tuple[int, str, str]:
    """`python -m engine ARGS` with stdout on a pseudo-terminal `columns` wide (stderr piped):
    exit code, what the terminal showed, stderr."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "engine", *args], cwd=REPO, env=env,
                               stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    return process.wait(timeout=60), shown.decode().replace("\r\n", "\n"), stderr


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(GPU_PLAN))
    return path


@pytest.fixture(autouse=True)
def no_terminal_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("NO_COLOR", "COLUMNS", "GPUWARDEN_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    yield
    console.configure_logging("warning")


# ---------------------------------------------------------------------------- version, completion


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(["--version"], capsys, monkeypatch)
    core = "compiled" if EXPECT_COMPILED else "pure Python"
    assert (code, out, err) == (0, f"gpuwarden {version('gpuwarden')} (core: {core})\n", "")


def test_show_completion_prints_a_shell_script() -> None:
    # typer detects the shell from the parent process; this switch makes the shell an argument
    env = plain_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    for shell, marker in (("bash", "complete -o default -F _gpuwarden_completion gpuwarden"),
                          ("zsh", "#compdef gpuwarden")):
        result = run_module(["--show-completion", shell], env)
        assert result.returncode == 0, result.stderr
        assert marker in result.stdout
        assert "_GPUWARDEN_COMPLETE" in result.stdout


def test_the_completion_protocol_completes_commands_and_options() -> None:
    commands = run_module([], plain_env(_GPUWARDEN_COMPLETE="complete_bash",
                                        COMP_WORDS="gpuwarden sc", COMP_CWORD="1"))
    assert commands.stdout.split() == ["scan"]
    options = run_module([], plain_env(_GPUWARDEN_COMPLETE="complete_bash",
                                       COMP_WORDS="gpuwarden scan --so", COMP_CWORD="2"))
    assert set(options.stdout.split()) == {"--source", "--soft-fail"}


# ---------------------------------------------------------------------------- colour and width


def test_colour_on_a_terminal_none_with_no_color_or_a_pipe() -> None:
    code, shown, _ = run_on_terminal(DEMO, plain_env())
    assert code == 1 and ANSI_ESCAPE.search(shown), "a terminal gets colour"
    assert "gpuwarden findings" in shown

    code, shown, _ = run_on_terminal(DEMO, plain_env(NO_COLOR=""))  # any value, even empty
    assert code == 1 and "gpuwarden findings" in shown
    assert not ANSI_ESCAPE.search(shown)

    piped = run_module(DEMO, plain_env())
    assert piped.returncode == 1 and "gpuwarden findings" in piped.stdout
    assert not ANSI_ESCAPE.search(piped.stdout + piped.stderr)


def test_table_fits_the_terminal_it_is_shown_on() -> None:
    for columns in (90, 150):
        _, shown, _ = run_on_terminal(DEMO, plain_env(NO_COLOR="1"), columns=columns)
        widths = [len(line.rstrip()) for line in shown.splitlines()]
        assert max(widths) <= columns
        assert max(widths) >= columns - 10, "the table uses the room it has"


def test_table_width_from_columns_else_a_default(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, out, _ = run_cli(DEMO, capsys, monkeypatch)
    assert max(len(line) for line in out.splitlines()) == console.DEFAULT_WIDTH
    for columns in (80, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        _, out, _ = run_cli(DEMO, capsys, monkeypatch)
        table = [line for line in out.splitlines() if line[:1] and line[0] in "┏┃┡│└"]
        assert {len(line) for line in table} == {columns}


def test_long_ids_fold_inside_their_column(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    address = "module." + ".module.".join(f"layer{i:02d}" for i in range(30)) + ".aws_instance.gpu"
    plan = json.loads(json.dumps(GPU_PLAN))
    plan["resource_changes"][0]["address"] = address
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))

    code, out, _ = run_cli(["check-plan", str(path)], capsys, monkeypatch)

    assert code == 1
    table = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    assert {len(line) for line in table} == {console.DEFAULT_WIDTH}
    header = [cell.strip() for cell in table[0].split("┃")[1:-1]]
    assert header == ["Severity", "Enforce", "Policy", "Resource", "Result", "$/month",
                      "Message"]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table[1:]]
    resource_column = "".join(row[3] for row in rows)
    assert address in resource_column  # every character, in order, inside its own column


def test_enforcement_column_shows_which_rows_gate(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli(DEMO, capsys, monkeypatch)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in out.splitlines() if line.startswith("│")]
    first_lines = [row for row in rows if row[0]]  # a row's first line names its severity
    enforcement = {row[1] for row in first_lines}
    assert enforcement == {"deny", "warn", "audit"} or enforcement == {"deny", "audit"}
    assert code == 1 and any(row[1] == "deny" and row[4] == "fail" for row in first_lines)
    assert "Only deny findings fail the check (exit code 1)" in out


def test_report_width_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert console.report_width(io.StringIO()) == console.DEFAULT_WIDTH
    assert console.report_width(None) == console.DEFAULT_WIDTH
    monkeypatch.setenv("COLUMNS", "87")
    assert console.report_width(io.StringIO()) == 87
    monkeypatch.setenv("COLUMNS", "3")
    assert console.report_width(None) == console.MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "wide")
    assert console.report_width(None) == console.DEFAULT_WIDTH


# ---------------------------------------------------------------------------- stderr lines


def test_output_file_is_announced_on_stderr_unless_quiet(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = tmp_path / "report.sarif"
    code, out, err = run_cli(["check-plan", str(plan_file), "-f", "sarif", "-o", str(report)],
                             capsys, monkeypatch)
    results = json.loads(report.read_text())["runs"][0]["results"]
    assert (code, out) == (1, "")
    assert err == f"gpuwarden: wrote sarif report to {report} ({len(results)} findings)\n"

    for quiet in ("--quiet", "-q"):
        code, out, err = run_cli(["check-plan", str(plan_file), "-f", "sarif", "-o", str(report),
                                  quiet], capsys, monkeypatch)
        assert (code, out, err) == (1, "", "")


def test_quiet_scan_still_prints_errors(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(["scan", "-q", "--source", "snapshot:/nonexistent/bundle.yaml"],
                           capsys, monkeypatch)
    assert code == 2 and err.startswith("gpuwarden: error: ") and err.count("\n") == 1


class FakeSource:
    """A live source that takes `seconds` to answer and finds nothing."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
        time.sleep(self.seconds)
        return Collected(snapshot={"aws": {}})


class PretendTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def slow_source(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    import engine.sources.registry as registry

    monkeypatch.setattr(registry, "collector", lambda name: FakeSource(seconds))


def test_progress_shows_on_a_terminal_after_the_delay_and_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    master, slave = os.openpty()
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        with console.progress("reading aws…", delay_s=0.1):
            time.sleep(0.6)
        with console.progress("quick one", delay_s=5):
            pass
        terminal.flush()
        os.set_blocking(master, False)
        shown = os.read(master, 65536).decode()
    finally:
        terminal.close()
        os.close(master)
    assert "reading aws…" in shown
    assert "quick one" not in shown  # done before its delay: never drawn


def test_progress_is_silent_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with console.progress("reading aws…", delay_s=0.01):
        time.sleep(0.2)
    assert stream.getvalue() == ""


@pytest.mark.parametrize(("terminal", "quiet", "shown"),
                         [(True, False, True), (True, True, False), (False, False, False)])
def test_live_scan_progress_only_on_a_terminal_and_not_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    terminal: bool, quiet: bool, shown: bool,
) -> None:
    slow_source(monkeypatch, console.PROGRESS_DELAY_S + 0.5)
    stderr = PretendTerminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    args = ["scan", "--source", "aws", "-f", "json", *(["--quiet"] if quiet else [])]
    code, out, _ = run_cli(args, capsys, monkeypatch)
    assert code == 0 and json.loads(out)["findings"] == []
    assert ("reading aws…" in stderr.getvalue()) is shown
    if not shown:
        assert stderr.getvalue() == ""


def test_enforcing_with_a_replayed_clock_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    slow_source(monkeypatch, 0)
    audit = ["--audit-log", str(tmp_path / "audit.jsonl"), "-f", "json"]
    code, _, err = run_cli(["scan", "--source", "aws", "--enforce", "--now",
                            "2026-12-01T21:00:00Z", *audit], capsys, monkeypatch)
    assert code == 0
    assert err == ("gpuwarden: warning: enforcing with a replayed clock --now "
                   "2026-12-01T21:00:00+00:00; actions run against real resources\n")
    code, _, err = run_cli(["scan", "--source", "aws", "--enforce", *audit], capsys, monkeypatch)
    assert (code, err) == (0, "")
    code, _, err = run_cli(["scan", "--source", "aws", "--now", NOW, "-f", "json"],
                           capsys, monkeypatch)
    assert (code, err) == (0, "")


# ---------------------------------------------------------------------------- SDK loggers


def test_scan_azure_without_credentials_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("azure.identity")
    empty = tmp_path / "empty"
    empty.mkdir()
    # nothing to find credentials in: no AZURE_* variables, an empty home, no `az` on PATH
    env = {"PATH": str(empty), "HOME": str(empty), "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    result = run_module(["scan", "--source", "azure"], env)
    assert time.monotonic() - started < 60
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("gpuwarden: error: azure: ")

    debug = run_module(["--log-level", "debug", "scan", "--source", "azure"], env)
    assert debug.returncode == 2
    assert debug.stderr.count("\n") > 5  # the SDK's own account of each credential it tried
    assert "azure.identity" in debug.stderr


def test_sdk_loggers_print_errors_only_unless_debugging() -> None:
    console.configure_logging("warning")
    for name in console.SDK_LOGGERS:
        assert logging.getLogger(f"{name}.sub").getEffectiveLevel() == logging.ERROR
    assert not console.debugging()
    console.configure_logging("debug")
    assert logging.getLogger("botocore.credentials").isEnabledFor(logging.DEBUG)
    assert console.debugging()
    console.configure_logging("warning")


# ---------------------------------------------------------------------------- crashes


def crash_with(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    import engine.pipeline

    def build_engine(*_: Any, **__: Any) -> Any:
        raise exc

    monkeypatch.setattr(engine.pipeline, "build_engine", build_engine)


def test_an_unexpected_exception_is_one_line_and_exit_2(
    plan_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_with(monkeypatch, RuntimeError("boom\nFAKE: all checks passed\x1b[32m" + "x" * 5000))
    code, out, err = run_cli(["check-plan", str(plan_file)], capsys, monkeypatch)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "\x1b" not in err and "Traceback" not in err
    assert err.startswith("gpuwarden: internal error: RuntimeError: boom FAKE: all checks passed")
    assert len(err) < 400
    assert "--log-level debug" in err


def test_debug_log_level_shows_the_traceback(
    plan_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_with(monkeypatch, KeyError("lost"))
    code, _, err = run_cli(["--log-level", "debug", "check-plan", str(plan_file)], capsys,
                           monkeypatch)
    assert code == 2
    assert err.startswith("Traceback (most recent call last):")
    assert err.splitlines()[-1] == "gpuwarden: internal error: KeyError: 'lost'"


def test_interrupt_is_exit_130_with_one_line(
    plan_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_with(monkeypatch, KeyboardInterrupt())
    code, _, err = run_cli(["check-plan", str(plan_file)], capsys, monkeypatch)
    assert code == 130
    assert [line for line in err.splitlines() if line] == ["gpuwarden: interrupted"]


def test_echoed_input_cannot_spoof_a_second_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    crafted = "plan.json\ngpuwarden: 0 failing\r\x1b[2K\u202e" + "a" * 3000
    for args in (["check-plan", crafted], ["scan", "--demo", "--now", crafted],
                 ["check-plan", "-", "--format", crafted], ["policies", "show", crafted]):
        code, _, err = run_cli(args, capsys, monkeypatch)
        assert code == 2, args
        assert err.count("\n") == 1, (args, err)
        assert not re.search(r"[\x00-\x1f\x7f\u202e]", err.rstrip("\n")), (args, err)
        assert len(err) < 600, (args, len(err))


def test_printable_bounds_and_flattens_text() -> None:
    assert printable("a\nb\tc\x1b[31m\u2028d") == "a b c?[31m d"
    cut = printable("x" * 500, 200)
    assert len(cut) == 200 and cut.endswith("…")
    assert printable("\udcff") == "?"  # a lone surrogate from an undecodable file name
    assert str(InputError("unreadable", file="p\nq" + "z" * 900, line=3)).count("z") < 250


# ---------------------------------------------------------------------------- install hints

INDEX_INSTALL = re.compile(r"""pip install ['"]?gpuwarden(\[[^\]]*\])?['"]?(?![\[\w-]|\s*@)""")


def test_install_hints_point_at_a_checkout_or_git() -> None:
    hint = install_hint("gcp")
    assert "pip install -e '.[gcp]'" in hint
    assert "pip install 'gpuwarden[gcp] @ git+https://github.com/gpuwarden/gpuwarden'" in hint
    offenders = [
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for root in ("engine", "remediations")
        for path in (REPO / root).rglob("*.py")
        for match in INDEX_INSTALL.finditer(path.read_text("utf-8"))
    ]
    assert not offenders, "gpuwarden is on no package index:\n" + "\n".join(offenders)


def test_missing_extra_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.sources.registry as registry

    def missing(name: str) -> Any:
        raise ModuleNotFoundError(f"No module named {name!r}", name="google")

    monkeypatch.setattr(registry.__dict__["importlib"], "import_module", missing)
    with pytest.raises(InputError, match=re.escape(install_hint("gcp"))):
        registry.collector("gcp")
