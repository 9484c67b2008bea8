"""Terraform plan adapter: `terraform show -json PLAN` output → normalized `Resource` models.

Only this module knows Terraform and provider field names. What it decides, and why:

- **Which changes count.** `resource_changes[].change.after` of managed resources whose actions
  are create, update or a replace in either order (`["delete","create"]`,
  `["create","delete"]`). Deletes, reads, no-ops, `forget` and data sources are skipped; no-op
  changes still serve joins (the launch template an autoscaling group names). The cost diff
  (`plan_cost_changes`) also reads deletes and the `before` side of updates, through the same
  normalizers, without adding them to what policies evaluate.
- **Ids and names.** `id` and `name` are both the full resource address
  (`module.train.aws_instance.gpu[0]`): it is what a reviewer greps for and what baselines key on.
  Disks with their own encryption settings become VOLUME resources whose id is the address plus
  the block (`aws_instance.gpu.root_block_device[0]`, kind `aws_instance.root_block_device`);
  SageMaker endpoint variants likewise (`...production_variants[0]`).
- **Only mapped types** are returned (`SUPPORTED_TYPES`), so summary counts mean something.
- **Three-valued.** A value Terraform shows as unknown (`after_unknown`) or sensitive is never
  guessed: its normalized path lands in `Resource.unknown` (instance type → `instance_type`,
  `gpu`, `hourly_usd`; tags → `tags` or `tags.<key>`; encryption → `encrypted`; spot markers →
  `capacity`; sizes → `count`). Following Terraform's own semantics, an unknown argument the
  configuration does not set is the provider's computed default (EKS `capacity_type` →
  ON_DEMAND, no GCE `guest_accelerator` → no GPUs), and an unknown key reference it does set
  (`kms_key_id = aws_kms_key.k.arn`) is a key. Terraform leaves `dynamic` blocks out of the
  configuration it prints, so a dynamic block whose `for_each` is unknown reads as unset.
- **Secrets.** Values marked in `after_sensitive`, and attributes that are always secret
  (passwords, raw disk keys: plans before Terraform 0.15 print them in clear), are replaced with
  `"(sensitive)"` before anything is read, so they cannot reach a Resource, its `raw` or a report.
  A sensitive value is unknown to the policies.
- **Tags.** `tags_all` (which holds provider `default_tags`) before `tags`; when `tags_all` is
  unknown, the provider block's constant `default_tags` are merged under `tags`. GCP:
  `terraform_labels`, then `effective_labels`, then `labels`. Kubernetes node labels of node
  groups/pools sit under the cloud tags. An autoscaling group's tags are those it propagates to
  its instances (the ones the spend is attributed by) plus any `gpuwarden*` control tag; a launch
  template's include its instance `tag_specifications`.
- **Encryption.** EBS `encrypted` unset in a plan is unknown (account default encryption may
  apply); every aws_instance has a root VOLUME even when the plan shows no root_block_device. GCE
  and Azure managed disks are always platform-encrypted; the customer key is a KMS key / disk
  encryption set. S3 encrypts every new bucket with SSE-S3 since January 2023, so a bucket is
  `encrypted=True`; `customer_key` is True only for `aws:kms` with a key id, from the bucket's
  inline block or an `aws_s3_bucket_server_side_encryption_configuration` in the same plan (joined
  by reference or bucket name). SageMaker always encrypts its ML volumes; `customer_key` follows
  its KMS key argument.
- **Prices.** The catalog fills GPU spec and list price (`engine.enrich`). SageMaker `ml.` types
  use the matching EC2 type (a lower bound: SageMaker adds a premium). GCE/GKE machines with
  attached `guest_accelerator`s get the accelerators' price only (the machine part is not in the
  catalog).
- **Region** from the resource (`region`, `availability_zone`, `zone`, `location`; zones cut to
  their region), else the provider block's constant `region`.
- `raw` shares unchanged subtrees with the plan document (no copies): treat it as read-only.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from engine.catalog import Catalog, builtin_catalog
from engine.enrich import enrich
from engine.errors import InputError, printable
from engine.inputfiles import bounded_resource, identifier, read_input_bytes, tidy_document
from engine.model import Capacity, Category, CostChange, GpuSpec, Resource, State

SUPPORTED_FORMAT_MAJORS = frozenset({0, 1})
SENSITIVE = "(sensitive)"
KNOWN_AFTER_APPLY = "(known after apply)"

_SHOW_JSON_HINT = "run `terraform show -json PLAN > plan.json` and pass plan.json"
_EVALUATED_ACTIONS = (
    ("create",),
    ("update",),
    ("delete", "create"),
    ("create", "delete"),
)
_TYPE_UNKNOWN = frozenset({"instance_type", "gpu", "hourly_usd"})
_GPU_UNKNOWN = frozenset({"gpu", "hourly_usd"})
_ENCRYPTION_UNKNOWN = frozenset({"encrypted", "customer_key"})

# Attributes that are secret whatever after_sensitive says (plans before Terraform 0.15 print
# sensitive values in clear). Checked on the resource object and its first level of blocks.
_ALWAYS_SECRET_KEYS = frozenset(
    {
        "password",
        "admin_password",
        "master_password",
        "disk_encryption_key_raw",
        "raw_key",
        "rsa_encrypted_key",
        "private_key",
        "client_secret",
        "secret_key",
        "access_key",
        "secret_string",
        "sas_token",
        "primary_access_key",
        "secondary_access_key",
        "primary_connection_string",
        "secondary_connection_string",
    }
)


# --------------------------------------------------------------------------------------------
# Reading a plan file
# --------------------------------------------------------------------------------------------


def read_plan(path: str) -> dict[str, Any]:
    """Read `terraform show -json` output from `path` ("-" for stdin) and check it is a plan.

    Accepts UTF-8 with or without BOM, UTF-16/UTF-32 with BOM, and BOM-less UTF-16. Every problem
    is an `InputError` naming the file (and line where JSON parsing gives one). The file is read
    and the document tidied within the bounds of `engine.inputfiles`.
    """
    display = "<stdin>" if path == "-" else path
    data = _read_bytes(path, display)
    document = _parse_plan_bytes(data, display)
    check_plan_document(document, display)
    plan: dict[str, Any] = document
    return plan


def check_plan_document(document: Any, source: str) -> None:
    """Raise `InputError` unless `document` looks like `terraform show -json` output of a plan."""
    if not isinstance(document, dict):
        raise InputError(
            f"expected a JSON object, found {_json_type(document)}; {_SHOW_JSON_HINT}",
            file=source,
        )
    if "resource_changes" not in document and "planned_values" not in document:
        if _looks_like_state(document):
            raise InputError(
                "this is a Terraform state file, not a plan; create a plan with "
                "`terraform plan -out=PLAN` and " + _SHOW_JSON_HINT,
                file=source,
            )
        raise InputError(
            "not a Terraform plan: no resource_changes or planned_values; " + _SHOW_JSON_HINT,
            file=source,
        )
    _check_format_version(document.get("format_version"), source)
    changes = document.get("resource_changes")
    if changes is not None and not isinstance(changes, list):
        raise InputError(
            f"resource_changes must be a list, found {_json_type(changes)}", file=source
        )


def _read_bytes(path: str, display: str) -> bytes:
    try:
        return read_input_bytes(path, "plan", display, stdin=True)
    except FileNotFoundError:
        raise InputError("cannot read plan: no such file", file=display) from None
    except IsADirectoryError:
        raise InputError(
            "cannot read plan: this is a directory, expected a plan JSON file", file=display
        ) from None
    except PermissionError:
        raise InputError("cannot read plan: permission denied", file=display) from None
    except OSError as exc:
        raise InputError(f"cannot read plan: {exc.strerror or exc}", file=display) from None


def _parse_plan_bytes(data: bytes, display: str) -> Any:
    if not data.strip(b" \t\r\n\x00\xef\xbb\xbf\xff\xfe"):
        raise InputError(
            "empty file; expected the output of `terraform show -json PLAN`", file=display
        )
    if data.startswith(b"PK\x03\x04"):
        raise InputError(
            "this is a binary plan; run `terraform show -json PLAN > plan.json` and pass plan.json",
            file=display,
        )
    if data.startswith(b"\x1f\x8b"):
        raise InputError("this is a gzip-compressed file, not plan JSON", file=display)
    text = _decode_text(data, display)
    return _load_json(text, display)


def _decode_text(data: bytes, display: str) -> bytes | str:
    """UTF-8 stays bytes (orjson reads them directly); other encodings are decoded to str."""
    codec, skip = _detect_encoding(data, display)
    if codec == "utf-8":
        return data[skip:]
    try:
        return data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid {codec.upper()} text: {exc.reason}", file=display) from None


def _detect_encoding(data: bytes, display: str) -> tuple[str, int]:
    boms = (
        (b"\xff\xfe\x00\x00", "utf-32-le"),
        (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xef\xbb\xbf", "utf-8"),
        (b"\xff\xfe", "utf-16-le"),
        (b"\xfe\xff", "utf-16-be"),
    )
    for bom, codec in boms:
        if data.startswith(bom):
            return codec, len(bom)
    if b"\x00" not in data[:4096]:
        return "utf-8", 0
    # JSON starts with an ASCII character, so a BOM-less UTF-16 file has a NUL in one byte of
    # the first pair.
    if len(data) >= 2 and data[0] == 0 and data[1] != 0:
        return "utf-16-be", 0
    if len(data) >= 2 and data[0] != 0 and data[1] == 0:
        return "utf-16-le", 0
    raise InputError("this is a binary file, not plan JSON; " + _SHOW_JSON_HINT, file=display)


def _load_json(text: bytes | str, display: str) -> Any:
    try:
        return tidy_document(orjson.loads(text), display, len(text), from_orjson=True)
    except orjson.JSONDecodeError:
        pass  # re-parse with json for a line number (or accept what only orjson rejects)
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"not valid UTF-8 text (byte 0x{data[exc.start]:02x}); save the plan JSON as UTF-8",
                file=display,
                line=data[: exc.start].count(b"\n") + 1,
            ) from None
    try:
        document = json.loads(text)
    except RecursionError:
        raise InputError("not a Terraform plan: JSON nested too deeply", file=display) from None
    except json.JSONDecodeError as exc:
        raise _json_error(text, exc, display) from None
    except ValueError:  # the only other ValueError: an integer too long to convert
        raise InputError(f"invalid JSON: a number has more than {sys.get_int_max_str_digits()} "
                         "digits", file=display) from None
    return tidy_document(document, display, len(text), from_orjson=False)


def _json_error(text: str, exc: json.JSONDecodeError, display: str) -> InputError:
    if exc.msg == "Extra data" and _is_streamed_plan_log(text):
        return InputError(
            "this is the streamed log of `terraform plan -json`, not a plan; save a plan with "
            "`terraform plan -out=PLAN` and " + _SHOW_JSON_HINT,
            file=display,
        )
    if exc.pos >= len(text.rstrip()):
        return InputError(
            f"invalid JSON: unexpected end of file (is it truncated?): {exc.msg}",
            file=display,
            line=exc.lineno,
        )
    return InputError(
        f"invalid JSON: {exc.msg} (column {exc.colno})", file=display, line=exc.lineno
    )


def _is_streamed_plan_log(text: str) -> bool:
    first_line = text.lstrip("\ufeff").split("\n", 1)[0]
    try:
        first = json.loads(first_line)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(first, dict) and ("@level" in first or "@message" in first)


def _looks_like_state(document: Mapping[str, Any]) -> bool:
    return "values" in document or ("resources" in document and "lineage" in document)


def _check_format_version(version: Any, source: str) -> None:
    if version is None:
        return  # hand-written plans often omit it; everything else is checked on its own
    found = re.match(r"(\d+)\.\d+", version) if isinstance(version, str) else None
    if found is None or int(found.group(1)) not in SUPPORTED_FORMAT_MAJORS:
        raise InputError(
            f"unsupported plan format_version {printable(repr(version), 40)} (supported: 0.x "
            "and 1.x)", file=source
        )


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------------------------
# Values, unknowns and sensitivity of one planned object
# --------------------------------------------------------------------------------------------

Path_ = tuple[str | int, ...]
_T = TypeVar("_T")


def _step(node: Any, key: str | int) -> Any:
    if isinstance(key, int):
        return node[key] if isinstance(node, list) and 0 <= key < len(node) else None
    return node.get(key) if isinstance(node, dict) else None


def _dig(node: Any, path: Path_) -> Any:
    for key in path:
        node = _step(node, key)
    return node


def _marked(marks: Any, path: Path_) -> bool:
    """True when `marks` (an after_unknown / after_sensitive tree) flags `path` or a parent."""
    if marks is True:
        return True
    for key in path:
        marks = _step(marks, key)
        if marks is True:
            return True
    return False


class Attrs:
    """One planned object (or a block of it) with its unknown and sensitive marks and its config.

    Every read is shape-safe: a path through a value of the wrong type reads as absent. `config` is
    the block's configuration expressions; None when the plan carries no configuration.
    """

    __slots__ = ("_config", "_sensitive", "_unknown", "value")

    def __init__(self, value: Any, unknown: Any, sensitive: Any, config: Any) -> None:
        self.value = value
        self._unknown = unknown
        self._sensitive = sensitive
        self._config = config

    def child(self, *path: str | int) -> Attrs:
        value, unknown, sensitive, config = self.value, self._unknown, self._sensitive, self._config
        for key in path:
            value = _step(value, key)
            unknown = True if unknown is True else _step(unknown, key)
            sensitive = True if sensitive is True else _step(sensitive, key)
            config = (_step(config, key) or {}) if config is not None else None
        return Attrs(value, unknown, sensitive, config)

    # marks -------------------------------------------------------------------------------------

    def is_unknown(self, *path: str | int) -> bool:
        return _marked(self._unknown, path)

    def is_sensitive(self, *path: str | int) -> bool:
        return _marked(self._sensitive, path)

    def hidden(self, *path: str | int) -> bool:
        """True when the value at `path` is unknown until apply or withheld as sensitive."""
        return self.is_unknown(*path) or self.is_sensitive(*path)

    def has(self, key: str) -> bool:
        """Whether the provider schema shows attribute `key` at all (known or unknown)."""
        return (isinstance(self.value, dict) and key in self.value) or (
            isinstance(self._unknown, dict) and key in self._unknown
        )

    def configured(self, *path: str | int) -> bool | None:
        """Whether the configuration sets `path` (None when the plan has no configuration)."""
        if self._config is None:
            return None
        return _dig(self._config, path) is not None

    def left_to_provider(self, *path: str | int) -> bool:
        """Unknown only because the configuration leaves it to the provider's default."""
        return self.hidden(*path) and self.configured(*path) is False

    def references(self, *path: str | int) -> list[str]:
        """The `references` of the configured expression at `path` (empty when none)."""
        refs = _step(_dig(self._config, path), "references")
        return [ref for ref in refs if isinstance(ref, str)] if isinstance(refs, list) else []

    # values ------------------------------------------------------------------------------------

    def get(self, *path: str | int) -> Any:
        return None if self.hidden(*path) else _dig(self.value, path)

    def text(self, *path: str | int) -> str | None:
        value = self.get(*path)
        return value if isinstance(value, str) and value != "" else None

    def flag(self, *path: str | int) -> bool | None:
        value = self.get(*path)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        return None

    def number(self, *path: str | int) -> int | None:
        """A whole non-negative number (counts, sizes); strings holding one are accepted."""
        value = self.get(*path)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value) or value != int(value):
            return None
        return max(0, min(int(value), 1_000_000_000))

    def is_set(self, *path: str | int) -> bool | None:
        """Whether a reference (KMS key, encryption set) is given: True, False, None = unknown.

        A sensitive value counts as given when it is not null (the redacted copy tells that
        without the secret). An unknown one is given when the configuration sets it (it refers
        to a key created in the same apply: variables are known at plan time) and is the
        provider's default, no key, when the configuration leaves it out.
        """
        if self.is_unknown(*path):
            return self.configured(*path)
        if self.is_sensitive(*path):
            return _dig(self.value, path) is not None
        return self.text(*path) is not None

    def blocks(self, name: str) -> list[Attrs]:
        """The nested blocks under `name` (a list of objects, or a single object)."""
        value = self.get(name)
        if isinstance(value, dict):
            return [self.child(name)]
        if not isinstance(value, list):
            return []
        return [self.child(name, i) for i, item in enumerate(value) if isinstance(item, dict)]

    def first(self, name: str) -> Attrs | None:
        found = self.blocks(name)
        return found[0] if found else None

    def mapping(self, name: str, unknown: set[str], unknown_path: str = "tags") -> dict[str, str]:
        """A string map (tags, labels); unknown or sensitive entries are marked per key.

        Such an entry keeps its key (its presence is known) with a placeholder value.
        """
        if self.hidden(name):
            unknown.add(unknown_path)
            return {}
        value = _step(self.value, name)
        if not isinstance(value, dict):
            return {}
        result: dict[str, str] = {}
        for key, item in value.items():
            key = str(key)  # a plan embedded in YAML may hold non-string keys
            if self.is_sensitive(name, key):
                unknown.add(f"{unknown_path}.{key}")
                result[key] = SENSITIVE
            elif self.is_unknown(name, key):
                unknown.add(f"{unknown_path}.{key}")
                result[key] = KNOWN_AFTER_APPLY
            elif item is not None:
                result[key] = _tag_text(item)
        return result


def _tag_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _redact(value: Any, sensitive: Any, depth: int = 0) -> Any:
    """`value` with sensitive parts replaced by "(sensitive)"; untouched subtrees are shared.

    `depth` counts objects from the resource (0) to its blocks (1): secret-named attributes are
    looked for there; deeper, only what `after_sensitive` marks.
    """
    if sensitive is True:
        return None if value is None else SENSITIVE
    if isinstance(value, list):
        marks = sensitive if isinstance(sensitive, list) else []
        items = [
            _redact(item, marks[i] if i < len(marks) else None, depth)
            for i, item in enumerate(value)
        ]
        unchanged = all(new is old for new, old in zip(items, value, strict=True))
        return value if unchanged else items
    if not isinstance(value, dict):
        return value
    marks_by_key = sensitive if isinstance(sensitive, dict) else {}
    changed: dict[str, Any] = {}
    for key, item in value.items():
        mark = True if depth <= 1 and key in _ALWAYS_SECRET_KEYS else marks_by_key.get(key)
        scan_names = depth == 0 and isinstance(item, dict | list)
        if not mark and not scan_names:
            continue
        new = _redact(item, mark, depth + 1)
        if new is not item:
            changed[key] = new
    return {**value, **changed} if changed else value


# --------------------------------------------------------------------------------------------
# The plan as a whole: changes by address, configuration, provider settings
# --------------------------------------------------------------------------------------------

_INDEX = r'\[(?:"(?:[^"\\]|\\.)*"|[0-9]+)\]'
_MODULE_STEP = re.compile(rf"module\.([A-Za-z0-9_-]+)(?:{_INDEX})?(?:\.|$)")
_TRAILING_INDEX = re.compile(rf"{_INDEX}$")


def module_names(module_address: str) -> list[str] | None:
    """`module.a[0].module.b["x"]` → ["a", "b"]; None when it is not a module address."""
    names: list[str] = []
    position = 0
    while position < len(module_address):
        found = _MODULE_STEP.match(module_address, position)
        if found is None:
            return None
        names.append(found.group(1))
        position = found.end()
    return names


def _module_part(address: str) -> str:
    """The module path of a resource address (`module.a[0].aws_x.y[1]` → `module.a[0]`)."""
    position = 0
    while True:
        found = _MODULE_STEP.match(address, position)
        if found is None or found.end() >= len(address):
            return address[: max(position - 1, 0)]
        position = found.end()


def _without_index(address: str) -> str:
    return _TRAILING_INDEX.sub("", address)


def _index_suffix(address: str) -> str:
    found = _TRAILING_INDEX.search(address)
    return found.group(0) if found else ""


@dataclass(slots=True)
class PlannedChange:
    """One resource change of the plan, with what normalizers need to read and join it."""

    address: str
    type: str
    module_address: str
    config: dict[str, Any] | None  # the resource's configuration block; None when unavailable
    attrs: Attrs
    raw: dict[str, Any]
    plan: PlanIndex

    @property
    def module_prefix(self) -> str:
        return f"{self.module_address}." if self.module_address else ""

    @property
    def catalog(self) -> Catalog:
        return self.plan.catalog


class PlanIndex:
    """Lookups across one plan: changes by address, configuration, provider blocks."""

    def __init__(self, plan: Mapping[str, Any], catalog: Catalog) -> None:
        configuration = plan.get("configuration")
        self.catalog = catalog
        self._configuration = configuration if isinstance(configuration, dict) else None
        self._by_address: dict[str, dict[str, Any]] = {}
        self._by_base: dict[str, str] = {}
        self._module_configs: dict[tuple[str, ...], dict[str, dict[str, Any]] | None] = {}
        self._planned: dict[str, PlannedChange | None] = {}
        self._attribute_index: dict[tuple[str, str], dict[str, str]] = {}
        self._memo: dict[str, Any] = {}

    def add(self, change: dict[str, Any]) -> None:
        """Index a change whose planned object is known (anything but a delete)."""
        address, body = change["address"], change["change"]
        if isinstance(body.get("after"), dict) and isinstance(change.get("type"), str):
            self._by_address.setdefault(address, change)
            self._by_base.setdefault(_without_index(address), address)

    def planned(self, address: str) -> PlannedChange | None:
        if address not in self._planned:
            change = self._by_address.get(address)
            self._planned[address] = self._build(change) if change is not None else None
        return self._planned[address]

    def _build(self, change: dict[str, Any]) -> PlannedChange:
        body = change["change"]
        module_address = change.get("module_address")
        if not isinstance(module_address, str):
            module_address = _module_part(change["address"])
        name = change.get("name")
        config = self._resource_config(module_address, change["type"], name)
        sensitive = body.get("after_sensitive")
        raw = _redact(body["after"], sensitive)
        if not isinstance(raw, dict):
            raw = {}  # the whole object is sensitive
        expressions = None
        if config is not None:
            found = config.get("expressions")
            expressions = found if isinstance(found, dict) else {}
        attrs = Attrs(raw, body.get("after_unknown"), sensitive, expressions)
        return PlannedChange(
            change["address"], change["type"], module_address, config, attrs, raw, self
        )

    # joins ---------------------------------------------------------------------------------

    def find(self, address: str, *, index_hint: str = "") -> PlannedChange | None:
        """The change at `address` (a resource address without index), preferring the
        instance with the caller's own index, then the resource itself, then any instance."""
        for candidate in (address + index_hint, address):
            if candidate in self._by_address:
                return self.planned(candidate)
        first_instance = self._by_base.get(address)
        return self.planned(first_instance) if first_instance else None

    def find_by_attribute(self, type_: str, attribute: str, value: str) -> PlannedChange | None:
        """The change of `type_` whose planned `attribute` equals `value` (a literal name)."""
        key = (type_, attribute)
        if key not in self._attribute_index:
            values: dict[str, str] = {}
            for address, change in self._by_address.items():
                found = change["change"]["after"].get(attribute)
                if change["type"] == type_ and isinstance(found, str):
                    values.setdefault(found, address)
            self._attribute_index[key] = values
        found_address = self._attribute_index[key].get(value)
        return self.planned(found_address) if found_address else None

    def memo(self, key: str, compute: Callable[[], _T]) -> _T:
        """A plan-wide lookup table, computed once (joins must stay linear on big plans)."""
        if key not in self._memo:
            self._memo[key] = compute()
        found: _T = self._memo[key]
        return found

    def of_type(self, type_: str) -> list[PlannedChange]:
        found = [self.planned(a) for a, c in self._by_address.items() if c["type"] == type_]
        return [change for change in found if change is not None]

    # configuration -------------------------------------------------------------------------

    def _resource_config(self, module_address: str, type_: str, name: Any) -> dict[str, Any] | None:
        if self._configuration is None or not isinstance(name, str):
            return None
        names = module_names(module_address) if module_address else []
        if names is None:
            return None
        key = tuple(names)
        if key not in self._module_configs:
            self._module_configs[key] = self._module_resources(key)
        resources = self._module_configs[key]
        return resources.get(f"{type_}.{name}") if resources is not None else None

    def _module_resources(self, names: tuple[str, ...]) -> dict[str, dict[str, Any]] | None:
        module: Any = _step(self._configuration, "root_module")
        for name in names:
            module = _dig(module, ("module_calls", name, "module"))
        resources = _step(module, "resources")
        if not isinstance(resources, list):
            return None if module is None else {}
        return {
            entry["address"]: entry
            for entry in resources
            if isinstance(entry, dict)
            and isinstance(entry.get("address"), str)
            and entry.get("mode", "managed") == "managed"
        }

    def provider_setting(self, change: PlannedChange, provider: str, *path: str | int) -> Any:
        """A constant argument of the provider block a resource uses (`region`, `default_tags`).

        None when no provider block sets it; `NOT_CONSTANT` when it is set by an expression.
        Raises nothing: with no configuration in the plan, returns `NO_CONFIGURATION`.
        """
        providers = _step(self._configuration, "provider_config")
        if change.config is None or not isinstance(providers, dict):
            return NO_CONFIGURATION
        key = change.config.get("provider_config_key")
        candidates = [key, key.rsplit(":", 1)[-1]] if isinstance(key, str) else []
        for candidate in [*candidates, provider]:
            node = _dig(_step(providers, candidate), ("expressions", *path))
            if node is None:
                continue
            if isinstance(node, dict) and "constant_value" in node:
                return node["constant_value"]
            return NOT_CONSTANT
        return None


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_CONSTANT = _Marker("NOT_CONSTANT")
NO_CONFIGURATION = _Marker("NO_CONFIGURATION")


# --------------------------------------------------------------------------------------------
# Evaluating the plan
# --------------------------------------------------------------------------------------------

Normalizer = Callable[[PlannedChange], list[Resource]]
_NORMALIZERS: dict[str, Normalizer] = {}


def normalizer(*types: str) -> Callable[[Normalizer], Normalizer]:
    """Register the function that turns a planned change of `types` into resources."""

    def register(function: Normalizer) -> Normalizer:
        for type_ in types:
            _NORMALIZERS[type_] = function
        return function

    return register


def plan_resources(
    plan: dict[str, Any], source: str, catalog: Catalog | None = None
) -> list[Resource]:
    """Normalized resources for the creates, updates and replaces of `plan`.

    `source` names the plan in errors. Only types in `SUPPORTED_TYPES` are returned. Raises
    `InputError` naming the file and change when the plan's structure is broken.
    """
    check_plan_document(plan, source)
    index = PlanIndex(plan, catalog or builtin_catalog())
    evaluated: dict[str, None] = {}  # addresses in plan order, each once
    for position, change in enumerate(plan.get("resource_changes") or []):
        _check_change(change, position, source)
        index.add(change)
        if _is_evaluated(change):
            evaluated[change["address"]] = None
    resources: list[Resource] = []
    for address in evaluated:
        planned = index.planned(address)
        if planned is not None:
            resources.extend(_enrich(r, index.catalog) for r in _normalize(planned, source))
    return resources


_CHANGE_KINDS: dict[tuple[str, ...], str] = {
    ("create",): "create",
    ("update",): "update",
    ("delete", "create"): "replace",
    ("create", "delete"): "replace",
    ("delete",): "delete",
    ("no-op",): "no-op",
}


# The cost diff's input is the core's `CostChange`; the `before` side is read from
# `change.before` by the same normalizers, so deletes and the old side of updates are priced
# like anything planned. The old name stays for its importers.
PlanCostChange = CostChange


def plan_cost_changes(
    plan: dict[str, Any], source: str, catalog: Catalog | None = None
) -> list[CostChange]:
    """Every managed change of a mapped type (no-ops included, for totals) with its resources
    before and after. Resources keep `State.PLANNED` on both sides."""
    check_plan_document(plan, source)
    catalog = catalog or builtin_catalog()
    actions: dict[str, str] = {}
    for position, change in enumerate(plan.get("resource_changes") or []):
        _check_change(change, position, source)
        kind = _CHANGE_KINDS.get(tuple(change["change"]["actions"]))
        if kind is not None and change.get("mode", "managed") == "managed" \
                and change.get("type") in _NORMALIZERS:
            actions.setdefault(change["address"], kind)
    after = _normalized_by_address(plan, source, catalog, {"create", "update", "replace",
                                                            "no-op"})
    before = _normalized_by_address(_before_plan(plan), source, catalog,
                                    {"update", "replace", "delete", "no-op"}, actions)
    return [
        CostChange.model_validate({"address": address, "action": kind,
                                   "before": tuple(before.get(address, ())),
                                   "after": tuple(after.get(address, ()))})
        for address, kind in actions.items()
    ]


def _before_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as if every `before` object were planned: what existed, to normalize it."""
    changes = []
    for change in plan.get("resource_changes") or []:
        body = change["change"]
        before = body.get("before")
        if not isinstance(before, dict):
            continue
        changes.append({**change, "change": {
            "actions": ["create"], "before": None, "after": before, "after_unknown": {},
            "after_sensitive": body.get("before_sensitive") or {},
        }})
    return {**plan, "resource_changes": changes}


def _normalized_by_address(
    plan: dict[str, Any],
    source: str,
    catalog: Catalog,
    kinds: set[str],
    actions: Mapping[str, str] | None = None,
) -> dict[str, list[Resource]]:
    """Normalized resources of the changes whose kind is in `kinds`, by change address.
    `actions` gives each address's kind when the plan's own actions were rewritten."""
    index = PlanIndex(plan, catalog)
    wanted: list[str] = []
    for change in plan.get("resource_changes") or []:
        index.add(change)
        address = change["address"]
        kind = (actions or {}).get(address) if actions is not None \
            else _CHANGE_KINDS.get(tuple(change["change"]["actions"]))
        if kind in kinds and change.get("type") in _NORMALIZERS \
                and change.get("mode", "managed") == "managed" \
                and isinstance(change["change"].get("after"), dict):
            wanted.append(address)
    found: dict[str, list[Resource]] = {}
    for address in wanted:
        planned = index.planned(address)
        if planned is not None:
            found[address] = [_enrich(r, catalog) for r in _normalize(planned, source)]
    return found


def _check_change(change: Any, position: int, source: str) -> None:
    """Raise `InputError` unless `change` has the structure every reader relies on. Its address
    becomes an `identifier` (one line, bounded) in place, for joins, ids and messages alike."""
    where = f"resource_changes[{position}]"
    if not isinstance(change, dict):
        raise InputError(f"{where} must be an object, found {_json_type(change)}", file=source)
    address = change.get("address")
    if not isinstance(address, str) or not address:
        raise InputError(f"{where} has no address", file=source)
    address = change["address"] = identifier(address)
    if not isinstance(change.get("type", ""), str):
        raise InputError(f"{printable(address)}: type must be a string, found "
                         f"{_json_type(change['type'])}", file=source)
    address = printable(address)  # as messages echo it
    body = change.get("change")
    if not isinstance(body, dict):
        raise InputError(f"{address}: 'change' must be an object", file=source)
    actions = body.get("actions")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise InputError(f"{address}: change.actions must be a list of strings", file=source)
    after = body.get("after")
    if tuple(actions) in _EVALUATED_ACTIONS and not isinstance(after, dict):
        raise InputError(f"{address}: change.after must be an object", file=source)


def _is_evaluated(change: dict[str, Any]) -> bool:
    type_ = change.get("type")
    return (
        change.get("mode", "managed") == "managed"
        and isinstance(type_, str)
        and type_ in _NORMALIZERS
        and tuple(change["change"]["actions"]) in _EVALUATED_ACTIONS
    )


def _normalize(planned: PlannedChange, source: str) -> list[Resource]:
    # The change indexed at an address is the first one planned there, which need not be of the
    # type the caller saw when two changes share an address (deposed objects, broken plans).
    normalize = _NORMALIZERS.get(planned.type)
    try:
        return normalize(planned) if normalize is not None else []
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = ".".join(str(part) for part in problem.get("loc", ()))
        raise InputError(
            f"{printable(planned.address)}: cannot read {field or 'the resource'}: "
            f"{printable(str(problem.get('msg')))}",
            file=source,
        ) from None


def _enrich(resource: Resource, catalog: Catalog) -> Resource:
    instance_type = resource.instance_type
    if resource.kind.startswith("aws_sagemaker") and instance_type and instance_type[:3] == "ml.":
        # An ML instance is priced as the EC2 type it runs on (SageMaker adds a premium).
        ec2 = resource.model_copy(update={"instance_type": instance_type[3:]})
        resource = enrich(ec2, catalog).model_copy(update={"instance_type": instance_type})
    else:
        resource = enrich(resource, catalog)
    return bounded_resource(resource)


def _resource(
    change: PlannedChange,
    category: Category,
    provider: str,
    unknown: Iterable[str],
    **fields: Any,
) -> Resource:
    fields.setdefault("kind", change.type)
    fields.setdefault("id", change.address)
    fields.setdefault("name", fields["id"])
    fields.setdefault("raw", change.raw)
    return Resource(
        provider=provider,
        category=category,
        state=State.PLANNED,
        unknown=frozenset(unknown),
        **fields,
    )


def _volume(
    change: PlannedChange,
    parent: Resource,
    block_path: str,
    block: Attrs,
    *,
    encrypted: bool | None,
    customer_key: bool | None,
    unknown: Iterable[str],
    extra_tags: Mapping[str, str] | None = None,
) -> Resource:
    """A disk of `parent` with its own encryption settings, as a VOLUME resource.

    It carries its parent's tags (an exemption on an instance covers its disks).
    """
    tag_unknowns = {u for u in parent.unknown if u == "tags" or u.startswith("tags.")}
    return _resource(
        change,
        Category.VOLUME,
        parent.provider,
        {*unknown, *tag_unknowns},
        kind=f"{change.type}.{block_path.split('[', 1)[0]}",
        id=f"{change.address}.{block_path}",
        region=parent.region,
        cluster=parent.cluster,
        tags={**parent.tags, **(extra_tags or {})},
        count=parent.count,
        encrypted=encrypted,
        customer_key=customer_key,
        raw=block.value if isinstance(block.value, dict) else {},
    )


# --------------------------------------------------------------------------------------------
# Readers shared by several types
# --------------------------------------------------------------------------------------------


def _instance_type(attrs: Attrs, unknown: set[str], *path: str | int) -> str | None:
    if attrs.hidden(*path):
        unknown.update(_TYPE_UNKNOWN)
        return None
    value = attrs.text(*path)
    return value.rsplit("/", 1)[-1] if value else None  # GCP may hold a machineTypes/ URL


def _count(attrs: Attrs, unknown: set[str], *paths: Path_, default: int = 1) -> int:
    """The first known count among `paths` (later ones are fallbacks, e.g. min size).

    `count` is marked unknown when a configured count is not known yet.
    """
    if attrs.hidden(*paths[0]) and not attrs.left_to_provider(*paths[0]):
        unknown.add("count")
    for path in paths:
        value = attrs.number(*path)
        if value is not None:
            return value
    return default


def _spot_capacity(spot: bool | None, unknown: set[str]) -> Capacity:
    if spot is None:
        unknown.add("capacity")
        return Capacity.UNKNOWN
    return Capacity.SPOT if spot else Capacity.ON_DEMAND


def _flag_or_default(attrs: Attrs, key: str, default: bool) -> bool | None:
    """A boolean argument; its provider default when left unset; None when not known yet."""
    if attrs.hidden(key):
        return default if attrs.left_to_provider(key) else None
    found = attrs.flag(key)
    return default if found is None else found


def _any_key(attrs: Attrs, *paths: Path_) -> bool | None:
    """Whether any of the key references at `paths` is set (None when that is not known)."""
    states = [attrs.is_set(*path) for path in paths]
    if any(states):
        return True
    return None if None in states else False


def _mark_key(customer_key: bool | None, unknown: set[str]) -> bool | None:
    if customer_key is None:
        unknown.add("customer_key")
    return customer_key


def _merge_defaults(defaults: Any, own: dict[str, str], unknown: set[str]) -> dict[str, str]:
    """Provider-level default tags/labels under the resource's own ones."""
    if isinstance(defaults, dict):
        return {**{k: _tag_text(v) for k, v in defaults.items() if v is not None}, **own}
    if defaults is not None:  # not a constant, or no configuration to tell
        unknown.add("tags")
    return own


def _aws_tags(change: PlannedChange, unknown: set[str]) -> dict[str, str]:
    """`tags_all` when known, else `tags` plus the provider's constant `default_tags`."""
    attrs = change.attrs
    if attrs.has("tags_all") and not attrs.hidden("tags_all"):
        return attrs.mapping("tags_all", unknown)
    own = attrs.mapping("tags", unknown)
    if not attrs.has("tags_all"):
        return own  # a provider version before default_tags
    defaults = change.plan.provider_setting(change, "aws", "default_tags", 0, "tags")
    return _merge_defaults(defaults, own, unknown)


def _gcp_labels(change: PlannedChange, unknown: set[str]) -> dict[str, str]:
    attrs = change.attrs
    for key in ("terraform_labels", "effective_labels"):
        if attrs.has(key) and not attrs.hidden(key):
            return attrs.mapping(key, unknown)
    own = attrs.mapping("labels", unknown)
    if not attrs.has("terraform_labels"):
        return own
    defaults = change.plan.provider_setting(change, "google", "default_labels")
    return _merge_defaults(defaults, own, unknown)


def _provider_region(change: PlannedChange, provider: str) -> str | None:
    value = change.plan.provider_setting(change, provider, "region")
    return value if isinstance(value, str) else None


def _aws_region(change: PlannedChange) -> str | None:
    region = change.attrs.text("region")
    if region:
        return region
    zone = change.attrs.text("availability_zone") or ""
    found = re.match(r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d+", zone)
    return found.group(0) if found else _provider_region(change, "aws")


def _gcp_region(change: PlannedChange) -> str | None:
    for key in ("region", "zone", "location"):
        value = change.attrs.text(key)
        if value:
            found = re.match(r"[a-z]+-[a-z]+\d+", value.rsplit("/", 1)[-1])
            return found.group(0) if found else value
    return _provider_region(change, "google")


# --------------------------------------------------------------------------------------------
# AWS
# --------------------------------------------------------------------------------------------


def _market_is_spot(attrs: Attrs) -> bool | None:
    """From `instance_market_options`: True spot, False not, None not known yet."""
    if attrs.hidden("instance_market_options"):
        return False if attrs.left_to_provider("instance_market_options") else None
    options = attrs.first("instance_market_options")
    if options is None:
        return False
    if options.hidden("market_type"):
        return None
    return (options.text("market_type") or "").lower() == "spot"


def _referenced(change: PlannedChange, target_type: str, *path: str | int) -> PlannedChange | None:
    """The change of `target_type` the expression at `path` refers to, in the same module."""
    for reference in change.attrs.references(*path):
        parts = reference.split(".")
        if len(parts) >= 2 and parts[0] == target_type:
            address = f"{change.module_prefix}{target_type}.{parts[1].split('[', 1)[0]}"
            found = change.plan.find(address, index_hint=_index_suffix(change.address))
            if found is not None:
                return found
    return None


def _launch_template(change: PlannedChange, *path: str | int) -> PlannedChange | None:
    """The aws_launch_template that the block at `path` names, when it is in the plan."""
    spec = change.attrs.child(*path)
    if not isinstance(spec.value, dict) and not spec.is_unknown():
        return None
    for key in ("id", "launch_template_id", "name", "launch_template_name"):
        found = _referenced(change, "aws_launch_template", *path, key)
        if found is not None:
            return found
    for key in ("name", "launch_template_name", "id", "launch_template_id"):
        value = spec.text(key)
        attribute = "name" if "name" in key else "id"
        if value:
            found = change.plan.find_by_attribute("aws_launch_template", attribute, value)
            if found is not None:
                return found
    return None


def _ebs_encryption(block: Attrs) -> tuple[bool | None, bool | None, set[str]]:
    """(encrypted, customer_key, unknown paths) of an EBS volume or block device."""
    encrypted = block.flag("encrypted")  # launch templates hold "true"/"false" strings
    if encrypted is None:
        return None, None, set(_ENCRYPTION_UNKNOWN)  # unset: account default encryption may apply
    if not encrypted:
        return False, False, set()
    unknown: set[str] = set()
    return True, _mark_key(block.is_set("kms_key_id"), unknown), unknown


def _ebs_volume(change: PlannedChange, parent: Resource, block_path: str, block: Attrs) -> Resource:
    encrypted, customer_key, unknown = _ebs_encryption(block)
    own_tags = block.mapping("tags_all", set()) or block.mapping("tags", set())
    extra_tags = {**change.attrs.mapping("volume_tags", set()), **own_tags}
    return _volume(
        change,
        parent,
        block_path,
        block,
        encrypted=encrypted,
        customer_key=customer_key,
        unknown=unknown,
        extra_tags=extra_tags,
    )


def _block_device_volumes(change: PlannedChange, parent: Resource, *, root: bool) -> list[Resource]:
    """VOLUMEs for `root_block_device` / `ebs_block_device`; `root` adds the implicit root disk."""
    attrs = change.attrs
    volumes: list[Resource] = []
    roots = attrs.blocks("root_block_device")
    if root and not roots:
        volumes.append(
            _volume(
                change,
                parent,
                "root_block_device[0]",
                attrs.child("root_block_device", 0),
                encrypted=None,
                customer_key=None,
                unknown=_ENCRYPTION_UNKNOWN,
            )
        )
    for name in ("root_block_device", "ebs_block_device"):
        for position, block in enumerate(attrs.blocks(name)):
            volumes.append(_ebs_volume(change, parent, f"{name}[{position}]", block))
    return volumes


@normalizer("aws_instance", "aws_spot_instance_request")
def _aws_instance(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    template = _launch_template(change, "launch_template", 0)
    instance_type = _instance_type(attrs, unknown, "instance_type")
    if template is not None and attrs.left_to_provider("instance_type"):
        unknown.difference_update(_TYPE_UNKNOWN)
        instance_type = _instance_type(template.attrs, unknown, "instance_type")
    if change.type == "aws_spot_instance_request":
        capacity = Capacity.SPOT
    elif template is not None and attrs.configured("instance_market_options") is False:
        capacity = _spot_capacity(_market_is_spot(template.attrs), unknown)
    else:
        capacity = _spot_capacity(_market_is_spot(attrs), unknown)
    instance = _resource(
        change,
        Category.INSTANCE,
        "aws",
        unknown,
        instance_type=instance_type,
        capacity=capacity,
        tags=_aws_tags(change, unknown),
        region=_aws_region(change),
    )
    return [instance, *_block_device_volumes(change, instance, root=True)]


def _instance_tag_specifications(attrs: Attrs, unknown: set[str]) -> dict[str, str]:
    """Tags a launch template gives the instances it launches."""
    tags: dict[str, str] = {}
    for spec in attrs.blocks("tag_specifications"):
        if spec.text("resource_type") in (None, "instance"):
            tags.update(spec.mapping("tags", unknown))
    return tags


@normalizer("aws_launch_template")
def _aws_launch_template(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    tags = {**_aws_tags(change, unknown), **_instance_tag_specifications(attrs, unknown)}
    template = _resource(
        change,
        Category.LAUNCH_TEMPLATE,
        "aws",
        unknown,
        instance_type=_instance_type(attrs, unknown, "instance_type"),
        capacity=_spot_capacity(_market_is_spot(attrs), unknown),
        tags=tags,
        region=_aws_region(change),
    )
    volumes = []
    for position, mapping in enumerate(attrs.blocks("block_device_mappings")):
        ebs = mapping.first("ebs")
        if ebs is not None:
            path = f"block_device_mappings[{position}]"
            volumes.append(_ebs_volume(change, template, path, ebs))
    return [template, *volumes]


def _spot_price_is_spot(attrs: Attrs) -> bool | None:
    if attrs.hidden("spot_price"):
        return False if attrs.left_to_provider("spot_price") else None
    return attrs.text("spot_price") is not None


@normalizer("aws_launch_configuration")
def _aws_launch_configuration(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    configuration = _resource(
        change,
        Category.LAUNCH_TEMPLATE,
        "aws",
        unknown,
        instance_type=_instance_type(attrs, unknown, "instance_type"),
        capacity=_spot_capacity(_spot_price_is_spot(attrs), unknown),
        region=_aws_region(change),
    )
    return [configuration, *_block_device_volumes(change, configuration, root=False)]


def _asg_tags(attrs: Attrs, unknown: set[str]) -> dict[str, str]:
    """Propagated tags from both shapes: `tag` blocks and the older `tags` list of maps
    (`propagate_at_launch` a bool or a "true"/"false" string); `gpuwarden*` control tags always."""
    tags: dict[str, str] = {}
    for shape in ("tag", "tags"):
        if attrs.hidden(shape) and not attrs.left_to_provider(shape):
            unknown.add("tags")
        for entry in attrs.blocks(shape):
            key = entry.text("key")
            if key is None:
                continue
            control_tag = key.lower().startswith("gpuwarden")
            if entry.flag("propagate_at_launch") is False and not control_tag:
                continue
            if entry.hidden("value"):
                unknown.add(f"tags.{key}")
                tags[key] = KNOWN_AFTER_APPLY
            else:
                tags[key] = _tag_text(entry.get("value") or "")
    return tags


def _asg_distribution_is_spot(policy: Attrs) -> bool | None:
    """All spot when no on-demand base and 0% on-demand above it (AWS defaults: 0 and 100)."""
    if policy.hidden("instances_distribution"):
        return False if policy.left_to_provider("instances_distribution") else None
    distribution = policy.first("instances_distribution")
    if distribution is None:
        return False
    values = []
    for key, default in (
        ("on_demand_base_capacity", 0),
        ("on_demand_percentage_above_base_capacity", 100),
    ):
        if distribution.hidden(key) and not distribution.left_to_provider(key):
            return None
        found = distribution.number(key)
        values.append(default if found is None else found)
    return values == [0, 0]


def _asg_launch_source(change: PlannedChange) -> PlannedChange | None:
    """The launch template or configuration in the plan that the group launches from."""
    policy = ("mixed_instances_policy", 0, "launch_template", 0, "launch_template_specification", 0)
    for path in (policy, ("launch_template", 0)):
        template = _launch_template(change, *path)
        if template is not None:
            return template
    found = _referenced(change, "aws_launch_configuration", "launch_configuration")
    name = change.attrs.text("launch_configuration")
    if found is None and name:
        found = change.plan.find_by_attribute("aws_launch_configuration", "name", name)
    return found


def _asg_type_and_capacity(
    change: PlannedChange, source: PlannedChange | None, unknown: set[str]
) -> tuple[str | None, Capacity]:
    attrs, policy_key = change.attrs, "mixed_instances_policy"
    if attrs.hidden(policy_key) and not attrs.left_to_provider(policy_key):
        unknown.update(_TYPE_UNKNOWN | {"capacity"})
        return None, Capacity.UNKNOWN
    policy = attrs.first("mixed_instances_policy")
    if policy is not None:
        template = policy.first("launch_template")
        overrides = template.blocks("override") if template else []
        typed = [o for o in overrides if o.text("instance_type") or o.hidden("instance_type")]
        if typed:
            instance_type = _instance_type(typed[0], unknown, "instance_type")
        elif source is not None:
            instance_type = _instance_type(source.attrs, unknown, "instance_type")
        else:
            instance_type = None
            unknown.update(_TYPE_UNKNOWN)
        return instance_type, _spot_capacity(_asg_distribution_is_spot(policy), unknown)
    if source is None:
        unknown.update(_TYPE_UNKNOWN | {"capacity"})
        return None, Capacity.UNKNOWN
    instance_type = _instance_type(source.attrs, unknown, "instance_type")
    if source.type == "aws_launch_configuration":
        return instance_type, _spot_capacity(_spot_price_is_spot(source.attrs), unknown)
    return instance_type, _spot_capacity(_market_is_spot(source.attrs), unknown)


@normalizer("aws_autoscaling_group")
def _aws_autoscaling_group(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    source = _asg_launch_source(change)
    instance_type, capacity = _asg_type_and_capacity(change, source, unknown)
    tags = _asg_tags(attrs, unknown)
    if source is not None and source.type == "aws_launch_template":
        tags = {**_instance_tag_specifications(source.attrs, set()), **tags}
    return [
        _resource(
            change,
            Category.AUTOSCALING_GROUP,
            "aws",
            unknown,
            instance_type=instance_type,
            capacity=capacity,
            tags=tags,
            count=_count(attrs, unknown, ("desired_capacity",), ("min_size",)),
            region=_aws_region(change),
        )
    ]


_EKS_DEFAULT_INSTANCE_TYPE = "t3.medium"  # what EKS launches when neither types nor template say


def _eks_instance_type(change: PlannedChange, unknown: set[str]) -> str | None:
    attrs = change.attrs
    if attrs.hidden("instance_types") and not attrs.left_to_provider("instance_types"):
        unknown.update(_TYPE_UNKNOWN)
        return None
    if attrs.get("instance_types"):
        return _instance_type(attrs, unknown, "instance_types", 0)
    template = _launch_template(change, "launch_template", 0)
    if template is not None:
        return _instance_type(template.attrs, unknown, "instance_type")
    if attrs.first("launch_template") is not None or attrs.is_unknown("launch_template"):
        unknown.update(_TYPE_UNKNOWN)  # a template outside the plan decides
        return None
    return _EKS_DEFAULT_INSTANCE_TYPE


@normalizer("aws_eks_node_group")
def _aws_eks_node_group(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    if attrs.hidden("capacity_type"):
        spot = False if attrs.left_to_provider("capacity_type") else None
    else:
        spot = (attrs.text("capacity_type") or "ON_DEMAND").upper() == "SPOT"
    labels = attrs.mapping("labels", unknown)
    return [
        _resource(
            change,
            Category.NODE_GROUP,
            "aws",
            unknown,
            instance_type=_eks_instance_type(change, unknown),
            capacity=_spot_capacity(spot, unknown),
            tags={**labels, **_aws_tags(change, unknown)},
            count=_count(
                attrs,
                unknown,
                ("scaling_config", 0, "desired_size"),
                ("scaling_config", 0, "min_size"),
            ),
            cluster=attrs.text("cluster_name"),
            region=_aws_region(change),
        )
    ]


@normalizer("aws_ebs_volume")
def _aws_ebs_volume(change: PlannedChange) -> list[Resource]:
    encrypted, customer_key, unknown = _ebs_encryption(change.attrs)
    return [
        _resource(
            change,
            Category.VOLUME,
            "aws",
            unknown,
            encrypted=encrypted,
            customer_key=customer_key,
            tags=_aws_tags(change, unknown),
            region=_aws_region(change),
        )
    ]


def _sse_customer_key(configuration: Attrs | None) -> bool | None:
    """Customer managed key of a server_side_encryption_configuration (its first rule)."""
    rule = configuration.first("rule") if configuration else None
    default = rule.first("apply_server_side_encryption_by_default") if rule else None
    if default is None:
        return False
    if default.hidden("sse_algorithm"):
        return None
    if not (default.text("sse_algorithm") or "").lower().startswith("aws:kms"):
        return False
    return default.is_set("kms_master_key_id")


def _bucket_encryption_index(plan: PlanIndex) -> dict[str, PlannedChange]:
    """Planned aws_s3_bucket_server_side_encryption_configuration by the bucket it applies to:
    keyed by the bucket's address (without index) when `bucket` refers to one, and by name."""
    index: dict[str, PlannedChange] = {}
    for candidate in plan.of_type("aws_s3_bucket_server_side_encryption_configuration"):
        for reference in candidate.attrs.references("bucket"):
            parts = reference.split(".")
            if len(parts) >= 2 and parts[0] == "aws_s3_bucket":
                bucket = parts[1].split("[", 1)[0]
                index.setdefault(f"{candidate.module_prefix}aws_s3_bucket.{bucket}", candidate)
        name = candidate.attrs.text("bucket")
        if name:
            index.setdefault(f"name:{name}", candidate)
    return index


def _bucket_encryption(change: PlannedChange) -> PlannedChange | None:
    index = change.plan.memo("s3-encryption", lambda: _bucket_encryption_index(change.plan))
    found = index.get(_without_index(change.address))
    name = change.attrs.text("bucket")
    return found if found is not None or not name else index.get(f"name:{name}")


@normalizer("aws_s3_bucket")
def _aws_s3_bucket(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    separate = _bucket_encryption(change)
    inline = "server_side_encryption_configuration"
    if separate is not None:
        customer_key = _sse_customer_key(separate.attrs)
    elif attrs.hidden(inline) and not attrs.left_to_provider(inline):
        customer_key = None
    else:
        customer_key = _sse_customer_key(attrs.first(inline))
    return [
        _resource(
            change,
            Category.BUCKET,
            "aws",
            unknown,
            encrypted=True,  # S3 encrypts every new object with SSE-S3 at least (since 2023-01)
            customer_key=_mark_key(customer_key, unknown),
            tags=_aws_tags(change, unknown),
            region=_aws_region(change),
        )
    ]


@normalizer("aws_sagemaker_notebook_instance")
def _aws_sagemaker_notebook(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    return [
        _resource(
            change,
            Category.NOTEBOOK,
            "aws",
            unknown,
            instance_type=_instance_type(attrs, unknown, "instance_type"),
            capacity=Capacity.ON_DEMAND,  # notebook instances have no spot option
            encrypted=True,
            customer_key=_mark_key(attrs.is_set("kms_key_id"), unknown),
            tags=_aws_tags(change, unknown),
            region=_aws_region(change),
        )
    ]


@normalizer("aws_sagemaker_training_job")
def _aws_sagemaker_training_job(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    config = attrs.first("resource_config") or attrs.child("resource_config", 0)
    spot = _flag_or_default(attrs, "enable_managed_spot_training", False)
    return [
        _resource(
            change,
            Category.TRAINING_JOB,
            "aws",
            unknown,
            instance_type=_instance_type(config, unknown, "instance_type"),
            count=_count(config, unknown, ("instance_count",)),
            capacity=_spot_capacity(spot, unknown),
            encrypted=True,
            customer_key=_mark_key(config.is_set("volume_kms_key_id"), unknown),
            checkpoint_uri=_checkpoint_uri(attrs, unknown),
            tags=_aws_tags(change, unknown),
            region=_aws_region(change),
        )
    ]


def _checkpoint_uri(attrs: Attrs, unknown: set[str]) -> str | None:
    """`checkpoint_config.s3_uri`; unknown while the block or the URI is computed."""
    if attrs.hidden("checkpoint_config"):
        unknown.add("checkpoint_uri")
        return None
    block = attrs.first("checkpoint_config")
    if block is None:
        return None
    if block.hidden("s3_uri"):
        unknown.add("checkpoint_uri")
        return None
    return block.text("s3_uri")


@normalizer("aws_sagemaker_pipeline")
def _aws_sagemaker_pipeline(change: PlannedChange) -> list[Resource]:
    """One TRAINING_JOB per `Training` step of an inline `pipeline_definition` (JSON).

    Step arguments are the CreateTrainingJob request; a `{"Get": "Parameters.X"}` value reads
    the pipeline parameter's `DefaultValue` (what runs unless a start overrides it); any other
    expression is unknown. A definition kept in S3 (`pipeline_definition_s3_location`) or
    computed is not known: such a pipeline gives no resources.
    """
    attrs = change.attrs
    definition = _pipeline_definition(attrs.get("pipeline_definition"))
    if definition is None:
        return []
    defaults = _pipeline_defaults(definition)
    shared: set[str] = set()
    tags = _aws_tags(change, shared)
    found: list[Resource] = []
    steps = definition.get("Steps")
    for position, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict) or step.get("Type") != "Training":
            continue
        arguments = step.get("Arguments")
        if isinstance(arguments, dict):
            found.append(_pipeline_training_step(change, position, step, arguments, defaults,
                                                 tags, shared))
    return found


def _pipeline_definition(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        definition = tidy_document(json.loads(value), "pipeline_definition", len(value))
    except (ValueError, RecursionError, InputError):
        return None  # unreadable, too long a number, or too deep: as if there were none
    return definition if isinstance(definition, dict) else None


def _pipeline_defaults(definition: dict[str, Any]) -> dict[str, Any]:
    parameters = definition.get("Parameters")
    return {
        str(p["Name"]): p.get("DefaultValue")
        for p in (parameters if isinstance(parameters, list) else [])
        if isinstance(p, dict) and isinstance(p.get("Name"), str) and "DefaultValue" in p
    }


_UNRESOLVED = object()


def _step_value(value: Any, defaults: Mapping[str, Any]) -> Any:
    """A literal argument value, a parameter's default, or `_UNRESOLVED` for an expression."""
    if isinstance(value, dict):
        reference = value.get("Get")
        if len(value) == 1 and isinstance(reference, str) and reference.startswith("Parameters."):
            name = reference.removeprefix("Parameters.")
            return defaults.get(name, _UNRESOLVED) if name in defaults else _UNRESOLVED
        return _UNRESOLVED
    return value


def _pipeline_training_step(
    change: PlannedChange,
    position: int,
    step: dict[str, Any],
    arguments: dict[str, Any],
    defaults: Mapping[str, Any],
    tags: dict[str, str],
    shared: set[str],
) -> Resource:
    unknown = set(shared)
    found_config = arguments.get("ResourceConfig")
    config: dict[str, Any] = found_config if isinstance(found_config, dict) else {}
    instance_type = _step_value(config.get("InstanceType"), defaults)
    if instance_type is _UNRESOLVED or (instance_type is not None
                                        and not isinstance(instance_type, str)):
        unknown.update(_TYPE_UNKNOWN)
        instance_type = None
    count = _step_value(config.get("InstanceCount", 1), defaults)
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        unknown.add("count")
        count = 1
    spot = _step_value(arguments.get("EnableManagedSpotTraining", False), defaults)
    capacity = _spot_capacity(spot if isinstance(spot, bool) else None, unknown)
    checkpoint = arguments.get("CheckpointConfig")
    uri = _step_value(checkpoint.get("S3Uri"), defaults) if isinstance(checkpoint, dict) else None
    if uri is _UNRESOLVED:
        unknown.add("checkpoint_uri")
    step_tags = arguments.get("Tags")
    own_tags = {str(t["Key"]): _tag_text(t.get("Value", "")) for t in
                (step_tags if isinstance(step_tags, list) else [])
                if isinstance(t, dict) and "Key" in t}
    name = step.get("Name") if isinstance(step.get("Name"), str) else str(position)
    return _resource(
        change,
        Category.TRAINING_JOB,
        "aws",
        unknown,
        kind=f"{change.type}.training_step",
        id=f"{change.address}.steps[{json.dumps(name)}]",
        instance_type=instance_type,
        count=count,
        capacity=capacity,
        encrypted=True,
        customer_key=bool(config.get("VolumeKmsKeyId")),
        checkpoint_uri=uri if isinstance(uri, str) and uri else None,
        tags={**tags, **own_tags},
        region=_aws_region(change),
        raw={"pipeline": change.address, "step": step},
    )


@normalizer("aws_sagemaker_endpoint_configuration")
def _aws_sagemaker_endpoint_configuration(change: PlannedChange) -> list[Resource]:
    """One ENDPOINT per instance-backed (not serverless) production or shadow variant."""
    attrs, shared = change.attrs, set[str]()
    tags = _aws_tags(change, shared)
    customer_key = _mark_key(attrs.is_set("kms_key_arn"), shared)
    resources: list[Resource] = []
    for block in ("production_variants", "shadow_production_variants"):
        for position, variant in enumerate(attrs.blocks(block)):
            if not variant.text("instance_type") and not variant.hidden("instance_type"):
                continue  # serverless
            unknown = set(shared)
            resources.append(
                _resource(
                    change,
                    Category.ENDPOINT,
                    "aws",
                    unknown,
                    kind=f"{change.type}.{block}",
                    id=f"{change.address}.{block}[{position}]",
                    instance_type=_instance_type(variant, unknown, "instance_type"),
                    count=_count(variant, unknown, ("initial_instance_count",)),
                    capacity=Capacity.ON_DEMAND,  # endpoints have no spot option
                    encrypted=True,
                    customer_key=customer_key,
                    tags=tags,
                    region=_aws_region(change),
                    raw={**change.raw, block: [variant.value]},
                )
            )
    return resources


# --------------------------------------------------------------------------------------------
# Google Cloud
# --------------------------------------------------------------------------------------------


def _attached_gpus(
    attrs: Attrs, machine_type: str | None, unknown: set[str], catalog: Catalog
) -> tuple[GpuSpec | None, float | None]:
    """GPU spec and hourly price of attached `guest_accelerator`s; machine types with GPUs built
    in (a2, a3, g2) are left to the catalog."""
    if catalog.instance(machine_type) is not None:
        return None, None
    if attrs.hidden("guest_accelerator"):
        if not attrs.left_to_provider("guest_accelerator"):
            unknown.update(_GPU_UNKNOWN)
        return None, None
    total, price = 0, 0.0
    model: str | None = None
    memory: float | None = None
    priced = True
    for accelerator in attrs.blocks("guest_accelerator"):
        count = accelerator.number("count")
        if count is None or accelerator.hidden("type"):
            unknown.update(_GPU_UNKNOWN)
            continue
        if count == 0:
            continue
        total += count
        known = catalog.accelerator(accelerator.text("type"))
        if known is None or known.usd_hr_per_gpu is None:
            priced = False
        else:
            price += known.usd_hr_per_gpu * count
        if known is not None and model is None:
            model, memory = known.gpu_model, known.gpu_memory_gib
    if total == 0:
        return None, None
    return GpuSpec(model=model, count=float(total), memory_gib=memory), price if priced else None


def _scheduling_is_spot(attrs: Attrs) -> bool | None:
    if attrs.hidden("scheduling"):
        return False if attrs.left_to_provider("scheduling") else None
    scheduling = attrs.first("scheduling")
    if scheduling is None:
        return False
    model = (scheduling.text("provisioning_model") or "").upper()
    if model == "SPOT" or scheduling.flag("preemptible"):
        return True
    for key in ("provisioning_model", "preemptible"):
        if scheduling.hidden(key) and not scheduling.left_to_provider(key):
            return None
    return False


def _gcp_machine(
    change: PlannedChange, attrs: Attrs, unknown: set[str], category: Category, **fields: Any
) -> Resource:
    machine_type = _instance_type(attrs, unknown, "machine_type")
    gpu, price = _attached_gpus(attrs, machine_type, unknown, change.catalog)
    return _resource(
        change,
        category,
        "gcp",
        unknown,
        instance_type=machine_type,
        gpu=gpu,
        hourly_usd=price,
        **fields,
    )


def _platform_encrypted_disk(
    change: PlannedChange, parent: Resource, block_path: str, disk: Attrs, *key_paths: Path_
) -> Resource:
    """A GCE or Azure managed disk: always encrypted; customer key if one is referenced."""
    unknown: set[str] = set()
    customer_key = _mark_key(_any_key(disk, *key_paths), unknown)
    return _volume(
        change, parent, block_path, disk, encrypted=True, customer_key=customer_key, unknown=unknown
    )


_GCE_DISK_KEYS: tuple[Path_, ...] = (("kms_key_self_link",), ("disk_encryption_key_raw",))
_GCP_KEY_BLOCK: tuple[Path_, ...] = (
    ("disk_encryption_key", 0, "kms_key_self_link"),
    ("disk_encryption_key", 0, "raw_key"),
    ("disk_encryption_key", 0, "rsa_encrypted_key"),
)


@normalizer("google_compute_instance")
def _google_compute_instance(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    instance = _gcp_machine(
        change,
        attrs,
        unknown,
        Category.INSTANCE,
        capacity=_spot_capacity(_scheduling_is_spot(attrs), unknown),
        tags=_gcp_labels(change, unknown),
        region=_gcp_region(change),
    )
    boot = attrs.first("boot_disk") or attrs.child("boot_disk", 0)
    volumes = [_platform_encrypted_disk(change, instance, "boot_disk[0]", boot, *_GCE_DISK_KEYS)]
    for position, disk in enumerate(attrs.blocks("attached_disk")):
        path = f"attached_disk[{position}]"
        volumes.append(_platform_encrypted_disk(change, instance, path, disk, *_GCE_DISK_KEYS))
    return [instance, *volumes]


@normalizer("google_compute_instance_template", "google_compute_region_instance_template")
def _google_compute_instance_template(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    template = _gcp_machine(
        change,
        attrs,
        unknown,
        Category.LAUNCH_TEMPLATE,
        capacity=_spot_capacity(_scheduling_is_spot(attrs), unknown),
        tags=_gcp_labels(change, unknown),
        region=_gcp_region(change),
    )
    volumes = [
        _platform_encrypted_disk(change, template, f"disk[{position}]", disk, *_GCP_KEY_BLOCK)
        for position, disk in enumerate(attrs.blocks("disk"))
    ]
    return [template, *volumes]


@normalizer("google_compute_disk", "google_compute_region_disk")
def _google_compute_disk(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    return [
        _resource(
            change,
            Category.VOLUME,
            "gcp",
            unknown,
            encrypted=True,
            customer_key=_mark_key(_any_key(attrs, *_GCP_KEY_BLOCK), unknown),
            tags=_gcp_labels(change, unknown),
            region=_gcp_region(change),
        )
    ]


def _gke_node_is_spot(node: Attrs) -> bool | None:
    if node.flag("spot") or node.flag("preemptible"):
        return True
    for key in ("spot", "preemptible"):
        if node.hidden(key) and not node.left_to_provider(key):
            return None
    return False


def _gke_node_count(attrs: Attrs, unknown: set[str]) -> int:
    """Nodes of the pool: node_count per zone times node_locations, else the autoscaling minimum."""
    autoscaling = attrs.child("autoscaling", 0)
    total_minimum = autoscaling.number("total_min_node_count")
    if attrs.number("node_count") is None and total_minimum is not None:
        return total_minimum
    per_zone = _count(
        attrs,
        unknown,
        ("node_count",),
        ("autoscaling", 0, "min_node_count"),
        ("initial_node_count",),
    )
    zones = attrs.get("node_locations")
    return per_zone * len(zones) if isinstance(zones, list) and zones else per_zone


_GKE_DEFAULT_MACHINE_TYPE = "e2-medium"


@normalizer("google_container_node_pool")
def _google_container_node_pool(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    common = {
        "count": _gke_node_count(attrs, unknown),
        "cluster": attrs.text("cluster"),
        "region": _gcp_region(change),
    }
    node = attrs.first("node_config")
    if node is None and (attrs.left_to_provider("node_config") or not attrs.hidden("node_config")):
        return [  # GKE's default node: e2-medium, no GPU, standard provisioning
            _resource(
                change,
                Category.NODE_GROUP,
                "gcp",
                unknown,
                instance_type=_GKE_DEFAULT_MACHINE_TYPE,
                capacity=Capacity.ON_DEMAND,
                **common,
            )
        ]
    node = node or attrs.child("node_config", 0)
    labels = {**node.mapping("labels", unknown), **node.mapping("resource_labels", unknown)}
    return [
        _gcp_machine(
            change,
            node,
            unknown,
            Category.NODE_GROUP,
            capacity=_spot_capacity(_gke_node_is_spot(node), unknown),
            tags=labels,
            **common,
        )
    ]


# --------------------------------------------------------------------------------------------
# Azure
# --------------------------------------------------------------------------------------------

_AZURE_DISK_KEYS: tuple[Path_, ...] = (
    ("disk_encryption_set_id",),
    ("secure_vm_disk_encryption_set_id",),
)


def _priority_is_spot(attrs: Attrs) -> bool | None:
    if attrs.hidden("priority"):
        return False if attrs.left_to_provider("priority") else None
    return (attrs.text("priority") or "Regular").lower() == "spot"


def _azure_machine(
    change: PlannedChange, category: Category, size_key: str, unknown: set[str], **fields: Any
) -> Resource:
    attrs = change.attrs
    return _resource(
        change,
        category,
        "azure",
        unknown,
        instance_type=_instance_type(attrs, unknown, size_key),
        tags=attrs.mapping("tags", unknown),
        region=attrs.text("location"),
        **fields,
    )


@normalizer("azurerm_linux_virtual_machine", "azurerm_windows_virtual_machine")
def _azurerm_virtual_machine(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    capacity = _spot_capacity(_priority_is_spot(attrs), unknown)
    vm = _azure_machine(change, Category.INSTANCE, "size", unknown, capacity=capacity)
    disk = attrs.first("os_disk") or attrs.child("os_disk", 0)
    return [vm, _platform_encrypted_disk(change, vm, "os_disk[0]", disk, *_AZURE_DISK_KEYS)]


@normalizer("azurerm_linux_virtual_machine_scale_set", "azurerm_windows_virtual_machine_scale_set")
def _azurerm_scale_set(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    scale_set = _azure_machine(
        change,
        Category.AUTOSCALING_GROUP,
        "sku",
        unknown,
        capacity=_spot_capacity(_priority_is_spot(attrs), unknown),
        count=_count(attrs, unknown, ("instances",)),
    )
    disk = attrs.first("os_disk") or attrs.child("os_disk", 0)
    return [
        scale_set,
        _platform_encrypted_disk(change, scale_set, "os_disk[0]", disk, *_AZURE_DISK_KEYS),
    ]


@normalizer("azurerm_virtual_machine")
def _azurerm_legacy_virtual_machine(change: PlannedChange) -> list[Resource]:
    """The legacy VM resource: no spot option; its managed disks are platform-encrypted."""
    attrs, unknown = change.attrs, set[str]()
    vm = _azure_machine(change, Category.INSTANCE, "vm_size", unknown, capacity=Capacity.ON_DEMAND)
    os_disk = attrs.first("storage_os_disk") or attrs.child("storage_os_disk", 0)
    disks = [("storage_os_disk[0]", os_disk)]
    disks += [
        (f"storage_data_disk[{i}]", d) for i, d in enumerate(attrs.blocks("storage_data_disk"))
    ]
    return [vm, *(_platform_encrypted_disk(change, vm, path, disk) for path, disk in disks)]


@normalizer("azurerm_managed_disk")
def _azurerm_managed_disk(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    return [
        _resource(
            change,
            Category.VOLUME,
            "azure",
            unknown,
            encrypted=True,
            customer_key=_mark_key(_any_key(attrs, *_AZURE_DISK_KEYS), unknown),
            tags=attrs.mapping("tags", unknown),
            region=attrs.text("location"),
        )
    ]


@normalizer("azurerm_kubernetes_cluster_node_pool")
def _azurerm_kubernetes_node_pool(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    autoscaled = attrs.flag("auto_scaling_enabled") or attrs.flag("enable_auto_scaling")
    counts: tuple[Path_, ...] = (("node_count",), ("min_count",))
    labels = attrs.mapping("node_labels", unknown)
    return [
        _resource(
            change,
            Category.NODE_GROUP,
            "azure",
            unknown,
            instance_type=_instance_type(attrs, unknown, "vm_size"),
            capacity=_spot_capacity(_priority_is_spot(attrs), unknown),
            count=_count(attrs, unknown, *(counts[::-1] if autoscaled else counts)),
            tags={**labels, **attrs.mapping("tags", unknown)},
            cluster=attrs.text("kubernetes_cluster_id"),
        )
    ]


SUPPORTED_TYPES: frozenset[str] = frozenset(_NORMALIZERS)
