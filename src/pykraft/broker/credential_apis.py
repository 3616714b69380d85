"""SCRAM credential APIs (KIP-554): DescribeUserScramCredentials and AlterUserScramCredentials.

DescribeUserScramCredentials is answered from this node's metadata image, as Kafka's
KafkaApis answers it from its metadata cache: names and iteration counts, never a salt or a
key. AlterUserScramCredentials goes through the `ScramChannel` to the active controller
(in-process on a node whose controller is active), which decides it
(`pykraft.controller.scram`) and answers once its records are committed.

Both are served on broker listeners and, as Kafka 4.0 does, on controller listeners too
(KIP-919: admin tools may talk to the controllers directly). Authorization is Kafka's:
DESCRIBE on the cluster to describe, ALTER on the cluster to alter; a request refused is
answered CLUSTER_AUTHORIZATION_FAILED for every user it names. The broker checks ALTER itself
before forwarding, because the controller sees the broker's principal, not the client's
(Kafka carries the client's in an Envelope).

A salted password is a secret: it is read from the request, handed to the controller and
turned into StoredKey/ServerKey there; nothing here logs a request body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from pykraft.broker.authorizer import ALLOW_ALL, Authorizer
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.controller import scram
from pykraft.net.scram import mechanism_of
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from pykraft.protocol.api import CREDENTIAL_APIS, ApiKey
from pykraft.protocol.entities import NO_THROTTLE, make, response_module

__all__ = ["CredentialApis", "ScramChannel", "derive_keys"]

# Kafka's default message for CLUSTER_AUTHORIZATION_FAILED (Errors.CLUSTER_AUTHORIZATION_FAILED)
_NOT_AUTHORIZED: Final = "Cluster authorization failed."


def derive_keys(mechanism_code: int, salted_password: bytes) -> tuple[bytes, bytes]:
    """StoredKey and ServerKey of a salted password (Kafka's ScramFormatter), for
    `pykraft.controller.scram`, which may not import the hashes' module itself."""
    mechanism = mechanism_of(mechanism_code)
    if mechanism is None:  # the controller checks the code before it asks
        raise ValueError(f"unknown SCRAM mechanism {mechanism_code}")
    return (mechanism.stored_key(mechanism.client_key(salted_password)),
            mechanism.server_key(salted_password))


class ScramChannel(Protocol):
    """The way to the active controller, for AlterUserScramCredentials."""

    async def alter_user_scram_credentials(
        self, deletions: Sequence[scram.ScramDeletion],
        upsertions: Sequence[scram.ScramUpsertion],
    ) -> Sequence[scram.AlterScramResult]: ...


class CredentialApis:
    """The ApiGroup of KIP-554's two APIs."""

    def __init__(self, cache: MetadataCache, controller: ScramChannel) -> None:
        self.cache = cache
        self.controller = controller
        self.authorizer: Authorizer = ALLOW_ALL  # the node sets its own (authorizer.class.name)

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return CREDENTIAL_APIS

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        return {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
        }

    def _allowed(self, context: RequestContext, operation: AclOperation) -> bool:
        return self.authorizer is ALLOW_ALL or self.authorizer.authorize(
            context, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    async def describe_user_scram_credentials(self, context: RequestContext,
                                              request: Any) -> Any:
        module = response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                                 context.header.api_version)
        names = None if request.users is None else [user.name for user in request.users]
        if not self._allowed(context, AclOperation.DESCRIBE):
            return make(
                module.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message=_NOT_AUTHORIZED,
                results=tuple(
                    make(module.DescribeUserScramCredentialsResult, user=name,
                         error_code=ErrorCode.cluster_authorization_failed,
                         error_message=_NOT_AUTHORIZED, credential_infos=())
                    for name in sorted(set(names or ()))))
        described = scram.describe_user_scram_credentials(self.cache.image.scram.credentials,
                                                          names)
        return make(
            module.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none, error_message=None,
            results=tuple(
                make(module.DescribeUserScramCredentialsResult, user=user.user,
                     error_code=user.error_code, error_message=user.error_message,
                     credential_infos=tuple(
                         make(module.CredentialInfo, mechanism=mechanism,
                              iterations=iterations)
                         for mechanism, iterations in user.credentials))
                for user in described))

    async def alter_user_scram_credentials(self, context: RequestContext,
                                           request: Any) -> Any:
        module = response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                                 context.header.api_version)
        deletions = [scram.ScramDeletion(d.name, int(d.mechanism)) for d in request.deletions]
        upsertions = [scram.ScramUpsertion(u.name, int(u.mechanism), int(u.iterations),
                                           bytes(u.salt), bytes(u.salted_password))
                      for u in request.upsertions]
        results: Sequence[scram.AlterScramResult]
        if not self._allowed(context, AclOperation.ALTER):
            names = {d.name for d in deletions} | {u.name for u in upsertions}
            results = [scram.AlterScramResult(name, ErrorCode.cluster_authorization_failed,
                                              _NOT_AUTHORIZED) for name in sorted(names)]
        elif deletions or upsertions:
            results = await self.controller.alter_user_scram_credentials(deletions, upsertions)
        else:
            results = ()
        return make(
            module.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
            results=tuple(make(module.AlterUserScramCredentialsResult, user=r.user,
                               error_code=r.error_code, error_message=r.error_message)
                          for r in results))
