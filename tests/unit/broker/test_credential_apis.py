"""The SCRAM credential API group's edge: Kafka's authorization (DESCRIBE / ALTER on the
cluster; a refusal is CLUSTER_AUTHORIZATION_FAILED for every user named, and nothing is sent
to the controller), the requests it hands the controller channel, and the responses it
encodes (one layer: the channel is a fake)."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Sequence
from typing import Any

from kio.schema.alter_user_scram_credentials.v0 import request as alter_v0
from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
from kio.schema.errors import ErrorCode

from pykraft.broker.credential_apis import CredentialApis
from pykraft.controller import scram
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType
from pykraft.protocol.framing import encode_response


class _Channel:
    def __init__(self) -> None:
        self.calls: list[tuple[list[scram.ScramDeletion], list[scram.ScramUpsertion]]] = []

    async def alter_user_scram_credentials(
        self, deletions: Sequence[scram.ScramDeletion],
        upsertions: Sequence[scram.ScramUpsertion],
    ) -> Sequence[scram.AlterScramResult]:
        self.calls.append((list(deletions), list(upsertions)))
        return [scram.AlterScramResult(d.name) for d in deletions] + [
            scram.AlterScramResult(u.name) for u in upsertions]


class _Only:
    """An authorizer that allows one operation on the cluster and nothing else."""

    def __init__(self, operation: AclOperation) -> None:
        self.operation = operation
        self.asked: list[tuple[AclOperation, ResourceType, str]] = []

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        self.asked.append((operation, resource_type, name))
        return operation == self.operation

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return False


def _context(api_key: int) -> RequestContext:
    header: Any = types.SimpleNamespace(api_key=api_key, api_version=0)
    return RequestContext(header, "PLAINTEXT", "127.0.0.1", 1)


def _apis() -> tuple[CredentialApis, _Channel]:
    channel = _Channel()
    cache: Any = types.SimpleNamespace(image=types.SimpleNamespace(
        scram=types.SimpleNamespace(credentials={})))
    return CredentialApis(cache, channel), channel


ALTER = alter_v0.AlterUserScramCredentialsRequest(
    deletions=(alter_v0.ScramCredentialDeletion(name="bob", mechanism=1),),
    upsertions=(alter_v0.ScramCredentialUpsertion(name="alice", mechanism=2, iterations=4096,
                                                  salt=b"s", salted_password=b"p"),
                alter_v0.ScramCredentialUpsertion(name="bob", mechanism=2, iterations=4096,
                                                  salt=b"s", salted_password=b"p")))


def test_alter_without_alter_on_the_cluster_is_refused_per_user_and_not_forwarded() -> None:
    apis, channel = _apis()
    apis.authorizer = _Only(AclOperation.DESCRIBE)
    response = asyncio.run(apis.alter_user_scram_credentials(_context(51), ALTER))
    assert [(r.user, r.error_code) for r in response.results] == [
        ("alice", ErrorCode.cluster_authorization_failed),
        ("bob", ErrorCode.cluster_authorization_failed)]
    assert channel.calls == []
    assert encode_response(1, response)  # a well-formed response


def test_alter_with_alter_on_the_cluster_goes_to_the_controller() -> None:
    apis, channel = _apis()
    authorizer = _Only(AclOperation.ALTER)
    apis.authorizer = authorizer
    response = asyncio.run(apis.alter_user_scram_credentials(_context(51), ALTER))
    assert authorizer.asked == [(AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")]
    [(deletions, upsertions)] = channel.calls
    assert deletions == [scram.ScramDeletion("bob", 1)]
    assert [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
            for u in upsertions] == [("alice", 2, 4096, b"s", b"p"), ("bob", 2, 4096, b"s", b"p")]
    assert all(r.error_code == ErrorCode.none for r in response.results)


def test_describe_without_describe_on_the_cluster_is_refused_at_the_top_and_per_user() -> None:
    apis, _ = _apis()
    apis.authorizer = _Only(AclOperation.ALTER)
    request = describe_v0.DescribeUserScramCredentialsRequest(
        users=(describe_v0.UserName(name="zed"), describe_v0.UserName(name="amy")))
    response = asyncio.run(apis.describe_user_scram_credentials(_context(50), request))
    assert response.error_code == ErrorCode.cluster_authorization_failed
    assert [(r.user, r.error_code, r.credential_infos) for r in response.results] == [
        ("amy", ErrorCode.cluster_authorization_failed, ()),
        ("zed", ErrorCode.cluster_authorization_failed, ())]
    assert encode_response(1, response)


def test_describe_with_describe_answers_from_the_image() -> None:
    apis, _ = _apis()
    apis.authorizer = _Only(AclOperation.DESCRIBE)
    request = describe_v0.DescribeUserScramCredentialsRequest(users=None)
    response = asyncio.run(apis.describe_user_scram_credentials(_context(50), request))
    assert (response.error_code, response.results) == (ErrorCode.none, ())
