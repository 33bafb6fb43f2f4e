"""Load the CRDs of crds/ and check objects against their OpenAPI schemas, offline.

Two parts:

- ``structural_problems``: the rules the API server applies before it accepts a CRD's schema
  (a "structural schema"): every node has a type, no forbidden keywords, ``properties`` and
  ``additionalProperties`` never together, root ``metadata`` only restricts name/generateName,
  list-map keys are required scalars, defaults are valid.
- ``validation_errors``: what the API server would say about an object, as far as the OpenAPI
  part goes. The schema becomes JSON Schema (draft 7, the same vocabulary), with unknown fields
  reported instead of pruned, ``date-time`` formats checked, and list-map keys unique. CEL rules
  (``x-kubernetes-validations``) are not evaluated here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"

Schema = dict[str, Any]

# Keywords an apiextensions.k8s.io/v1 schema may not use.
FORBIDDEN = {
    "$ref",
    "$schema",
    "definitions",
    "dependencies",
    "patternProperties",
    "id",
    "readOnly",
    "writeOnly",
    "xml",
    "discriminator",
    "deprecated",
}
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def load_crds() -> dict[str, dict[str, Any]]:
    """{kind: CRD manifest} for every file in crds/."""
    crds = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = crd
    return crds


def version_schema(crd: dict[str, Any], version: str = "v1alpha1") -> Schema:
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: Schema = served["schema"]["openAPIV3Schema"]
    return schema


def walk(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node with its path (``.spec.grants[]``)."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")


def structural_problems(schema: Schema) -> list[str]:
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("root: type must be object")
    for path, node in walk(schema):
        where = path or "root"
        exempt = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        if not node.get("type") and not exempt:
            problems.append(f"{where}: no type")
        for keyword in FORBIDDEN & set(node):
            problems.append(f"{where}: forbidden keyword {keyword}")
        if node.get("uniqueItems") is True:
            problems.append(f"{where}: uniqueItems must not be true (use x-kubernetes-list-type: set)")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties and additionalProperties together")
        if node.get("additionalProperties") is False:
            problems.append(f"{where}: additionalProperties: false is not allowed")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{where}: array without items")
        problems.extend(_list_map_problems(where, node))
        if "default" in node:
            problems.extend(f"{where}: invalid default: {e}" for e in _errors(node, node["default"]))
    metadata = schema.get("properties", {}).get("metadata", {})
    extra = set(metadata.get("properties", {})) - {"name", "generateName"}
    if extra:
        problems.append(f"metadata: only name and generateName may be restricted, not {sorted(extra)}")
    if set(metadata) - {"type", "properties"}:
        problems.append("metadata: only type and properties may be set")
    return problems


def _list_map_problems(where: str, node: Schema) -> Iterator[str]:
    if node.get("x-kubernetes-list-type") != "map":
        return
    keys = node.get("x-kubernetes-list-map-keys") or []
    if not keys:
        yield f"{where}: list-type map without list-map-keys"
    item = node.get("items", {})
    for key in keys:
        field = item.get("properties", {}).get(key)
        if field is None:
            yield f"{where}: list-map key {key} is not a property"
        elif key not in item.get("required", []) and "default" not in field:
            yield f"{where}: list-map key {key} must be required or defaulted"
        elif field.get("type") not in {"string", "integer", "boolean", "number"}:
            yield f"{where}: list-map key {key} must be a scalar"


def to_json_schema(schema: Schema, *, root: bool = True) -> Schema:
    """The OpenAPI schema as closed JSON Schema: an unknown field is an error, not pruned."""
    converted = copy.deepcopy(schema)
    for _, node in walk(converted):
        for key in [k for k in node if k.startswith("x-kubernetes-")]:
            if key not in {"x-kubernetes-list-type", "x-kubernetes-list-map-keys"}:
                del node[key]
        if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
    if root:
        # ObjectMeta is validated by the API server itself; keep it open here.
        metadata = converted["properties"]["metadata"]
        metadata.pop("additionalProperties", None)
    return converted


def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not RFC3339.match(value):
        return False
    datetime.fromisoformat(value.replace("z", "Z"))
    return True


FORMATS = jsonschema.FormatChecker()
FORMATS.checks("date-time", raises=ValueError)(_date_time)


def _errors(schema: Schema, instance: Any) -> Iterator[str]:
    validator = jsonschema.Draft7Validator(to_json_schema(schema, root=False), format_checker=FORMATS)
    for error in validator.iter_errors(instance):
        yield f"{error.json_path}: {error.message}"


def validation_errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """Why the API server would refuse ``obj`` on the OpenAPI schema (empty: it passes)."""
    schema = version_schema(crd)
    errors = (
        [f"apiVersion: expected {crd['spec']['group']}/v1alpha1"] if not _api_version_ok(crd, obj) else []
    )
    validator = jsonschema.Draft7Validator(to_json_schema(schema), format_checker=FORMATS)
    errors += [f"{e.json_path}: {e.message}" for e in validator.iter_errors(obj)]
    errors += list(_list_map_duplicates(schema, obj))
    return errors


def _api_version_ok(crd: dict[str, Any], obj: dict[str, Any]) -> bool:
    kind = crd["spec"]["names"]["kind"]
    return bool(obj.get("apiVersion") == f"{crd['spec']['group']}/v1alpha1" and obj.get("kind") == kind)


def _list_map_duplicates(schema: Schema, value: Any, path: str = "$") -> Iterator[str]:
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                yield from _list_map_duplicates(child, value[name], f"{path}.{name}")
    elif isinstance(value, list) and schema.get("x-kubernetes-list-type") == "map":
        keys = schema["x-kubernetes-list-map-keys"]
        seen: set[tuple[Any, ...]] = set()
        for item in value:
            identity = tuple(item.get(k) for k in keys) if isinstance(item, dict) else (item,)
            if identity in seen:
                yield f"{path}: duplicate entry for {dict(zip(keys, identity, strict=True))}"
            seen.add(identity)
