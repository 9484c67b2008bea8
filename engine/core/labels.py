"""Tag and label conventions shared by every door: production, exemptions, key matching.

This module is the one definition of production, for policies (`production: false` scopes,
the planner) and for enforcement (the executors re-read tags just before acting). It fails safe:

- keys and values are compared after Unicode NFKC normalization, dropping invisible
  (control/format) characters, trimming and case-folding; in keys `-` and `_` are equal;
- an environment key is `env`, `environment`, `stage` or `tier`, alone or as the last part of a
  prefixed key (`team:env`, `example.com/environment`);
- a value is production when it, or one of its words (split on anything but letters and
  digits), starts with `prod` or `prd` (`prod`, `Production`, `prod-eu`, `eu-prd`), unless that
  word follows `non`, `not` or `pre` (`non-prod`, `pre-prod`); `nonprod`/`preprod` are one word
  and do not start with `prod`;
- several environment tags that disagree (one production, another not) make it production;
- on Kubernetes, GCP and Azure the resource's own environment tags decide; only when it has
  none do its namespace's (project's, subscription's) labels.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from engine.core.model import Resource
from engine.core.tristate import Tri

PRODUCTION_KEYS = frozenset({"env", "environment", "stage", "tier"})
PRODUCTION_PREFIXES = ("prod", "prd")
NEGATING_WORDS = frozenset({"non", "not", "pre"})
EXEMPT_KEYS = ("gpuwarden.io/exempt", "gpuwarden-exempt")
_EXEMPT_SEPARATORS = re.compile(r"[\s,_]+")
_KEY_PREFIX = re.compile(r"^.*[/:]")
_WORDS = re.compile(r"[\W_]+")
_ASCII_CONTROL = dict.fromkeys([*range(0x20), 0x7F])
_SHOWN_CHARS = 40


def canonical(text: object) -> str:
    """The text as compared: NFKC, invisible characters dropped, trimmed, case-folded."""
    value = str(text)
    if value.isascii():
        return value.translate(_ASCII_CONTROL).strip().casefold()
    value = unicodedata.normalize("NFKC", value)
    value = "".join(ch for ch in value if not unicodedata.category(ch).startswith("C"))
    return value.strip().casefold()


@lru_cache(maxsize=4096)  # the same few keys on every resource; bounded for hostile ones
def normalize_key(key: str) -> str:
    """Tag keys match case-insensitively (trimmed, Unicode-normalized) with `-` and `_` equal."""
    return canonical(key).replace("_", "-")


_EXEMPT_KEYS = frozenset(normalize_key(key) for key in EXEMPT_KEYS)


@lru_cache(maxsize=4096)
def is_environment_key(key: str) -> bool:
    return _KEY_PREFIX.sub("", normalize_key(key)).strip("-.") in PRODUCTION_KEYS


def is_production_value(value: object) -> bool:
    return _is_production_text(str(value))


@lru_cache(maxsize=4096)  # a few environment names across an estate; bounded for hostile ones
def _is_production_text(text: str) -> bool:
    words = [word for word in _WORDS.split(canonical(text)) if word]
    return any(word.startswith(PRODUCTION_PREFIXES)
               and (index == 0 or words[index - 1] not in NEGATING_WORDS)
               for index, word in enumerate(words))


@dataclass(frozen=True, slots=True)
class Environment:
    """Whether tags make a resource production, and the words to say why."""

    production: bool
    reason: str


def _shown(key: str, value: object) -> str:
    """`key='value'`, bounded and with invisible characters escaped (tags are user input)."""
    return f"{key[:_SHOWN_CHARS]!r}={str(value)[:_SHOWN_CHARS]!r}"


def environment_of(labels: Mapping[str, object]) -> Environment | None:
    """The verdict of the environment tags among `labels`; None when there are none."""
    found = _environment_labels(labels)
    if not found:
        return None
    production = [(key, value) for key, value in found if is_production_value(value)]
    if not production:
        return Environment(False, f"not production ({_shown(*found[0])})")
    others = [(key, value) for key, value in found if not is_production_value(value)]
    if others:
        return Environment(True, "treated as production: its environment tags disagree "
                           f"({_shown(*production[0])}, {_shown(*others[0])})")
    return Environment(True, f"production ({_shown(*production[0])})")


def environment(tags: Mapping[str, object],
                fallback: Mapping[str, object] | None = None) -> Environment:
    """Own tags decide; a namespace's (project's, subscription's) labels only when they are
    silent."""
    verdict = environment_of(tags)
    if verdict is None and fallback:
        inherited = environment_of(fallback)
        if inherited is not None:
            verdict = Environment(inherited.production,
                                  f"{inherited.reason}, from its namespace/project labels")
    return verdict or Environment(False, "no environment tag")


def is_production(resource: Resource) -> Tri:
    """Production by the resource's own environment tags; else by its namespace's labels.
    Remembers nothing of the resource (a resource can change); only which keys are no
    environment key."""
    if "tags" in resource.unknown:
        return None
    answer = _production_by(resource.tags)
    if answer is None:
        return bool(resource.namespace_labels) and bool(_production_by(resource.namespace_labels))
    return answer


# Keys met that are no environment key: only a resource's other keys (one or two) are read
# as keys (bounded: `_remember_key`).
_NOT_ENVIRONMENT_KEYS: set[str] = set()
_MAX_KNOWN_KEYS = 4096  # in each set of keys known not to matter
_MAX_KEY_CHARS = 320  # cloud tag keys run to 128 characters, Kubernetes label keys to 317


def _remember_key(known: set[str], key: object) -> None:
    """Add a key met to a set of keys known not to matter, bounded in number and size (keys
    come from input)."""
    if type(key) is str and len(key) <= _MAX_KEY_CHARS and len(known) < _MAX_KNOWN_KEYS:
        known.add(key)


def _production_by(labels: Mapping[str, object]) -> bool | None:
    """`environment_of(labels).production` without the words that say why; None when no
    environment label is among them."""
    found: bool | None = None
    for key in labels:
        if key in _NOT_ENVIRONMENT_KEYS:
            continue
        if is_environment_key(str(key)):
            if is_production_value(labels[key]):
                return True
            found = False
        else:
            _remember_key(_NOT_ENVIRONMENT_KEYS, key)
    return found


def _environment_labels(labels: Mapping[str, object]) -> list[tuple[str, object]]:
    return [(str(key), value) for key, value in labels.items() if is_environment_key(str(key))]


def production_reason(resource: Resource) -> str:
    """Why the resource counts as production (or unknown), for a finding's remediation."""
    if "tags" in resource.unknown:
        return "its tags are not known yet"
    return environment(resource.tags, resource.namespace_labels).reason


# Keys met that are no exemption key: a resource whose keys are all among them is exempt from
# nothing, answered without reading its keys one by one (bounded: `_remember_key`).
_NOT_EXEMPT_KEYS: set[str] = set()
_MAX_NOT_EXEMPT_KEYS = _MAX_KNOWN_KEYS


def exempt_ids(*sources: Mapping[str, object]) -> frozenset[str]:
    """Policy ids (or `all`) listed by exemption tags, labels or annotations in `sources`."""
    ids: set[str] = set()
    for source in sources:
        if _NOT_EXEMPT_KEYS.issuperset(source):
            continue
        for key, value in source.items():
            if normalize_key(str(key)) in _EXEMPT_KEYS:
                if value:
                    ids.update(part for part in _EXEMPT_SEPARATORS.split(canonical(value))
                               if part)
            else:
                _remember_key(_NOT_EXEMPT_KEYS, key)
    return frozenset(ids)


def exempt_policies(resource: Resource) -> frozenset[str]:
    """Policy ids (or `all`) a resource is exempted from by tag, label or annotation."""
    tags, annotations = resource.tags, resource.annotations
    if _NOT_EXEMPT_KEYS.issuperset(tags) and _NOT_EXEMPT_KEYS.issuperset(annotations):
        return _NO_IDS  # what exempt_ids answers, asked of nearly every resource: at once
    return exempt_ids(tags, annotations)


_NO_IDS: frozenset[str] = frozenset()


def is_exempt(resource: Resource, policy_id: str) -> bool:
    if not resource.tags and not resource.annotations:
        return False
    ids = exempt_policies(resource)
    return policy_id in ids or "all" in ids


def protection(policy: str, tags: Mapping[str, object],
               fallback: Mapping[str, object] | None = None,
               annotations: Mapping[str, object] | None = None) -> str | None:
    """Why a resource whose current tags are `tags` must not be changed for `policy` now
    (production or exempt); None when it may be. Executors call it on tags read just before
    acting."""
    verdict = environment(tags, fallback)
    if verdict.production:
        return f"now {verdict.reason}: never changed (tags re-read before acting)"
    ids = exempt_ids(tags, annotations or {})
    if policy in ids or "all" in ids:
        return f"now exempt from {policy} by tag: not changed (tags re-read before acting)"
    return None


class RequiredTags:
    """Required tag keys, matched as `missing_tags` matches them. Remembers (bounded) the keys
    met that normalize to none of them: a resource whose keys are all such misses exactly the
    required keys it does not spell as required, and otherwise only its other keys are
    normalized."""

    def __init__(self, required: list[str]):
        self.required = list(required)
        self._normalized = frozenset(normalize_key(key) for key in required)
        self._unrelated: set[str] = set()

    def missing(self, tags: Mapping[str, str]) -> list[str]:
        """`missing_tags(tags, self.required)`."""
        unmatched = []
        for key in self.required:
            if not str(tags.get(key, "")).strip():
                unmatched.append(key)
        if not unmatched or self._unrelated.issuperset(tags):
            return unmatched
        present = self._present(tags)
        missing = []
        for key in unmatched:
            if normalize_key(key) not in present:
                missing.append(key)
        return missing

    def _present(self, tags: Mapping[str, str]) -> set[str]:
        """The required keys (normalized) that a tag with a value matches."""
        present = set()
        for key, value in tags.items():
            if key in self._unrelated:
                continue
            normalized = normalize_key(str(key))
            if normalized not in self._normalized:
                _remember_key(self._unrelated, key)
            elif str(value).strip():
                present.add(normalized)
        return present


def missing_tags(tags: Mapping[str, str], required: list[str]) -> list[str]:
    """The required keys no tag with a value matches (`normalize_key`), in their order; what
    `RequiredTags.missing` answers faster for a check asked of many resources."""
    present = {normalize_key(key) for key, value in tags.items() if str(value).strip()}
    return [key for key in required if normalize_key(key) not in present]
