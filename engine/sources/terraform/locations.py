"""Where each planned resource is written: address → `.tf` file and line of its block.

A regex scan, not an HCL parser: Terraform style puts `resource "type" "name" {` on one line,
which is all a SARIF location or a PR annotation needs. Keys:

- `type.name` for resources of the root module (the directory given);
- `module.a.module.b.type.name` for resources of modules called with a local source
  (`source = "./modules/gpu"`), followed recursively;
- `**.type.name` for a resource block found exactly once anywhere under the directory: the
  fallback for modules whose source is not local (registry, git) and for a directory that holds
  several configurations;
- `call:module.a` (and `call:module.a.module.b`) for the `module` blocks that call modules, local
  or not.

A resource inside a module is located, as Checkov does, at the module call in the root module's
file (what the caller wrote and a pull request of the caller changes), with the resource block in
the module as the location's `definition` (SARIF's related location); a registry module's
resource, whose block is not under the directory, at the call alone.

Paths are the given directory joined with the file's path relative to it, so they stay relative
when the directory is (`infra/modules/gpu/main.tf`). Directories named `.terraform` (downloaded
modules) and other hidden directories are not scanned; unreadable files are skipped, and so is
anything but a regular file within the input size cap (a FIFO named `x.tf` would block a read).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from engine.core.errors import InputError
from engine.core.model import Resource, SourceLocation
from engine.inputfiles import FileTooLarge, max_input_bytes, read_regular_file

ANYWHERE = "**."
CALL = "call:"
_MAX_MODULE_DEPTH = 16

_RESOURCE_BLOCK = re.compile(r'^[ \t]*resource[ \t]+"([^"]+)"[ \t]+"([^"]+)"[ \t]*\{', re.M)
_MODULE_BLOCK = re.compile(r'^[ \t]*module[ \t]+"([^"]+)"[ \t]*\{', re.M)
_SOURCE_ARGUMENT = re.compile(r'^[ \t]*source[ \t]*=[ \t]*"([^"]*)"', re.M)
_TOP_LEVEL_BLOCK = re.compile(
    r"^(?:resource|data|module|variable|output|locals|provider|terraform|import|moved|removed"
    r"|check|ephemeral)\b",
    re.M,
)
_ADDRESS_INDEX = re.compile(r'\[(?:"(?:[^"\\]|\\.)*"|[^\]]*)\]')


def locate_resources(tf_dir: Path) -> dict[str, SourceLocation]:
    """Map resource addresses (without instance keys) to the file and line of their block."""
    root = Path(tf_dir)
    if not root.is_dir():
        raise InputError("--tf-dir is not a directory", file=str(tf_dir))
    locations: dict[str, SourceLocation] = {}
    _scan_module(root, root, "", locations, set())
    seen_anywhere: dict[str, list[SourceLocation]] = {}
    for path in _tf_files_below(root):
        for type_, name, line in _resource_blocks(_read(path)):
            seen_anywhere.setdefault(f"{type_}.{name}", []).append(_location(root, path, line))
    for key, found in seen_anywhere.items():
        if len(found) == 1:
            locations.setdefault(ANYWHERE + key, found[0])
    return locations


def apply_locations(
    resources: Iterable[Resource], locations: Mapping[str, SourceLocation]
) -> list[Resource]:
    """The resources with `location` set where their address is found in `locations`."""
    located: list[Resource] = []
    for resource in resources:
        location = location_for(resource.id, locations)
        located.append(resource.model_copy(update={"location": location}) if location else resource)
    return located


def location_for(address: str, locations: Mapping[str, SourceLocation]) -> SourceLocation | None:
    """The location of the resource block behind `address`.

    Instance keys are dropped (`aws_instance.gpu[0]` → `aws_instance.gpu`) and so is anything
    after the resource (`aws_instance.gpu.root_block_device[0]` is the instance's block).
    """
    key = _block_key(address)
    if key is None:
        return None
    modules, resource = key
    block = locations.get(modules + resource) or locations.get(ANYWHERE + resource)
    if not modules:
        return block
    outermost = ".".join(modules.split(".", 2)[:2])
    call = locations.get(CALL + outermost)
    if call is None:
        return block
    return call.model_copy(update={"definition": block}) if block is not None else call


def _block_key(address: str) -> tuple[str, str] | None:
    """(`module.a.module.b.` or "", `type.name`) of a resource address; None for others."""
    steps = _ADDRESS_INDEX.sub("", address).split(".")
    modules = ""
    while len(steps) >= 2 and steps[0] == "module":
        modules += f"module.{steps[1]}."
        steps = steps[2:]
    if len(steps) < 2 or steps[0] == "data" or not steps[0] or not steps[1]:
        return None
    return modules, f"{steps[0]}.{steps[1]}"


def _scan_module(
    root: Path,
    directory: Path,
    prefix: str,
    locations: dict[str, SourceLocation],
    visited: set[tuple[Path, str]],
) -> None:
    """Record the resource blocks of one module directory, then of its local module calls."""
    if (directory, prefix) in visited or prefix.count("module.") > _MAX_MODULE_DEPTH:
        return
    visited.add((directory, prefix))
    for path in sorted(directory.glob("*.tf")):
        text = _read(path)
        for type_, name, line in _resource_blocks(text):
            locations.setdefault(f"{prefix}{type_}.{name}", _location(root, path, line))
        for call, source, line in _module_calls(text):
            locations.setdefault(f"{CALL}{prefix}module.{call}", _location(root, path, line))
            child = (directory / source).resolve()
            if source.startswith(("./", "../")) and child.is_dir():
                _scan_module(root, child, f"{prefix}module.{call}.", locations, visited)


def _resource_blocks(text: str) -> Iterator[tuple[str, str, int]]:
    for found in _RESOURCE_BLOCK.finditer(text):
        yield found.group(1), found.group(2), text.count("\n", 0, found.start()) + 1


def _module_calls(text: str) -> Iterator[tuple[str, str, int]]:
    """(name, source, line) of `module` blocks."""
    for found in _MODULE_BLOCK.finditer(text):
        following = _TOP_LEVEL_BLOCK.search(text, found.end())
        body = text[found.end() : following.start() if following else len(text)]
        source = _SOURCE_ARGUMENT.search(body)
        line = text.count("\n", 0, found.start()) + 1
        yield found.group(1), source.group(1) if source else "", line


def _tf_files_below(root: Path) -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".tf"):
                yield Path(directory, name)


def _read(path: Path) -> str:
    try:
        data = read_regular_file(path, max_input_bytes())
    except (OSError, FileTooLarge):
        return ""
    # as text mode reads it: universal newlines
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _location(root: Path, path: Path, line: int) -> SourceLocation:
    relative = os.path.relpath(path.resolve(), root.resolve())
    return SourceLocation(file=Path(os.path.normpath(root / relative)).as_posix(), line=line)
