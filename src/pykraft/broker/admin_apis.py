"""Handlers for metadata APIs: topics, partitions, configs, leaders, cluster and quorum.

Changes (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, AlterClientQuotas, ElectLeaders, AlterPartitionReassignments,
UnregisterBroker, UpdateFeatures) are translated into the
controller's neutral requests and forwarded through a `ControllerChannel` to the active
controller — in-process on a combined node — which answers once the records are committed;
so is ListPartitionReassignments, which reads the controller's state. Descriptions are read
from the broker's metadata image and configuration.

DescribeConfigs of this broker reports what it runs with, as Kafka's ConfigHelper does: each
key's value and source by precedence -- dynamic per-broker (DYNAMIC_BROKER_CONFIG) over the
dynamic cluster-wide default (DYNAMIC_DEFAULT_BROKER_CONFIG) over server.properties
(STATIC_BROKER_CONFIG) over Kafka's default (DEFAULT_CONFIG) -- and, when asked, every synonym
that sets it, in that order (log.retention.ms before .minutes and .hours, layer by layer).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from pykraft.broker.authorization import (
    CLUSTER_SUPPORTED,
    Authorized,
    allowed_names,
    allows,
    allows_cluster,
    operations_if,
    refusal,
)
from pykraft.broker.internal_topics import (
    COORDINATED_TOPICS,
    InternalTopicRefused,
    internal_topic,
)
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.controller import quotas
from pykraft.controller.configs import (
    DYNAMIC_BROKER_CONFIGS,
    DYNAMIC_UPDATABLE_BROKER_KEYS,
    GROUP_CONFIGS,
    LISTENER_ONLY_SECURITY_KEYS,
    broker_config_synonyms,
    broker_default_values,
    group_config_values,
    scala_set,
)
from pykraft.controller.features import FeatureUpdate, UpdateFeaturesResult, UpgradeType
from pykraft.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    ConfigSource,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    LegacyAlterConfigsResource,
    OngoingTopicReassignments,
    PartitionElectionResult,
    ReassignablePartition,
    ReassignableTopic,
    ReassignmentTopicResult,
    TopicElectionResult,
)
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from pykraft.protocol.api import (
    ADMIN_APIS,
    BROKER_ADMIN_APIS,
    ApiKey,
)
from pykraft.protocol.entities import NO_THROTTLE, field, make, response_module
from pykraft.storage import log_config
from pykraft.topic_names import RESERVED_TOPICS

# DescribeConfigs ConfigType ids
_OPERATIONS: Final = frozenset(op.value for op in AlterConfigOp)
_CONFIG_TYPES: Final = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5,
                        "double": 6, "list": 7, "class": 8, "password": 9}


class ControllerChannel(Protocol):
    """The way to the active controller (in-process now; an RPC client on brokers later)."""

    async def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool
    ) -> Sequence[CreateTopicResult]: ...

    async def delete_topics(
        self, names: Sequence[str], topic_ids: Sequence[Any]
    ) -> Sequence[DeleteTopicResult]: ...

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], *, validate_only: bool
    ) -> Sequence[CreatePartitionsResult]: ...

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], *, validate_only: bool
    ) -> Sequence[AlterConfigsResult]: ...

    async def alter_configs(
        self, resources: Sequence[LegacyAlterConfigsResource], *, validate_only: bool
    ) -> Sequence[AlterConfigsResult]: ...

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Mapping[str, Sequence[int]] | None
    ) -> tuple[ErrorCode, Sequence[TopicElectionResult]]: ...

    async def alter_partition_reassignments(
        self, topics: Sequence[ReassignableTopic], *, allow_replication_factor_change: bool
    ) -> Sequence[ReassignmentTopicResult]: ...

    async def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None
    ) -> tuple[ErrorCode, Sequence[OngoingTopicReassignments]]: ...

    async def unregister_broker(self, broker_id: int) -> tuple[ErrorCode, str | None]: ...

    async def update_features(
        self, updates: Sequence[FeatureUpdate], *, validate_only: bool
    ) -> UpdateFeaturesResult: ...

    async def alter_client_quotas(
        self, alterations: Sequence[quotas.ClientQuotaAlteration], *, validate_only: bool
    ) -> Sequence[quotas.ClientQuotaResult]: ...


class QuorumInfo(Protocol):
    """What DescribeQuorum reports (from the Raft driver). A node that does not lead the
    quorum gives only `error_code` NOT_LEADER_OR_FOLLOWER and its `leader_id` /
    `leader_epoch`, as Kafka's KafkaRaftClient answers DescribeQuorum."""

    def describe_quorum(self) -> Mapping[str, Any]: ...


# (api version, request) -> the active controller's DescribeQuorum response, None if none came
QuorumForward = Callable[[int, Any], Awaitable[Any | None]]


Op = AclOperation
TOPIC = ResourceType.TOPIC
# what a config resource is authorized as (ControllerApis.authorizeAlterResource):
# (ACL resource type, whether its name is the resource's, error when refused)
_CONFIG_RESOURCES: Final[dict[int, tuple[ResourceType, bool, ErrorCode]]] = {
    ConfigResourceType.TOPIC: (TOPIC, True, ErrorCode.topic_authorization_failed),
    ConfigResourceType.BROKER: (ResourceType.CLUSTER, False,
                                ErrorCode.cluster_authorization_failed),
    ConfigResourceType.BROKER_LOGGER: (ResourceType.CLUSTER, False,
                                       ErrorCode.cluster_authorization_failed),
    ConfigResourceType.CLIENT_METRICS: (ResourceType.CLUSTER, False,
                                        ErrorCode.cluster_authorization_failed),
    ConfigResourceType.GROUP: (ResourceType.GROUP, True, ErrorCode.group_authorization_failed),
}


class AdminApis(Authorized):
    """The metadata API group (see broker.apis.ApiGroup).

    Authorization, as Kafka's KafkaApis and ControllerApis: CreateTopics needs CREATE on the
    cluster or the topic (TOPIC_AUTHORIZATION_FAILED), and shows a created topic's configs,
    partition count and replication factor only with DESCRIBE_CONFIGS on it; DeleteTopics
    DELETE and CreatePartitions ALTER on the topic (a topic it may not DESCRIBE is refused
    alike, whether it exists or not, and one named by id keeps its name hidden); the config
    APIs DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the group, or the cluster for broker
    resources; DescribeClientQuotas DESCRIBE_CONFIGS and AlterClientQuotas ALTER_CONFIGS on
    the cluster; ElectLeaders, AlterPartitionReassignments, UpdateFeatures and
    UnregisterBroker ALTER on the cluster; ListPartitionReassignments and DescribeQuorum
    DESCRIBE on the cluster; DescribeCluster nothing on a broker listener (its authorized
    operations are the principal's) and ALTER on the cluster on a controller listener.
    Refused resources are never sent to the controller."""

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        controller: ControllerChannel,
        server_configs: Mapping[str, str],
        quorum: QuorumInfo,
        forward_describe_quorum: QuorumForward | None = None,
        *,
        clients_listener: bool = True,
    ) -> None:
        """`forward_describe_quorum` is the broker listener's: a DescribeQuorum that this
        node cannot answer (it does not lead) goes to the active controller, as Kafka's
        brokers forward it; the controller listener answers NOT_LEADER_OR_FOLLOWER.
        `clients_listener` is False for the controller listener's: the CreateTopics it takes
        come from brokers (their clients' were checked there) and from the coordinators,
        which create the internal topics through it."""
        self.node_id = node_id
        self.cache = cache
        self.controller = controller
        self.server_configs = server_configs
        self.quorum = quorum
        self.forward_describe_quorum = forward_describe_quorum
        self.refused_topics = RESERVED_TOPICS if clients_listener else frozenset()
        self.clients_listener = clients_listener

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        # DescribeClientQuotas is a broker API in Kafka 4.0; a controller does not serve it
        return BROKER_ADMIN_APIS if self.clients_listener else ADMIN_APIS

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        handlers = self._handlers()
        return {key: handler for key, handler in handlers.items() if key in self.versions}

    def _handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        return {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.DESCRIBE_QUORUM: self.describe_quorum,
            ApiKey.ELECT_LEADERS: self.elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
            ApiKey.UNREGISTER_BROKER: self.unregister_broker,
            ApiKey.UPDATE_FEATURES: self.update_features,
        }

    # -- topics -----------------------------------------------------------------------

    async def create_topics(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.CREATE_TOPICS, context.header.api_version)
        topics = [
            CreatableTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments={a.partition_index: tuple(a.broker_ids) for a in topic.assignments},
                configs={c.name: c.value for c in topic.configs},
            )
            for topic in request.topics
        ]
        refused: list[CreateTopicResult] = []
        wanted: list[CreatableTopic] = []
        names = [topic.name for topic in topics]
        creatable = (set(names) if allows_cluster(self.authorizer, context, Op.CREATE)
                     else allowed_names(self.authorizer, context, Op.CREATE, TOPIC, names))
        describable = allowed_names(self.authorizer, context, Op.DESCRIBE_CONFIGS, TOPIC, names)
        for topic in topics:
            if topic.name not in creatable:
                refused.append(CreateTopicResult(
                    name=topic.name, error_code=ErrorCode.topic_authorization_failed,
                    error_message="Authorization failed."))
            elif topic.name in self.refused_topics and topic.name in COORDINATED_TOPICS:
                try:  # made with the settings its coordinator relies on
                    wanted.append(internal_topic(
                        topic.name, self.server_configs,
                        len(self.cache.live_brokers(context.listener_name)), topic))
                except InternalTopicRefused as error:
                    refused.append(CreateTopicResult(name=topic.name, error_code=error.code,
                                                     error_message=error.message))
            elif topic.name in self.refused_topics:
                refused.append(CreateTopicResult(
                    name=topic.name, error_code=ErrorCode.invalid_request,
                    error_message=f"Creation of internal topic {topic.name} is prohibited."))
            else:
                wanted.append(topic)
        results = list(await self.controller.create_topics(
            wanted, validate_only=field(request, "validate_only", False))) if wanted else []
        results = [result if result.name in describable or result.error_code != ErrorCode.none
                   else dataclasses.replace(result, num_partitions=-1, replication_factor=-1,
                                            configs=()) for result in results]
        results += refused
        return make(
            module.CreateTopicsResponse,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                make(
                    module.CreatableTopicResult,
                    name=result.name,
                    topic_id=result.topic_id,
                    error_code=result.error_code,
                    error_message=result.error_message,
                    num_partitions=result.num_partitions,
                    replication_factor=result.replication_factor,
                    configs=self._created_configs(module, result),
                    topic_config_error_code=ErrorCode.topic_authorization_failed  # v5+
                    if result.error_code == ErrorCode.none and result.name not in describable
                    else ErrorCode.none,
                )
                for result in results
            ),
        )

    @staticmethod
    def _created_configs(module: Any, result: CreateTopicResult) -> Any:
        if result.error_code != ErrorCode.none or not hasattr(module, "CreatableTopicConfigs"):
            return None
        return tuple(
            make(module.CreatableTopicConfigs, name=c.name, value=c.value,
                 read_only=c.read_only, config_source=int(c.config_source),
                 is_sensitive=c.is_sensitive)
            for c in result.configs
        )

    async def delete_topics(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.DELETE_TOPICS, context.header.api_version)
        names: list[str] = list(field(request, "topic_names", None) or ())
        ids: list[Any] = []
        for topic in field(request, "topics", None) or ():
            if topic.name is not None:
                names.append(topic.name)
            else:
                ids.append(topic.topic_id)
        names, ids, refused = self._deletable(context, names, ids)
        results = [*await self.controller.delete_topics(names, ids), *refused] if (
            names or ids or not refused) else refused
        return make(
            module.DeleteTopicsResponse,
            throttle_time=NO_THROTTLE,
            responses=tuple(
                make(module.DeletableTopicResult, name=r.name, topic_id=r.topic_id,
                     error_code=r.error_code, error_message=r.error_message)
                for r in results
            ),
        )

    def _deletable(self, context: RequestContext, names: list[str], ids: list[Any],
                   ) -> tuple[list[str], list[Any], list[DeleteTopicResult]]:
        """(the names and ids the principal may delete, the refusals of the others):
        DELETE on the topic or the cluster; a topic it may not DESCRIBE is refused whether
        it exists or not, and one named by id without its name (ControllerApis.deleteTopics)."""
        if allows_cluster(self.authorizer, context, Op.DELETE):
            return names, ids, []
        by_id = self.cache.image.topics.by_id
        named_ids = {topic_id: by_id[topic_id].name for topic_id in ids
                     if topic_id is not None and by_id.get(topic_id) is not None}
        asked = [*names, *named_ids.values()]
        describable = allowed_names(self.authorizer, context, Op.DESCRIBE, TOPIC, asked)
        deletable = allowed_names(self.authorizer, context, Op.DELETE, TOPIC, asked)
        known = self.cache.image.topics.by_name
        refused: list[DeleteTopicResult] = []
        kept_names = []
        for name in names:
            if name in deletable or (name in describable and known.get(name) is None):
                kept_names.append(name)  # an unknown topic it may describe: told so
            else:
                refused.append(DeleteTopicResult(name, error_code=(
                    ErrorCode.topic_authorization_failed)))
        kept_ids = []
        for topic_id in ids:
            found = named_ids.get(topic_id)
            if found is None or found in deletable:
                kept_ids.append(topic_id)  # an unknown id: UNKNOWN_TOPIC_ID, as before
            else:
                refused.append(DeleteTopicResult(
                    found if found in describable else None, topic_id,
                    ErrorCode.topic_authorization_failed))
        return kept_names, kept_ids, refused

    async def create_partitions(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.CREATE_PARTITIONS, context.header.api_version)
        topics = [
            CreatePartitionsTopic(
                name=topic.name,
                count=topic.count,
                assignments=None if topic.assignments is None
                else tuple(tuple(a.broker_ids) for a in topic.assignments),
            )
            for topic in request.topics
        ]
        allowed = allowed_names(self.authorizer, context, Op.ALTER, TOPIC,
                                (topic.name for topic in topics))
        wanted = [topic for topic in topics if topic.name in allowed]
        results = [*(await self.controller.create_partitions(
            wanted, validate_only=request.validate_only) if wanted else ()),
            *(CreatePartitionsResult(topic.name, ErrorCode.topic_authorization_failed)
              for topic in topics if topic.name not in allowed)]
        return make(
            module.CreatePartitionsResponse,
            throttle_time=NO_THROTTLE,
            results=tuple(
                make(module.CreatePartitionsTopicResult, name=r.name, error_code=r.error_code,
                     error_message=r.error_message)
                for r in results
            ),
        )

    # -- configs ----------------------------------------------------------------------

    async def incremental_alter_configs(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, context.header.api_version)
        resources, rejected = [], []
        for resource in request.resources:
            refused = self._config_refusal(context, Op.ALTER_CONFIGS, resource.resource_type,
                                           resource.resource_name)
            if refused is not None:
                rejected.append(AlterConfigsResult(resource.resource_type,
                                                   resource.resource_name, refused, None))
                continue
            operations = [c.config_operation for c in resource.configs]
            if any(op not in _OPERATIONS for op in operations):
                rejected.append(AlterConfigsResult(
                    resource.resource_type, resource.resource_name, ErrorCode.invalid_request,
                    f"unknown config operation in {operations}"))
                continue
            refusal = _broker_keys_refusal(resource.resource_type, [
                c.name for c in resource.configs if c.config_operation != AlterConfigOp.DELETE])
            if refusal is not None:
                rejected.append(AlterConfigsResult(resource.resource_type,
                                                   resource.resource_name,
                                                   ErrorCode.invalid_request, refusal))
                continue
            resources.append(AlterConfigsResource(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(AlterableConfig(c.name, AlterConfigOp(c.config_operation), c.value)
                              for c in resource.configs),
            ))
        results = list(await self.controller.incremental_alter_configs(
            resources, validate_only=request.validate_only
        )) if resources else []
        return self._alter_response(module, module.IncrementalAlterConfigsResponse,
                                    results + rejected)

    async def alter_configs(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.ALTER_CONFIGS, context.header.api_version)
        resources, rejected = [], []
        for resource in request.resources:
            refused = self._config_refusal(context, Op.ALTER_CONFIGS, resource.resource_type,
                                           resource.resource_name)
            if refused is not None:
                rejected.append(AlterConfigsResult(resource.resource_type,
                                                   resource.resource_name, refused, None))
                continue
            refusal = _broker_keys_refusal(resource.resource_type,
                                           [c.name for c in resource.configs])
            if refusal is not None:
                rejected.append(AlterConfigsResult(resource.resource_type,
                                                   resource.resource_name,
                                                   ErrorCode.invalid_request, refusal))
                continue
            resources.append(LegacyAlterConfigsResource(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs={c.name: c.value for c in resource.configs},
            ))
        results = list(await self.controller.alter_configs(
            resources, validate_only=request.validate_only
        )) if resources else []
        return self._alter_response(module, module.AlterConfigsResponse, results + rejected)

    def _config_refusal(self, context: RequestContext, operation: AclOperation,
                        resource_type: int, name: str) -> ErrorCode | None:
        """The error for a config resource the principal may not `operation`, else None
        (a resource type without ACLs is left to the handler's own refusal)."""
        found = _CONFIG_RESOURCES.get(resource_type)
        if found is None:
            return None
        acl_type, named, error = found
        if allows(self.authorizer, context, operation, acl_type,
                  name if named else CLUSTER_NAME):
            return None
        return error

    @staticmethod
    def _alter_response(module: Any, response_type: Any,
                        results: Sequence[AlterConfigsResult]) -> Any:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            responses=tuple(
                make(module.AlterConfigsResourceResponse, error_code=r.error_code,
                     error_message=r.error_message, resource_type=r.resource_type,
                     resource_name=r.resource_name)
                for r in results
            ),
        )

    async def describe_configs(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.DESCRIBE_CONFIGS, context.header.api_version)
        synonyms = field(request, "include_synonyms", False)
        documentation = field(request, "include_documentation", False)
        results = []
        for resource in request.resources:
            keys = resource.configuration_keys
            try:
                refused = self._config_refusal(context, Op.DESCRIBE_CONFIGS,
                                               resource.resource_type, resource.resource_name)
                if refused is not None:
                    raise _DescribeError(refused, "")
                entries = self._describe_resource(resource.resource_type, resource.resource_name)
            except _DescribeError as error:
                results.append(make(module.DescribeConfigsResult, error_code=error.code,
                                    error_message=str(error) or None,
                                    resource_type=resource.resource_type,
                                    resource_name=resource.resource_name, configs=()))
                continue
            configs = tuple(
                _config_entry(module, entry, synonyms, documentation)
                for entry in entries if not keys or entry.name in keys
            )
            results.append(make(module.DescribeConfigsResult, error_code=ErrorCode.none,
                                error_message=None, resource_type=resource.resource_type,
                                resource_name=resource.resource_name, configs=configs))
        return make(module.DescribeConfigsResponse, throttle_time=NO_THROTTLE,
                    results=tuple(results))

    def _describe_resource(self, resource_type: int, name: str) -> list[_Entry]:
        image = self.cache.image
        if resource_type == ConfigResourceType.TOPIC:
            if image.topics.by_name.get(name) is None:
                raise _DescribeError(ErrorCode.unknown_topic_or_partition,
                                     f"Topic {name} does not exist")
            overrides = image.configs.get(ConfigResourceType.TOPIC, name)
            layers = self._broker_layers(per_broker=True)
            merged = _merged(layers[:-1])  # what the replica manager resolves the log with
            return [_topic_entry(definition, overrides, layers, merged)
                    for definition in log_config.TOPIC_CONFIGS.values()
                    if not definition.internal]
        if resource_type == ConfigResourceType.BROKER:
            if name not in ("", str(self.node_id)):
                raise _DescribeError(ErrorCode.invalid_request,
                                     f"Unexpected broker id, expected {self.node_id} or empty "
                                     f"string, but received {name}")
            return self._broker_entries(per_broker=name != "")
        if resource_type == ConfigResourceType.GROUP:  # KIP-848 group configs (group area)
            if not name:
                raise _DescribeError(ErrorCode.invalid_request, "Group name must not be empty")
            values = group_config_values(self.server_configs, image.configs.get(
                ConfigResourceType.GROUP, name))
            return [_Entry(key, value, False, int(ConfigSource.GROUP_CONFIG if is_set
                                                  else ConfigSource.DEFAULT_CONFIG),
                           False, 3, GROUP_CONFIGS[key].documentation)  # 3: INT
                    for key, (value, is_set) in values.items()]
        raise _DescribeError(ErrorCode.invalid_request,
                             f"unsupported config resource type {resource_type}")

    def _broker_layers(self, *, per_broker: bool) -> list[tuple[Mapping[str, str], int]]:
        """This broker's config layers, highest precedence first, with their sources."""
        image_configs = self.cache.image.configs
        layers: list[tuple[Mapping[str, str], int]] = []
        if per_broker:
            layers.append((image_configs.get(ConfigResourceType.BROKER, str(self.node_id)),
                           int(ConfigSource.DYNAMIC_BROKER_CONFIG)))
        layers.append((image_configs.get(ConfigResourceType.BROKER, ""),
                       int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)))
        layers.append((self.server_configs, int(ConfigSource.STATIC_BROKER_CONFIG)))
        layers.append((_server_defaults(), int(ConfigSource.DEFAULT_CONFIG)))
        return layers

    def _broker_entries(self, *, per_broker: bool) -> list[_Entry]:
        """Kafka's createBrokerConfigEntry: this broker's every config (or, for the cluster
        default resource "", the keys set there), sourced and with synonyms by precedence."""
        from pykraft.server.config import SERVER_KEYS
        from pykraft.server.kafka_keys import KAFKA_KEYS

        layers = self._broker_layers(per_broker=per_broker)
        if per_broker:
            names = set(SERVER_KEYS) | set(DYNAMIC_BROKER_CONFIGS) | set(_server_defaults())
            for layer, _ in layers[:-1]:
                names |= set(layer)
        else:
            names = set(layers[0][0])
        entries = []
        for name in sorted(names):
            config_type = _broker_config_type(name, SERVER_KEYS, KAFKA_KEYS)
            # a key of no known type may hold a secret (a plugin's): Kafka hides its value
            sensitive = config_type in (None, "password")
            value = next((layer[name] for layer, _ in layers if name in layer), None)
            synonyms = _synonyms(name, layers)
            if not per_broker:
                synonyms = [s for s in synonyms
                            if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            if sensitive:
                value, synonyms = None, [(n, None, source) for n, _, source in synonyms]
            source = synonyms[0][2] if synonyms else int(ConfigSource.DEFAULT_CONFIG)
            entries.append(_Entry(name, value, name not in DYNAMIC_UPDATABLE_BROKER_KEYS,
                                  source, sensitive, _CONFIG_TYPES.get(config_type or "", 0),
                                  None, tuple(synonyms)))
        return entries

    # -- client quotas (KIP-546) ------------------------------------------------------

    async def describe_client_quotas(self, context: RequestContext, request: Any) -> Any:
        """DescribeClientQuotas, answered from this broker's metadata image."""
        module = response_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, context.header.api_version)
        if not allows_cluster(self.authorizer, context, Op.DESCRIBE_CONFIGS):
            return refusal(ApiKey.DESCRIBE_CLIENT_QUOTAS, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        components = [quotas.FilterComponent(c.entity_type, c.match_type, c.match)
                      for c in request.components]
        try:
            found = quotas.describe_client_quotas(self.cache.image.client_quotas.entities,
                                                  components, strict=request.strict)
        except quotas.DescribeQuotasError as error:
            return make(module.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE,
                        error_code=error.code, error_message=str(error), entries=None)
        return make(
            module.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none, error_message=None,
            entries=tuple(
                make(module.EntryData,
                     entity=tuple(module.EntityData(entity_type=kind, entity_name=name)
                                  for kind, name in entity),
                     values=tuple(make(module.ValueData, key=key, value=value)
                                  for key, value in sorted(values.items())))
                for entity, values in found))

    async def alter_client_quotas(self, context: RequestContext, request: Any) -> Any:
        """AlterClientQuotas, decided by the active controller."""
        module = response_module(ApiKey.ALTER_CLIENT_QUOTAS, context.header.api_version)
        alterations = [
            quotas.ClientQuotaAlteration(
                entity=tuple((e.entity_type, e.entity_name) for e in entry.entity),
                ops=tuple((op.key, None if op.remove else float(op.value))
                          for op in entry.ops))
            for entry in request.entries
        ]
        if not allows_cluster(self.authorizer, context, Op.ALTER_CONFIGS):
            results: Sequence[quotas.ClientQuotaResult] = [quotas.ClientQuotaResult(
                each.entity, ErrorCode.cluster_authorization_failed, None)
                for each in alterations]
        else:
            results = await self.controller.alter_client_quotas(
                alterations, validate_only=bool(request.validate_only)) if alterations else ()
        return make(
            module.AlterClientQuotasResponse, throttle_time=NO_THROTTLE,
            entries=tuple(
                make(module.EntryData, error_code=r.error_code, error_message=r.error_message,
                     entity=tuple(module.EntityData(entity_type=kind, entity_name=name)
                                  for kind, name in r.entity))
                for r in results))

    # -- leadership ---------------------------------------------------------------------

    async def elect_leaders(self, context: RequestContext, request: Any) -> Any:
        """ElectLeaders (KIP-460), decided by the active controller; v0 means PREFERRED."""
        module = response_module(ApiKey.ELECT_LEADERS, context.header.api_version)
        wanted: dict[str, list[int]] | None = None
        if request.topic_partitions is not None:
            wanted = {}
            for topic in request.topic_partitions:
                ids = wanted.setdefault(topic.topic, [])
                ids.extend(p for p in topic.partitions if p not in ids)
        raw_type = int(field(request, "election_type", ElectionType.PREFERRED))
        if not allows_cluster(self.authorizer, context, Op.ALTER):
            results: Sequence[TopicElectionResult] = [
                TopicElectionResult(name, tuple(
                    PartitionElectionResult(i, ErrorCode.cluster_authorization_failed, None)
                    for i in ids))
                for name, ids in (wanted or {}).items()]
            error = ErrorCode.cluster_authorization_failed
        elif raw_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
            message = f"Unknown election type {raw_type}"
            results = [
                TopicElectionResult(name, tuple(
                    PartitionElectionResult(i, ErrorCode.invalid_request, message)
                    for i in ids))
                for name, ids in (wanted or {}).items()]
            error = ErrorCode.invalid_request
        else:
            error, results = await self.controller.elect_leaders(
                ElectionType(raw_type), wanted)
        return make(
            module.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=error,
            replica_election_results=tuple(
                make(module.ReplicaElectionResult, topic=r.topic, partition_result=tuple(
                    make(module.PartitionResult, partition_id=p.partition_id,
                         error_code=p.error_code, error_message=p.error_message)
                    for p in r.partitions))
                for r in results))

    async def alter_partition_reassignments(self, context: RequestContext, request: Any) -> Any:
        """AlterPartitionReassignments (KIP-455), decided by the active controller."""
        if not allows_cluster(self.authorizer, context, Op.ALTER):
            return refusal(ApiKey.ALTER_PARTITION_REASSIGNMENTS, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        module = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                                 context.header.api_version)
        allow = bool(field(request, "allow_replication_factor_change", True))
        topics = [
            ReassignableTopic(t.name, tuple(
                ReassignablePartition(p.partition_index,
                                      None if p.replicas is None else tuple(p.replicas))
                for p in t.partitions))
            for t in request.topics
        ]
        results = await self.controller.alter_partition_reassignments(
            topics, allow_replication_factor_change=allow)
        return make(
            module.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
            allow_replication_factor_change=allow, error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(
                make(module.ReassignableTopicResponse, name=r.name, partitions=tuple(
                    make(module.ReassignablePartitionResponse,
                         partition_index=p.partition_index, error_code=p.error_code,
                         error_message=p.error_message)
                    for p in r.partitions))
                for r in results))

    async def list_partition_reassignments(self, context: RequestContext, request: Any) -> Any:
        if not allows_cluster(self.authorizer, context, Op.DESCRIBE):
            return refusal(ApiKey.LIST_PARTITION_REASSIGNMENTS, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        module = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                 context.header.api_version)
        wanted = None if request.topics is None else {
            t.name: list(t.partition_indexes) for t in request.topics}
        error, listed = await self.controller.list_partition_reassignments(wanted)
        return make(
            module.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
            error_code=error, error_message=None,
            topics=tuple(
                make(module.OngoingTopicReassignment, name=t.name, partitions=tuple(
                    make(module.OngoingPartitionReassignment,
                         partition_index=p.partition_index, replicas=p.replicas,
                         adding_replicas=p.adding_replicas,
                         removing_replicas=p.removing_replicas)
                    for p in t.partitions))
                for t in listed))

    # -- cluster and quorum -----------------------------------------------------------

    async def describe_cluster(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.DESCRIBE_CLUSTER, context.header.api_version)
        if not self.clients_listener and not allows_cluster(self.authorizer, context,
                                                            Op.ALTER):
            # a controller tells its quorum only to admins (ControllerApis: ALTER)
            return refusal(ApiKey.DESCRIBE_CLUSTER, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        # KIP-430: the principal's cluster operations; the sentinel unasked
        cluster_ops = operations_if(bool(request.include_cluster_authorized_operations),
                                    self.authorizer, context, ResourceType.CLUSTER,
                                    CLUSTER_NAME, CLUSTER_SUPPORTED)
        if field(request, "endpoint_type", 1) == 2 and not self.clients_listener:
            return self._describe_controllers(module, cluster_ops)
        if field(request, "endpoint_type", 1) != 1:
            return make(module.DescribeClusterResponse, throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.unsupported_endpoint_type,
                        error_message="only broker endpoints are described",
                        cluster_id=self.cache.cluster_id, brokers=())
        brokers = self.cache.live_brokers(context.listener_name)
        fenced = (self.cache.fenced_brokers(context.listener_name)
                  if field(request, "include_fenced_brokers", False) else [])
        described = sorted([(broker, False) for broker in brokers]
                           + [(broker, True) for broker in fenced])
        return make(
            module.DescribeClusterResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            endpoint_type=1,
            cluster_id=self.cache.cluster_id,
            controller_id=self.cache.controller_id(brokers),
            cluster_authorized_operations=cluster_ops,
            brokers=tuple(make(module.DescribeClusterBroker, broker_id=i, host=h, port=p, rack=r,
                               is_fenced=is_fenced)
                          for (i, h, p, r), is_fenced in described),
        )

    def _describe_controllers(self, module: Any, cluster_ops: int) -> Any:
        """KIP-919: a controller listener describes the controllers (the quorum's voters, at
        their controller endpoints) and which one is active (-1: none now), so an admin
        client bootstrapped from any controller finds the active one."""
        from pykraft.server.config import parse_voters  # server imports the broker side

        quorum = self.quorum.describe_quorum()
        voters = parse_voters(self.server_configs.get("controller.quorum.voters", ""))
        if not voters:  # a quorum formatted with its voters: the leader knows their endpoints
            voters = {voter: (host, port) for voter, endpoints in quorum.get("nodes", {}).items()
                      for _, host, port in endpoints[:1]}
        return make(
            module.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
            error_message=None, endpoint_type=2, cluster_id=self.cache.cluster_id,
            controller_id=max(-1, int(quorum.get("leader_id", -1))),
            cluster_authorized_operations=cluster_ops,
            brokers=tuple(make(module.DescribeClusterBroker, broker_id=voter, host=host,
                               port=port, rack=None, is_fenced=False)  # v2+
                          for voter, (host, port) in sorted(voters.items())))

    async def unregister_broker(self, context: RequestContext, request: Any) -> Any:
        if not allows_cluster(self.authorizer, context, Op.ALTER):
            return refusal(ApiKey.UNREGISTER_BROKER, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        module = response_module(ApiKey.UNREGISTER_BROKER, context.header.api_version)
        code, message = await self.controller.unregister_broker(request.broker_id)
        return make(module.UnregisterBrokerResponse, throttle_time=NO_THROTTLE,
                    error_code=code, error_message=message)

    async def update_features(self, context: RequestContext, request: Any) -> Any:
        """UpdateFeatures (KIP-584): as Kafka 3.9+, the request succeeds or fails as a whole;
        v0-v1 list each feature with NONE on success, v2 has no per-feature results."""
        if not allows_cluster(self.authorizer, context, Op.ALTER):
            return refusal(ApiKey.UPDATE_FEATURES, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        version = context.header.api_version
        module = response_module(ApiKey.UPDATE_FEATURES, version)
        updates = [
            FeatureUpdate(
                update.feature, update.max_version_level,
                UpgradeType.from_code(update.upgrade_type) if version >= 1
                else UpgradeType.SAFE_DOWNGRADE if update.allow_downgrade
                else UpgradeType.UPGRADE)
            for update in request.feature_updates
        ]
        result = await self.controller.update_features(
            updates, validate_only=bool(field(request, "validate_only", False)))
        results: tuple[Any, ...] = ()
        if result.error_code == ErrorCode.none and version <= 1:
            names = dict.fromkeys(update.feature for update in updates)
            results = tuple(make(module.UpdatableFeatureResult, feature=name,
                                 error_code=ErrorCode.none, error_message=None)
                            for name in names)
        return make(module.UpdateFeaturesResponse, throttle_time=NO_THROTTLE,
                    error_code=result.error_code, error_message=result.error_message,
                    results=results)

    async def describe_quorum(self, context: RequestContext, request: Any) -> Any:
        if not allows_cluster(self.authorizer, context, Op.DESCRIBE):
            return refusal(ApiKey.DESCRIBE_QUORUM, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        module = response_module(ApiKey.DESCRIBE_QUORUM, context.header.api_version)
        state = self.quorum.describe_quorum()
        error = state.get("error_code", ErrorCode.none)
        if error != ErrorCode.none and self.forward_describe_quorum is not None:
            answer = await self.forward_describe_quorum(context.header.api_version, request)
            if answer is not None:
                return answer
        topics = []
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                if topic.topic_name != "__cluster_metadata" or wanted.partition_index != 0:
                    partitions.append(make(
                        module.PartitionData, partition_index=wanted.partition_index,
                        error_code=ErrorCode.unknown_topic_or_partition, error_message=None,
                        leader_id=-1, leader_epoch=-1, high_watermark=-1,
                        current_voters=(), observers=()))
                    continue
                if error != ErrorCode.none:  # not the leader: where it is, nothing more
                    partitions.append(make(
                        module.PartitionData, partition_index=0, error_code=error,
                        error_message=f"node {self.node_id} does not lead the metadata quorum",
                        leader_id=state["leader_id"], leader_epoch=state["leader_epoch"],
                        high_watermark=-1, current_voters=(), observers=()))
                    continue
                partitions.append(make(
                    module.PartitionData, partition_index=0, error_code=ErrorCode.none,
                    error_message=None, leader_id=state["leader_id"],
                    leader_epoch=state["leader_epoch"], high_watermark=state["high_watermark"],
                    current_voters=tuple(_replica(module, r) for r in state["voters"]),
                    observers=tuple(_replica(module, r) for r in state["observers"])))
            topics.append(make(module.TopicData, topic_name=topic.topic_name,
                               partitions=tuple(partitions)))
        nodes = tuple(
            make(module.Node, node_id=node_id,
                 listeners=tuple(make(module.Listener, name=n, host=h, port=p)
                                 for n, h, p in listeners))
            for node_id, listeners in state.get("nodes", {}).items()
        ) if hasattr(module, "Node") and error == ErrorCode.none else ()
        return make(module.DescribeQuorumResponse, error_code=ErrorCode.none,
                    error_message=None, topics=tuple(topics), nodes=nodes)


class _DescribeError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Entry:
    __slots__ = ("name", "value", "read_only", "source", "sensitive", "type", "doc", "synonyms")

    def __init__(self, name: str, value: str | None, read_only: bool, source: int,
                 sensitive: bool, config_type: int, doc: str | None,
                 synonyms: tuple[tuple[str, str | None, int], ...] | None = None) -> None:
        """`synonyms`: (name, value, source) by precedence; None gives the entry itself, as
        its only synonym unless it is a default (group configs)."""
        self.name, self.value, self.read_only, self.source = name, value, read_only, source
        self.sensitive, self.type, self.doc = sensitive, config_type, doc
        if synonyms is None:
            synonyms = () if source == ConfigSource.DEFAULT_CONFIG else ((name, value, source),)
        self.synonyms = synonyms


def _config_entry(module: Any, entry: _Entry, synonyms: bool, documentation: bool) -> Any:
    synonym_list: tuple[Any, ...] = ()
    if synonyms:
        synonym_list = tuple(make(module.DescribeConfigsSynonym, name=name, value=value,
                                  source=source)
                             for name, value, source in entry.synonyms)
    return make(
        module.DescribeConfigsResourceResult,
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_default=entry.source == ConfigSource.DEFAULT_CONFIG,
        is_sensitive=entry.sensitive,
        synonyms=synonym_list,
        config_type=entry.type,
        documentation=entry.doc if documentation else None,
    )


def _topic_entry(definition: Any, overrides: Mapping[str, str],
                 layers: Sequence[tuple[Mapping[str, str], int]],
                 merged: Mapping[str, str]) -> _Entry:
    """Kafka's createTopicConfigEntry: the topic's override, then the synonyms of the server
    key it defaults to, layer by layer; the value is what the log runs with (`merged`: the
    broker's layers overlaid)."""
    sensitive = definition.type == "password"
    synonyms: list[tuple[str, str | None, int]] = []
    value: str | None
    if definition.name in overrides:
        value = overrides[definition.name]
        synonyms.append((definition.name, value, int(ConfigSource.DYNAMIC_TOPIC_CONFIG)))
    else:
        value, _ = log_config.server_default(definition.name, merged)
    if definition.server_key is not None:
        synonyms += _synonyms(definition.server_key, layers)
    if sensitive:
        value, synonyms = None, [(name, None, source) for name, _, source in synonyms]
    source = synonyms[0][2] if synonyms else int(ConfigSource.DEFAULT_CONFIG)
    return _Entry(definition.name, value, False, source, sensitive,
                  definition.describe_type, definition.documentation, tuple(synonyms))


def _synonyms(name: str, layers: Sequence[tuple[Mapping[str, str], int]]
              ) -> list[tuple[str, str | None, int]]:
    """Kafka's ConfigHelper.configSynonyms: layer by layer, the keys that set `name`
    (log.retention.ms, .minutes, .hours), from the first that is `name` itself. Kafka's
    quirk kept: an unset finer key lists no coarser one (retention.ms shows no synonym and
    DEFAULT_CONFIG when only log.retention.hours is set)."""
    found: list[tuple[str, str | None, int]] = [
        (synonym, layer[synonym], source) for layer, source in layers
        for synonym in broker_config_synonyms(name) if synonym in layer]
    while found and found[0][0] != name:
        found.pop(0)
    return found


def _merged(layers: Sequence[tuple[Mapping[str, str], int]]) -> dict[str, str]:
    """Layers (highest first) as one configuration, as Kafka overlays them."""
    merged: dict[str, str] = {}
    for layer, _ in reversed(layers):
        merged.update(layer)
    return merged


_DEFAULTS: dict[str, str] = {}


def _server_defaults() -> Mapping[str, str]:
    """Kafka's default of each broker key that has one (its staticDefaultConfigs)."""
    if not _DEFAULTS:
        from pykraft.server.config import SERVER_KEYS

        _DEFAULTS.update(broker_default_values())
        _DEFAULTS.update({name: key.default for name, key in SERVER_KEYS.items()
                          if key.default is not None})
        _DEFAULTS.update({name: definition.default
                          for name, definition in DYNAMIC_BROKER_CONFIGS.items()
                          if definition.default is not None and definition.topic_key is None
                          and name not in _DEFAULTS})  # log.*: broker_default_values
    return _DEFAULTS


def _broker_config_type(name: str, server_keys: Mapping[str, Any],
                        kafka_keys: Mapping[str, Any]) -> str | None:
    for table in (server_keys, DYNAMIC_BROKER_CONFIGS, kafka_keys):
        key = table.get(name)
        if key is not None:
            return str(key.type)
    return None


def _broker_keys_refusal(resource_type: int, keys: Sequence[str]) -> str | None:
    """Kafka's DynamicBrokerConfig.validateConfigs on the keys a BROKER change sets: a
    read-only key of Kafka's broker configuration, or an SSL key without its listener
    prefix, is refused (INVALID_REQUEST, as Kafka's ConfigAdminManager answers)."""
    if resource_type != ConfigResourceType.BROKER:
        return None
    from pykraft.server.config import SERVER_KEYS
    from pykraft.server.kafka_keys import KAFKA_KEYS

    read_only = {key for key in keys if (key in KAFKA_KEYS or key in SERVER_KEYS)
                 and key not in DYNAMIC_UPDATABLE_BROKER_KEYS}
    if read_only:
        return "Cannot update these configs dynamically: " + scala_set(read_only)
    bare = {key for key in keys if key in LISTENER_ONLY_SECURITY_KEYS}
    if bare:
        return ("These security configs can be dynamically updated only per-listener using "
                "the listener prefix: " + scala_set(bare))
    return None


def _replica(module: Any, replica: Mapping[str, int]) -> Any:
    return make(module.ReplicaState, replica_id=replica["replica_id"],
                replica_directory_id=None, log_end_offset=replica["log_end_offset"],
                last_fetch_timestamp=replica.get("last_fetch_timestamp", -1),
                last_caught_up_timestamp=replica.get("last_caught_up_timestamp", -1))



class UnenforcedQuotaNotice:
    """A metadata publisher: the first time this broker sees a client quota set, it says once
    (INFO) that it stores quotas without enforcing them, so an operator is not misled."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.said = False

    def publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if self.said or not image.client_quotas.entities:
            return
        self.said = True
        entity, values = next(iter(image.client_quotas.entities.items()))
        logging.getLogger(__name__).info(
            "broker %d: client quotas are set (e.g. %s for %s) but not enforced: pykraft "
            "stores and describes them and throttles no client (docs/deviations.md)",
            self.node_id, ", ".join(sorted(values)), quotas.entity_text(entity))
