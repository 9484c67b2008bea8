"""`--organization` / `--folder` on Google Cloud: the ACTIVE projects under organizations or
folders, through their nested folders, read with Resource Manager (`projects.list` and
`folders.list` per node, breadth first).

Resource Manager lists only a node's direct children, so the walk visits each folder once; it is
bounded in folders (MAX_FOLDERS; Google allows ten levels) and in projects (`--max-accounts`).
A root that cannot be listed stops the scan with one line; a nested folder that cannot be read
is a warning, and the rest is scanned.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import InputError
from engine.sources.gcp.clients import GcpClients
from engine.sources.gcp.failures import describe_error
from engine.sources.gcp.readers import plain

MAX_FOLDERS = 5000
_NODE = re.compile(r"^(folders|organizations)/\d{1,32}$")
_ACTIVE = "ACTIVE"


def parent_node(text: str) -> str:
    """`--folder` as a Resource Manager node: `folders/ID`, `organizations/ID`, or a bare
    folder number."""
    value = text.strip()
    node = f"folders/{value}" if value.isdigit() else value
    if not _NODE.match(node):
        raise InputError(f"gcp: --folder {value[:80]!r} is not folders/ID or organizations/ID")
    return node


@dataclass
class _Walk:
    limit: int
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)  # by project id
    left_out: int = 0
    folders_seen: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def add(self, project: dict[str, Any]) -> None:
        project_id = str(project.get("projectId") or "")
        if str(project.get("state") or "") != _ACTIVE or not project_id \
                or project_id in self.projects:
            return
        if len(self.projects) >= self.limit:
            self.left_out += 1
            return
        self.projects[project_id] = project


def projects_under(clients: GcpClients, parents: Iterable[str], limit: int
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """The ACTIVE projects under `parents` (nested folders included), at most `limit`, and the
    warnings of what could not be walked."""
    roots = list(dict.fromkeys(parent_node(p) for p in parents))
    walk = _Walk(limit=max(1, limit))
    queue = deque(roots)
    while queue:
        node = queue.popleft()
        try:
            _visit(clients, node, walk, queue)
        except Exception as exc:
            message, _ = describe_error(exc)
            if node in roots:
                raise InputError(f"gcp: cannot list the projects under {node}: {message}"
                                 ) from None
            walk.warnings.append(f"gcp: {node}: {message}; its projects were not scanned")
    if walk.left_out:
        walk.warnings.append(f"gcp: {walk.left_out} more active projects than --max-accounts "
                             f"{walk.limit}; they were not scanned")
    return list(walk.projects.values()), walk.warnings


def _visit(clients: GcpClients, node: str, walk: _Walk, queue: deque[str]) -> None:
    for project in clients.projects.list_projects(parent=node, retry=clients.retry):
        walk.add(plain(project))
    for folder in clients.folders.list_folders(parent=node, retry=clients.retry):
        found = plain(folder)
        name = str(found.get("name") or "")
        if str(found.get("state") or "") != _ACTIVE or name in walk.folders_seen:
            continue
        if len(walk.folders_seen) >= MAX_FOLDERS:
            walk.warnings.append(f"gcp: more than {MAX_FOLDERS} folders; {name} and the "
                                 "rest were not walked")
            queue.clear()
            return
        walk.folders_seen.add(name)
        queue.append(name)
