"""Governance through the real operator: a Review space, a curator's Curate grant, a rate limit."""

from __future__ import annotations

import pytest

from memory_mcp.operator.specs import ApiKeySpec, SpaceSpec, problems_of
from memory_mcp.store import identity, memories, ratelimit, review, spaces
from memory_mcp.store.access import Access
from memory_mcp.store.db import Database
from memory_mcp.store.errors import RateLimited, ValidationError
from tests.operator.support import Cluster, RunningOperator, eventually

POLICIES = {"displayName": "Policies", "writePolicy": "Review", "quotas": {"maxBytes": 10_000}}


def key_spec(name: str, access: str, **extra: object) -> dict[str, object]:
    return {
        "user": "margaret",
        "grants": [{"space": "policies", "access": access}],
        "secretRef": {"namespace": "agents", "name": name},
        **extra,
    }


async def test_review_space_curator_and_rate_limited_agent(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "policies", POLICIES)
    await eventually(lambda: cluster.ready("Space", "policies"), what="Space policies ready")
    space = await spaces.get_space(db, "policies")
    assert space is not None and space.write_policy == "Review"
    await cluster.create(
        "User", "margaret", {"email": "m@example.com", "displayName": "Margaret", "role": "Writer"}
    )
    await cluster.create("ApiKey", "curator", key_spec("curator", "Curate"))
    await cluster.create(
        "ApiKey", "agent", key_spec("agent", "ReadWrite", rateLimit={"requestsPerMinute": 60, "burst": 2})
    )
    await cluster.ready_because("ApiKey", "curator", "Reconciled")
    await cluster.ready_because("ApiKey", "agent", "Reconciled")
    curator = await identity.authenticate(db, cluster.secret_key("agents", "curator") or "")
    agent = await identity.authenticate(db, cluster.secret_key("agents", "agent") or "")
    assert curator.grants[0].effective is Access.CURATE
    assert (agent.key.rate_per_minute, agent.key.rate_burst) == (60, 2)

    # The agent proposes; the curator accepts.
    proposed = await memories.save_memory(
        db, identity.resolve_space(agent, "policies"), "Expenses need receipts."
    )
    assert proposed.proposed
    accepted = await review.decide(
        db, identity.resolve_space(curator, "policies"), str(proposed.memory.id), "accepted"
    )
    assert accepted.memory.status == "live"

    # The rate limit is the declared one.
    for _ in range(2):
        await ratelimit.spend(db, agent.key)
    with pytest.raises(RateLimited):
        await ratelimit.spend(db, agent.key)

    # Back to Direct: the operator updates the policy; the next save is live at once.
    generation = await cluster.update("Space", "policies", {"writePolicy": "Direct"})
    await eventually(
        lambda: cluster.get("Space", "policies")["status"]["observedGeneration"] == generation,
        what="writePolicy Direct reconciled",
    )
    agent = await identity.authenticate(db, cluster.secret_key("agents", "agent") or "")
    direct = await memories.save_memory(
        db, identity.resolve_space(agent, "policies"), "Travel is booked via the portal."
    )
    assert not direct.proposed and direct.memory.status == "live"


async def test_an_unknown_write_policy_is_refused_with_the_field(
    operator: RunningOperator, cluster: Cluster, db: Database
) -> None:
    await cluster.create("Space", "policies", {**POLICIES, "writePolicy": "Moderated"})
    ready = await eventually(lambda: cluster.ready("Space", "policies"), what="Ready on Space policies")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.writePolicy: must be 'Direct' or 'Review'" in ready["message"]
    assert await spaces.get_space(db, "policies") is None


def test_specs_take_the_governance_fields_and_name_each_problem() -> None:
    space = SpaceSpec.parse({"displayName": "P", "writePolicy": "Review", "quotas": {"maxBytes": 10}})
    assert (space.write_policy, space.max_bytes) == ("Review", 10)
    assert SpaceSpec.parse({"displayName": "P"}).write_policy == "Direct"
    key = ApiKeySpec.parse({**key_spec("k", "Curate"), "rateLimit": {"requestsPerMinute": 30}})
    assert key.rate_limit == ratelimit.RateLimit(30, 30) and key.grants[0].access is Access.CURATE
    with pytest.raises(ValidationError) as bad:
        ApiKeySpec.parse({**key_spec("k", "Admin"), "rateLimit": {"burst": 0, "perHour": 5}})
    fields = [p.field for p in problems_of(bad.value)]
    assert fields == ["spec.grants[0].access", "spec.rateLimit.perHour", "spec.rateLimit.requestsPerMinute"]
    with pytest.raises(ValidationError, match="requestsPerMinute: must be an integer from 1"):
        ApiKeySpec.parse({**key_spec("k", "Read"), "rateLimit": {"requestsPerMinute": 0}})
