"""Status of an object after a reconcile: observedGeneration, the Ready condition, kind fields.

Only fields that differ from the current status are returned, so a reconcile that finds nothing
to do writes nothing, and ``lastTransitionTime`` moves only when Ready's status flips.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .outcome import Outcome

READY = "Ready"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(current: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = current.get("conditions")
    return [dict(c) for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def ready_condition(current: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Ready condition of a status, if it has one."""
    return next((c for c in _conditions(current) if c.get("type") == READY), None)


def status_update(
    current: Mapping[str, Any], outcome: Outcome, generation: int | None, now: datetime | None = None
) -> dict[str, Any]:
    """The status fields to write after ``outcome`` (only those that change)."""
    status = "True" if outcome.ready else "False"
    previous = ready_condition(current)
    transition = (
        previous["lastTransitionTime"]
        if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime")
        else rfc3339(now or datetime.now(UTC))
    )
    condition: dict[str, Any] = {
        "type": READY,
        "status": status,
        "reason": outcome.reason,
        "message": outcome.message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    conditions = [c for c in _conditions(current) if c.get("type") != READY] + [condition]
    wanted: dict[str, Any] = {**outcome.status, "conditions": conditions}
    if generation is not None:
        wanted["observedGeneration"] = generation
    return {key: value for key, value in wanted.items() if current.get(key) != value}
