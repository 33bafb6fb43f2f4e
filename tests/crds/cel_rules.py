"""The CRDs' CEL rules (``x-kubernetes-validations``) evaluated with cel-python, as the API server would.

An API server without CEL (before 1.25) drops these rules; this evaluates them on an object the way
the API server does on create and update:

- a rule runs at its schema node, with ``self`` the value there, only when that value is present;
- a transition rule (one that reads ``oldSelf``) runs on updates only, when the old object had a
  value at the same place too; list items are matched to their old selves by the list-map keys;
- a rule that does not evaluate to true (false, or an error such as a missing field) refuses the
  object with its message.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from tests.crds.crd_schema import Schema, walk

# The functions of Kubernetes' CEL libraries the rules use that plain CEL lacks; a rule that calls
# anything else fails to evaluate here, so a new one is noticed.
KUBERNETES_FUNCTIONS = {
    # cel-go's strings extension: Unicode white space off both ends.
    "trim": lambda value: celtypes.StringType(str(value).strip()),
}

_ENVIRONMENT = celpy.Environment()
_MISSING = object()


@dataclass(frozen=True)
class Rule:
    path: str
    rule: str
    message: str

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.rule


def rules(schema: Schema) -> list[Rule]:
    """Every rule of a version's schema, with the path of its node (``.spec.secretRef``)."""
    return [
        Rule(path, validation["rule"], validation["message"])
        for path, node in walk(schema)
        for validation in node.get("x-kubernetes-validations", [])
    ]


def evaluate(rule: str, value: Any, old: Any = _MISSING) -> bool:
    """Whether ``rule`` holds for ``self`` = value (and ``oldSelf`` = old); an error is False."""
    program = _ENVIRONMENT.program(_ENVIRONMENT.compile(rule), functions=KUBERNETES_FUNCTIONS)
    activation = {"self": celpy.json_to_cel(value)}
    if old is not _MISSING:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = program.evaluate(activation)
    except celpy.CELEvalError:
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def _checks(schema: Schema, value: Any, old: Any, path: str) -> Iterator[tuple[Rule, Any, Any]]:
    """(rule, self, oldSelf) for every rule that runs on ``value`` at ``path``."""
    for validation in schema.get("x-kubernetes-validations", []):
        rule = Rule(path, validation["rule"], validation["message"])
        if not rule.transition or old is not _MISSING:
            yield rule, value, old
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, child in value.items():
            child_schema = properties.get(name, schema.get("additionalProperties"))
            if isinstance(child_schema, dict):
                child_old = old.get(name, _MISSING) if isinstance(old, dict) else _MISSING
                yield from _checks(child_schema, child, child_old, f"{path}.{name}")
    elif isinstance(value, list) and "items" in schema:
        keys = schema.get("x-kubernetes-list-map-keys")
        olds = old if isinstance(old, list) and keys else []
        for item in value:
            matched = [o for o in olds if all(o.get(k) == item.get(k) for k in keys or ())]
            yield from _checks(schema["items"], item, matched[0] if matched else _MISSING, f"{path}[]")


def results(schema: Schema, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[Rule, bool]:
    """Every rule that runs on ``obj`` and whether it holds: a create when ``old`` is None, else an update."""
    return {
        rule: evaluate(rule.rule, value, old_value)
        for rule, value, old_value in _checks(schema, obj, _MISSING if old is None else old, "")
    }


def violations(schema: Schema, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """The messages of the rules ``obj`` breaks."""
    return [rule.message for rule, held in results(schema, obj, old).items() if not held]
