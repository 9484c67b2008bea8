"""`--organization` and `--folder` on Google Cloud and Azure, against the loopback servers of
tests/test_gcp_source.py and tests/test_azure_source.py: the GCP one is extended here with
Resource Manager's `projects.list` and `folders.list` (a small hierarchy under an
organization), the ARM one already lists subscriptions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("google.cloud.resourcemanager_v3")
pytest.importorskip("azure.mgmt.resource.subscriptions")

from google.cloud import resourcemanager_v3

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.sources import gcp
from engine.sources.gcp import hierarchy
from engine.sources.registry import ScanOptions
from tests.conftest import OFF_HOURS
from tests.test_azure_source import DEV, LOCKED, PROD, FakeArm
from tests.test_azure_source import fake_arm as fake_arm
from tests.test_azure_source import tls as tls
from tests.test_gcp_source import (
    FakeGcp,
    _error,
    estate,
    make_handler,
    project,
    run_cli,
    served,
)

ORG = "organizations/1234567890"
# organizations/1234567890 ─┬─ ml-dev
#                           └─ folders/100 ─┬─ old (DELETE_REQUESTED)
#                                           ├─ folders/300 (DELETE_REQUESTED) ── hidden
#                                           └─ folders/200 ── ml-prod
TREE_PROJECTS = {ORG: ["ml-dev"], "folders/100": ["old"], "folders/200": ["ml-prod"],
                 "folders/300": ["hidden"]}
TREE_FOLDERS = {ORG: ["folders/100"], "folders/100": ["folders/200", "folders/300"]}
DELETED = {"old", "hidden", "folders/300"}


def _project(project_id: str, api: FakeGcp) -> resourcemanager_v3.Project:
    if project_id in api.projects:
        return api.projects[project_id].project
    found = project(project_id, 999, {})
    found.state = resourcemanager_v3.Project.State.DELETE_REQUESTED
    return found


def _folder(name: str) -> resourcemanager_v3.Folder:
    state = (resourcemanager_v3.Folder.State.DELETE_REQUESTED if name in DELETED
             else resourcemanager_v3.Folder.State.ACTIVE)
    return resourcemanager_v3.Folder(name=name, display_name=name, state=state)


def tree_handler(api: FakeGcp, denied: set[str]) -> type:
    """The GCP server of tests/test_gcp_source.py, plus `GET /v3/projects?parent=` and
    `GET /v3/folders?parent=` over TREE_*; a parent in `denied` answers 403."""
    base = make_handler(api)

    class TreeHandler(base):  # type: ignore[valid-type, misc]
        def _route(self, parts: list[str], query: dict[str, list[str]]) -> None:
            if parts in (["v3", "projects"], ["v3", "folders"]):
                parent = (query.get("parent") or [""])[0]
                if parent in denied:
                    return self._send(403, _error(403, "PERMISSION_DENIED", "Permission "
                                                  "'resourcemanager.projects.list' denied",
                                                  "forbidden"))
                if parts[1] == "projects":
                    body = resourcemanager_v3.ListProjectsResponse(
                        projects=[_project(p, api) for p in TREE_PROJECTS.get(parent, [])])
                    return self._send(200, resourcemanager_v3.ListProjectsResponse.to_json(body))
                folders = resourcemanager_v3.ListFoldersResponse(
                    folders=[_folder(f) for f in TREE_FOLDERS.get(parent, [])])
                return self._send(200, resourcemanager_v3.ListFoldersResponse.to_json(folders))
            return super()._route(parts, query)  # type: ignore[no-any-return]

    return TreeHandler


@pytest.fixture(name="denied")
def denied_fixture() -> set[str]:
    return set()


@pytest.fixture(name="gcp_tree")
def gcp_tree_fixture(monkeypatch: pytest.MonkeyPatch, denied: set[str]) -> Iterator[FakeGcp]:
    yield from served(FakeGcp(estate()), lambda api: tree_handler(api, denied), monkeypatch)


def collect_gcp(**options: Any) -> Any:
    return gcp.collect(None, ScanOptions(organization=True, **options), builtin_catalog())


def walk_warnings(collected: Any) -> list[str]:
    """The warnings, less the unreachable zone the estate of tests/test_gcp_source.py has."""
    return [w for w in collected.warnings if "UNREACHABLE" not in w]


# ---------------------------------------------------------------------------- Google Cloud


def test_the_projects_under_an_organization_are_found_through_nested_folders(
    gcp_tree: FakeGcp,
) -> None:
    collected = collect_gcp(folders=(ORG,))
    assert {r.account for r in collected.resources} == {"ml-dev", "ml-prod"}
    assert not walk_warnings(collected)
    walked = sorted((r.path, r.query["parent"][0]) for r in gcp_tree.requests
                    if r.path in ("/v3/projects", "/v3/folders"))
    parents = {"/v3/projects": {ORG, "folders/100", "folders/200"},
               "/v3/folders": {ORG, "folders/100", "folders/200"}}  # not the deleted folder
    assert {p: {q for path, q in walked if path == p} for p in parents} == parents


def test_a_folder_scans_only_its_subtree(gcp_tree: FakeGcp) -> None:
    collected = collect_gcp(folders=("200",))  # a bare number is a folder
    assert {r.account for r in collected.resources} == {"ml-prod"}


def test_an_unreadable_nested_folder_is_a_warning(gcp_tree: FakeGcp, denied: set[str]) -> None:
    denied.add("folders/200")
    collected = collect_gcp(folders=(ORG,))
    assert {r.account for r in collected.resources} == {"ml-dev"}
    (warning,) = walk_warnings(collected)
    assert warning.startswith("gcp: folders/200: permission denied") and "not scanned" in warning


def test_an_unreadable_root_is_one_clear_error(
    gcp_tree: FakeGcp, denied: set[str], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    denied.add(ORG)
    code, out, err = run_cli(["scan", "--source", "gcp", "--folder", ORG], capsys, monkeypatch)
    assert code == 2 and not out and err.count("\n") == 1
    assert f"cannot list the projects under {ORG}: permission denied" in err


def test_projects_are_bounded_and_findings_grouped_by_project(
    gcp_tree: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    collected = collect_gcp(folders=(ORG,), max_accounts=1)
    assert {r.account for r in collected.resources} == {"ml-dev"}
    assert walk_warnings(collected) == ["gcp: 1 more active projects than --max-accounts 1; they "
                                  "were not scanned"]
    code, out, err = run_cli(["scan", "--source", "gcp", "--organization", "--now",
                              OFF_HOURS.isoformat(), "-f", "json"], capsys, monkeypatch)
    assert code == 1, err
    report = json.loads(out)
    assert {f["resource"]["account"] for f in report["findings"]} == {"ml-dev", "ml-prod"}
    assert sum(report["summary"]["by_account"].values()) == report["summary"]["findings"]


@pytest.mark.parametrize("folder", ["projects/1", "folders/x", "organizations/", "100/200"])
def test_a_folder_that_is_not_a_node_is_an_input_error(folder: str) -> None:
    with pytest.raises(InputError, match="is not folders/ID or organizations/ID"):
        hierarchy.parent_node(folder)


def test_organization_and_named_projects_do_not_mix(gcp_tree: FakeGcp) -> None:
    with pytest.raises(InputError, match="not both"):
        collect_gcp(projects=("ml-dev",))


# ---------------------------------------------------------------------------- Azure


def test_every_enabled_subscription_is_scanned_and_named_on_its_findings(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_arm.forbidden.clear()
    fake_arm.subscriptions[LOCKED].subscription.state = "Disabled"
    code, out, err = run_cli(["scan", "--source", "azure", "--organization", "--now",
                              OFF_HOURS.isoformat(), "-f", "json"], capsys, monkeypatch)
    assert code == 1, err
    report = json.loads(out)
    assert {f["resource"]["account"] for f in report["findings"]} == {DEV, PROD}
    assert set(report["summary"]["by_account"]) == {DEV, PROD}
    code, markdown, _ = run_cli(["scan", "--source", "azure", "--organization", "--now",
                                 OFF_HOURS.isoformat(), "-f", "markdown"], capsys, monkeypatch)
    assert "### By account" in markdown and f"`{DEV}`" in markdown


def test_subscriptions_are_bounded(fake_arm: FakeArm) -> None:
    from engine.sources import azure

    fake_arm.forbidden.clear()
    collected = azure.collect(None, ScanOptions(organization=True, max_accounts=2),
                              builtin_catalog())
    assert len({r.account for r in collected.resources}) <= 2
    assert "azure: 1 more enabled subscriptions than --max-accounts 2; they were not scanned" \
        in collected.warnings


def test_organization_and_named_subscriptions_do_not_mix(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run_cli(["scan", "--source", "azure", "--organization", "--subscription",
                              DEV], capsys, monkeypatch)
    assert code == 2 and not out and "not both" in err
