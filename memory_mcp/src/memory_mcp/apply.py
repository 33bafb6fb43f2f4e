"""``memory-mcp apply``: declare Spaces, Users and ApiKeys from YAML, without a cluster.

The manifests are the same objects the operator reconciles, checked the way the CRDs check them,
and applied by the operator's reconcilers in dependency order (Spaces, Users, then ApiKeys). A key
is generated once and handed back to the caller to show once; the database keeps only its hash,
so re-applying the same file changes nothing and yields no new key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from memory_mcp.operator import reconcile
from memory_mcp.operator.outcome import REVOKED, Outcome
from memory_mcp.operator.secrets import SecretRef, StoredKey
from memory_mcp.operator.specs import API_VERSION, ApiKeySpec, Checker, SpaceSpec, UserSpec, problems_of
from memory_mcp.store import validation
from memory_mcp.store.db import Database
from memory_mcp.store.errors import ValidationError

KINDS = ("Space", "User", "ApiKey")  # also the order they are applied in
# An object's top level; ``status`` (as ``kubectl get -o yaml`` writes it) is accepted and ignored.
ENVELOPE = ("apiVersion", "kind", "metadata", "spec", "status")
ACTOR = "apply"


@dataclass(frozen=True)
class Manifest:
    """One declared object: ``kind``, ``metadata.name`` and the raw ``spec``."""

    kind: str
    name: str
    spec: Mapping[str, Any]
    source: str

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


class ManifestError(Exception):
    """The file cannot be applied; ``problems`` names each object and field at fault."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


_SPEC_PARSERS = {"Space": SpaceSpec.parse, "User": UserSpec.parse, "ApiKey": ApiKeySpec.parse}


def _documents(text: str, source: str) -> Iterator[tuple[str, object]]:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        # One line: where and what (the library's own text spans lines and quotes the input).
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = getattr(exc, "context", None)
        what = ": ".join(p for p in (context, getattr(exc, "problem", None)) if p) or type(exc).__name__
        raise ManifestError([f"{source}: not valid YAML{at}: {what}"]) from None
    for number, doc in enumerate(documents, start=1):
        where = f"{source}, document {number}"
        if isinstance(doc, Mapping) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for index, item in enumerate(doc["items"]):
                yield f"{where}, items[{index}]", item
        elif doc is not None:
            yield where, doc


def _manifest(where: str, doc: object) -> Manifest | list[str]:
    """Check one object's envelope and spec: the manifest, or every problem, each naming the object
    and the field at fault."""
    if not isinstance(doc, Mapping):
        return [f"{where}: expected a Kubernetes object (a mapping), got {type(doc).__name__}"]
    kind = doc.get("kind")
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    label = f"{kind} '{name}'" if isinstance(name, str) else f"{kind or 'object'}"
    if kind not in KINDS:
        return [f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}"]
    check = Checker()
    check.known_fields(doc, ENVELOPE, "")
    if doc.get("apiVersion") != API_VERSION:
        check.problems.append(
            ValidationError("apiVersion", f"must be {API_VERSION}, got {doc.get('apiVersion')!r}")
        )
    if not isinstance(name, str):
        check.problems.append(ValidationError("metadata.name", "is required"))
    else:
        check.field(lambda: validation.object_name(name, "metadata.name"), name)
    try:
        _SPEC_PARSERS[kind](doc.get("spec"))
    except ValidationError as exc:
        check.problems.extend(problems_of(exc))
    if check.problems:
        return [f"{label} ({where}): {p.field}: {p.message}" for p in check.problems]
    assert isinstance(name, str)
    return Manifest(kind, name, dict(doc["spec"]), where)


def _identity(doc: object) -> tuple[str, str] | None:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("metadata"), Mapping):
        return None
    kind, name = doc.get("kind"), doc["metadata"].get("name")
    return (kind, name) if isinstance(kind, str) and isinstance(name, str) else None


def load_manifests(text: str, source: str = "input") -> list[Manifest]:
    """Every Space, User and ApiKey in a multi-document YAML text, in the order they apply.

    Raises :class:`ManifestError` listing every invalid object (nothing is applied then).
    """
    manifests: list[Manifest] = []
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for where, doc in _documents(text, source):
        identity = _identity(doc)
        if identity is not None and identity in seen:
            kind, name = identity
            problems.append(f"{kind} '{name}' ({where}): declared twice (first in {seen[identity]})")
            continue
        if identity is not None:
            seen[identity] = where
        checked = _manifest(where, doc)
        if isinstance(checked, Manifest):
            manifests.append(checked)
        else:
            problems.extend(checked)
    if problems:
        raise ManifestError(problems)
    if not manifests:
        raise ManifestError([f"{source}: no Space, User or ApiKey objects found"])
    return sorted(manifests, key=lambda m: KINDS.index(m.kind))


@dataclass
class MemoryKeyStore:
    """The secret store of ``apply``: keys generated in this run, held in memory to show once.

    It does not hold keys from earlier runs (their owners do), so a key it lacks is not lost.
    """

    keys: dict[SecretRef, StoredKey] = field(default_factory=dict)
    holds_keys = False

    async def read(self, ref: SecretRef) -> StoredKey | None:
        return self.keys.get(ref)

    async def write(self, ref: SecretRef, key: StoredKey) -> None:
        self.keys[ref] = key

    async def delete(self, ref: SecretRef) -> bool:
        return self.keys.pop(ref, None) is not None


@dataclass(frozen=True)
class Applied:
    manifest: Manifest
    outcome: Outcome

    def describe(self) -> str:
        """One line for people: what happened to this object."""
        if self.outcome.reason == REVOKED:  # applied as declared, but revoked by hand: it stays so
            return f"{self.manifest}: applied, not usable ({REVOKED}): {self.outcome.message}"
        if not self.outcome.ready:
            return f"{self.manifest}: not applied ({self.outcome.reason}): {self.outcome.message}"
        return f"{self.manifest}: {'; '.join(self.outcome.changes) if self.outcome.changes else 'unchanged'}"


@dataclass
class ApplyReport:
    results: list[Applied] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.outcome.ready for r in self.results)

    @property
    def new_keys(self) -> dict[str, str]:
        """``{ApiKey name: key}`` for every key generated by this run (to show once)."""
        return {r.manifest.name: r.outcome.new_key for r in self.results if r.outcome.new_key is not None}


async def apply_manifests(db: Database, manifests: Sequence[Manifest], actor: str = ACTOR) -> ApplyReport:
    """Reconcile each manifest in order; one that cannot be applied does not stop the others."""
    store = MemoryKeyStore()
    report = ApplyReport()
    for manifest in sorted(manifests, key=lambda m: KINDS.index(m.kind)):
        if manifest.kind == "Space":
            outcome = await reconcile.reconcile_space(db, manifest.name, manifest.spec, actor)
        elif manifest.kind == "User":
            outcome = await reconcile.reconcile_user(db, manifest.name, manifest.spec, actor)
        else:
            outcome = await reconcile.reconcile_apikey(db, manifest.name, manifest.spec, store, actor)
        report.results.append(Applied(manifest, outcome))
    return report


async def apply_and_close(db: Database, manifests: Sequence[Manifest]) -> ApplyReport:
    """:func:`apply_manifests`, then close ``db`` (the command's one-shot database)."""
    try:
        return await apply_manifests(db, manifests)
    finally:
        await db.close()


def keys_file_content(path: Path, new_keys: Mapping[str, str]) -> str:
    """The JSON ``{name: key}`` for ``--keys-out``: keys already in the file kept, new ones added."""
    existing: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text() or "{}")
        except json.JSONDecodeError:
            raise ManifestError([f"{path}: exists but is not a JSON object of keys; move it away"]) from None
        if not isinstance(loaded, dict):
            raise ManifestError([f"{path}: exists but is not a JSON object of keys; move it away"])
        existing = loaded
    return json.dumps({**existing, **new_keys}, indent=2, sort_keys=True) + "\n"
