"""Topic and consumer-group administration on Kafka, behind the synchronous Admin interface."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.errors import (CommitFailedError, GroupAuthorizationFailedError, IncompatibleBrokerVersion,
                             GroupIdNotFound, InvalidPartitionsError, KafkaConnectionError, KafkaError,
                             NonEmptyGroup,
                             OffsetOutOfRangeError, TopicAlreadyExistsError,
                             TopicAuthorizationFailedError, UnknownTopicOrPartitionError,
                             NodeNotReadyError, RequestTimedOutError, UnsupportedVersionError, for_code)

from ...errors import BrokerUnavailableError, ConfigError, StreamkitError
from ..base import Admin, PartitionOffsets, TopicMetadata, TopicPartition
from .config import KafkaClientConfig
from .connect import authorization_error, quietly, refused, start_with_retry
from .no_auto_create import no_topic_auto_creation
from .loop_thread import BackgroundLoop

log = logging.getLogger(__name__)

_REQUEST_TIMEOUT = 60.0  # s: an admin call that takes longer is reported as a failure
MAX_REPLICATION_FACTOR = 3


class KafkaAdmin(Admin):
    """Admin calls on a private event loop, so they can be made from any synchronous code."""

    def __init__(self, config: KafkaClientConfig) -> None:
        self._config = config
        self._servers = ",".join(config.bootstrap_servers)
        self._loop = BackgroundLoop("streamkit-kafka-admin")
        self._client: Optional[AIOKafkaAdminClient] = None
        self._offsets: Optional[AIOKafkaConsumer] = None
        self._replication_factor: Optional[int] = config.replication_factor
        self._cannot_delete_records: Optional[str] = None
        """Why the brokers cannot delete records (DeleteRecords), once we know they cannot."""

    # -- connection ---------------------------------------------------------------
    def connect(self) -> None:
        """Reach the cluster, retrying for ``connect_timeout_s``; a clear error after that."""
        self._call(self._connect())

    async def _connect(self) -> None:
        if self._client is not None:
            return
        async def start() -> None:
            # a fresh one per attempt
            client = no_topic_auto_creation(AIOKafkaAdminClient(**self._config.admin_kwargs()))
            try:
                await client.start()
            except KafkaConnectionError:
                await quietly(client.close())
                raise
            self._client = client
        await start_with_retry(start, self._servers, self._config.connect_timeout_s, "admin", self._config)
        assert self._client is not None
        self._offsets = no_topic_auto_creation(AIOKafkaConsumer(
            **self._config.consumer_kwargs(), enable_auto_commit=False, isolation_level="read_uncommitted"))
        await self._offsets.start()

    def _call(self, coro) -> Any:
        try:
            return self._loop.run(coro, timeout=_REQUEST_TIMEOUT)
        except TimeoutError:
            raise BrokerUnavailableError(f"Kafka at {self._servers} did not answer within "
                                         f"{_REQUEST_TIMEOUT:g} s") from None

    async def _admin(self) -> AIOKafkaAdminClient:
        await self._connect()
        assert self._client is not None
        return self._client

    # -- topics -------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, config: Optional[Mapping[str, str]] = None,
                     *, exist_ok: bool = False) -> TopicMetadata:
        return self._call(self._create_topic(name, partitions, dict(config or {}), exist_ok))

    async def _create_topic(self, name: str, partitions: int, config: Dict[str, str],
                            exist_ok: bool) -> TopicMetadata:
        admin = await self._admin()
        replication = await self._pick_replication_factor()
        response = await admin.create_topics([NewTopic(name, partitions, replication, topic_configs=config)])
        for entry in response.topic_errors:
            topic, code = entry[0], entry[1]
            message = entry[2] if len(entry) > 2 else None
            if code == 0:
                continue
            error = for_code(code)
            if error is TopicAlreadyExistsError:
                if not exist_ok:
                    raise ConfigError(f"topic '{topic}' already exists on {self._servers}")
                break
            if error is TopicAuthorizationFailedError:
                raise refused(self._config, "topic", f"to create topic '{topic}' (CREATE)", message or error.__name__)
            raise StreamkitError(f"creating topic '{topic}' ({partitions} partition(s), replication "
                                 f"{replication}, config {config}) on {self._servers} failed: "
                                 f"{error.__name__}: {message or ''}".rstrip(": "))
        meta = await self._wait_for_topic(name)
        if meta is None:
            raise StreamkitError(f"topic '{name}' was created on {self._servers} but its metadata "
                                 "did not appear")
        return meta

    async def _wait_for_topic(self, name: str) -> Optional[TopicMetadata]:
        # Topic creation is asynchronous in Kafka: metadata can lag the response.
        for _ in range(50):
            meta = await self._topic(name)
            if meta is not None and meta.partitions > 0:
                return meta
            await asyncio.sleep(0.1)
        return None

    async def _pick_replication_factor(self) -> int:
        if self._replication_factor is None:
            admin = await self._admin()
            try:
                brokers = len((await admin.describe_cluster()).get("brokers", ())) or 1
            except KafkaError:
                brokers = 1
            self._replication_factor = min(MAX_REPLICATION_FACTOR, brokers)
        return self._replication_factor

    def delete_topic(self, name: str) -> None:
        self._call(self._delete_topic(name))

    async def _delete_topic(self, name: str) -> None:
        admin = await self._admin()
        response = await admin.delete_topics([name])
        for entry in response.topic_error_codes:
            if entry[1] != 0:
                error = for_code(entry[1])
                raise StreamkitError(f"deleting topic '{entry[0]}' on {self._servers} failed: {error.__name__}")

    def topic(self, name: str) -> Optional[TopicMetadata]:
        return self._call(self._topic(name))

    async def _topic(self, name: str) -> Optional[TopicMetadata]:
        admin = await self._admin()
        # A plain metadata request would make brokers with auto.create.topics.enable create it.
        response = await admin._send_request(MetadataRequest([name], allow_auto_topic_creation=False))
        for entry in response.to_object()["topics"]:
            if entry.get("topic") != name:
                continue
            self._check_described(entry)
            if entry.get("error_code", 0) != 0 or not entry.get("partitions"):
                return None
            return TopicMetadata(name, len(entry["partitions"]), await self._topic_config(name))
        return None

    def partition_counts(self, topics: Sequence[str]) -> Dict[str, Optional[int]]:
        return self._call(self._partition_counts(list(topics)))

    async def _partition_counts(self, topics: List[str]) -> Dict[str, Optional[int]]:
        """Retries while the broker cannot be reached, for at most ``connect_timeout_s``: a
        running worker checks its topics periodically, and a short network outage must not
        stop it (its clients ride the outage out)."""
        admin = await self._admin()
        request = MetadataRequest(topics, allow_auto_topic_creation=False)
        deadline = asyncio.get_running_loop().time() + self._config.connect_timeout_s
        while True:
            try:
                response = await admin._send_request(request)
                break
            except (NodeNotReadyError, KafkaConnectionError, RequestTimedOutError) as exc:
                if asyncio.get_running_loop().time() >= deadline:
                    raise BrokerUnavailableError(
                        f"Kafka at {self._servers} unreachable for {self._config.connect_timeout_s:g} s while "
                        f"checking topics {', '.join(topics)}: {type(exc).__name__}: {exc}") from None
                log.info("checking topics: Kafka at %s not reachable (%s); retrying", self._servers,
                         type(exc).__name__)
                await asyncio.sleep(0.5)
        counts: Dict[str, Optional[int]] = {name: None for name in topics}
        for entry in response.to_object()["topics"]:
            self._check_described(entry)
            if entry.get("error_code", 0) == 0 and entry.get("partitions"):
                counts[entry["topic"]] = len(entry["partitions"])
        return counts

    def _check_described(self, entry: Mapping[str, Any]) -> None:
        """A metadata answer's topic entry: refused (no DESCRIBE, which READ and WRITE imply)
        is an AuthorizationError, not a missing topic (Kafka does not say whether it exists)."""
        if entry.get("error_code", 0) == TopicAuthorizationFailedError.errno:
            raise refused(self._config, "topic", f"to describe topic '{entry.get('topic')}' (DESCRIBE)",
                          "TOPIC_AUTHORIZATION_FAILED")

    async def _topic_config(self, name: str) -> Dict[str, str]:
        admin = await self._admin()
        try:
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        except KafkaError:
            return {}  # brokers that do not describe configs: report none
        config: Dict[str, str] = {}
        for response in responses:
            for resource in response.resources:
                # (error_code, error_message, type, name, config_entries)
                if resource[0] != 0:
                    log.info("configs of topic '%s' not readable (%s: %s; DESCRIBE_CONFIGS): reported as none",
                             name, for_code(resource[0]).__name__, resource[1] or "")
                for entry in resource[4]:
                    key, value, is_default = entry[0], entry[1], _is_default(entry)
                    if value is not None and not is_default:
                        config[key] = value
        return config

    def list_topics(self) -> List[TopicMetadata]:
        return self._call(self._list_topics())

    async def _list_topics(self) -> List[TopicMetadata]:
        admin = await self._admin()
        described = await admin.describe_topics(None)
        out = []
        for entry in described:
            if entry.get("error_code", 0) == 0 and not entry.get("is_internal", False) \
                    and not entry["topic"].startswith("__"):
                out.append(TopicMetadata(entry["topic"], len(entry["partitions"]), {}))
        return sorted(out, key=lambda m: m.name)

    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        return self._call(self._partition_offsets(topic, partition))

    async def _partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        await self._connect()
        assert self._offsets is not None
        tp = KafkaTopicPartition(topic, partition)
        try:
            start = (await self._offsets.beginning_offsets([tp]))[tp]
            end = (await self._offsets.end_offsets([tp]))[tp]
        except UnknownTopicOrPartitionError:
            raise StreamkitError(f"topic '{topic}' partition {partition} does not exist on {self._servers}") \
                from None
        return PartitionOffsets(start, end)

    # -- consumer groups ----------------------------------------------------------
    def list_groups(self) -> List[str]:
        return self._call(self._list_groups())

    async def _list_groups(self) -> List[str]:
        admin = await self._admin()
        return sorted(group[0] for group in await admin.list_consumer_groups())

    def committed_offsets(self, group: str) -> Dict[TopicPartition, int]:
        return self._call(self._committed_offsets(group))

    async def _committed_offsets(self, group: str) -> Dict[TopicPartition, int]:
        admin = await self._admin()
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        except GroupAuthorizationFailedError as exc:
            raise refused(self._config, "group", f"to describe group '{group}' (DESCRIBE)",
                          f"{type(exc).__name__}: {exc}") from None
        except (KafkaError, ValueError) as exc:
            # Some Kafka-compatible brokers answer the all-partitions OffsetFetch in a form
            # aiokafka cannot decode: ask partition by partition instead.
            log.debug("listing offsets of group %s failed (%s); asking per partition", group, exc)
            return await self._committed_offsets_per_partition(group)
        return {TopicPartition(tp.topic, tp.partition): meta.offset
                for tp, meta in offsets.items() if meta is not None and meta.offset >= 0}

    async def _committed_offsets_per_partition(self, group: str) -> Dict[TopicPartition, int]:
        from .consumer import committed_offsets

        partitions = [TopicPartition(meta.name, p) for meta in await self._list_topics()
                      for p in range(meta.partitions)]
        consumer = no_topic_auto_creation(AIOKafkaConsumer(**self._config.consumer_kwargs(), group_id=group,
                                                           enable_auto_commit=False))
        await consumer.start()
        try:
            return await committed_offsets(consumer, partitions)
        finally:
            await quietly(consumer.stop())

    def group_members(self, group: str) -> Optional[List[str]]:
        return self._call(self._group_members(group))

    async def _group_members(self, group: str) -> Optional[List[str]]:
        admin = await self._admin()
        try:
            responses = await admin.describe_consumer_groups([group])
        except (KafkaError, ValueError) as exc:
            log.debug("describing group %s failed: %s", group, exc)
            return None
        for response in responses:
            # DescribeGroups: (error_code, group_id, state, protocol_type, protocol, members, ...)
            for error_code, group_id, _state, _protocol_type, _protocol, members, *_ in response.groups:
                if group_id == group and error_code == 0:
                    return sorted(member[0] for member in members)
        return None

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._call(self._commit_offsets(group, dict(offsets)))

    def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._call(self._commit_offsets(group, dict(offsets)))

    async def _commit_offsets(self, group: str, offsets: Dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        # A consumer outside the group's membership (generation -1) may commit only
        # while the group has no active members, which is what a reset needs.
        consumer = no_topic_auto_creation(AIOKafkaConsumer(**self._config.consumer_kwargs(), group_id=group,
                                                           enable_auto_commit=False))
        await consumer.start()
        try:
            tps = {KafkaTopicPartition(tp.topic, tp.partition): offset for tp, offset in offsets.items()}
            consumer.assign(list(tps))
            await consumer.commit(tps)
        except CommitFailedError:
            raise StreamkitError(f"group '{group}' has active members on {self._servers}: stop its "
                                 "workers before changing its offsets") from None
        finally:
            await quietly(consumer.stop())

    def delete_group(self, group: str) -> None:
        """Delete ``group`` and its committed offsets, as ``kafka-consumer-groups --delete``:
        StreamkitError for an unknown group or one with live members (Kafka refuses it)."""
        self._call(self._delete_group(group))

    async def _delete_group(self, group: str) -> None:
        from .console_admin import delete_group

        code = await delete_group(await self._admin(), group)
        if code == 0:
            return
        error = for_code(code)
        if error is GroupAuthorizationFailedError:
            raise refused(self._config, "group", f"to delete group '{group}' (DELETE)", error.__name__)
        if error is GroupIdNotFound:
            raise StreamkitError(f"unknown group '{group}' on {self._servers}")
        if error is NonEmptyGroup:
            raise StreamkitError(f"group '{group}' has live members on {self._servers}: stop them before "
                                 "deleting the group")
        raise StreamkitError(f"deleting group '{group}' on {self._servers} failed: {error.__name__}")

    # -- topic configs and timestamps -----------------------------------------------
    def alter_topic_config(self, name: str, set_configs: Mapping[str, str],
                           delete_configs: Sequence[str] = ()) -> Dict[str, str]:
        """Set ``set_configs`` and remove ``delete_configs`` (back to the broker's default)
        on topic ``name``, leaving its other configs alone; return its configs after."""
        return self._call(self._alter_topic_config(name, dict(set_configs), list(delete_configs)))

    async def _alter_topic_config(self, name: str, set_configs: Dict[str, str],
                                  delete_configs: List[str]) -> Dict[str, str]:
        from .console_admin import alter_topic_config

        code, message = await alter_topic_config(await self._admin(), name, set_configs, delete_configs)
        if code != 0:
            error = for_code(code)
            what = ", ".join([f"{k}={v}" for k, v in set_configs.items()] + [f"-{k}" for k in delete_configs])
            if error is TopicAuthorizationFailedError or error.__name__ == "ClusterAuthorizationFailedError":
                raise refused(self._config, "topic", f"to alter configs of topic '{name}' (ALTER_CONFIGS)",
                              message or error.__name__)
            if error is UnknownTopicOrPartitionError:
                raise StreamkitError(f"unknown topic '{name}' on {self._servers}")
            raise ConfigError(f"topic '{name}' on {self._servers}: cannot change configs ({what}): "
                              f"{error.__name__}: {message or ''}".rstrip(": "))
        return await self._topic_config(name)

    def add_partitions(self, name: str, partitions: int) -> TopicMetadata:
        """Grow topic ``name`` to ``partitions`` partitions (CreatePartitions); nothing when it
        has that many already. ConfigError when it has more (Kafka never removes partitions)."""
        return self._call(self._add_partitions(name, partitions))

    async def _add_partitions(self, name: str, partitions: int) -> TopicMetadata:
        current = await self._topic(name)
        if current is None:
            raise StreamkitError(f"unknown topic '{name}' on {self._servers}")
        if current.partitions > partitions:
            raise ConfigError(f"topic '{name}' on {self._servers} has {current.partitions} partitions: "
                              f"it cannot shrink to {partitions}")
        if current.partitions < partitions:
            try:
                await (await self._admin()).create_partitions({name: NewPartitions(partitions)})
            except InvalidPartitionsError:
                pass  # grown meanwhile (by another mirror): checked below
            except KafkaError as exc:
                raise StreamkitError(f"adding partitions to topic '{name}' on {self._servers} (to "
                                     f"{partitions}) failed: {type(exc).__name__}: {exc}") from None
        for _ in range(50):  # the metadata can lag the response
            meta = await self._topic(name)
            if meta is not None and meta.partitions >= partitions:
                return meta
            await asyncio.sleep(0.1)
        raise StreamkitError(f"topic '{name}' on {self._servers} was grown to {partitions} partitions but "
                             "its metadata did not show them")

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> Optional[int]:
        """The earliest offset of a record whose timestamp is >= ``timestamp_ms`` (Kafka's
        ListOffsets by timestamp), None when there is none."""
        return self._call(self._offset_for_time(topic, partition, timestamp_ms))

    async def _offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> Optional[int]:
        await self._connect()
        assert self._offsets is not None
        tp = KafkaTopicPartition(topic, partition)
        found = (await self._offsets.offsets_for_times({tp: max(timestamp_ms, 0)})).get(tp)
        return None if found is None else found.offset

    # -- records ------------------------------------------------------------------
    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ValueError(f"topic '{tp.topic}' partition {tp.partition}: cannot delete records "
                                 f"below {offset!r}: give an offset >= 0")
        if offsets and self._cannot_delete_records is None:
            self._call(self._delete_records(dict(offsets)))

    async def _delete_records(self, offsets: Dict[TopicPartition, int]) -> None:
        admin = await self._admin()
        request = {KafkaTopicPartition(*tp): RecordsToDelete(offset) for tp, offset in offsets.items()}
        where = ", ".join(f"{tp.topic}[{tp.partition}] below {offset}" for tp, offset in sorted(offsets.items()))
        try:
            await admin.delete_records(request, timeout_ms=int(_REQUEST_TIMEOUT * 1000))
        except (IncompatibleBrokerVersion, UnsupportedVersionError) as exc:
            self._records_not_deletable(f"{type(exc).__name__}: {exc}")
        except KafkaConnectionError as exc:
            # Some Kafka-compatible brokers (Tansu) drop the connection on a DeleteRecords
            # they do not implement: if they still answer a metadata request, that was it.
            try:
                await self._partition_counts([next(iter(offsets)).topic])
            except KafkaError:
                raise BrokerUnavailableError(f"deleting records of {where} on {self._servers} failed: "
                                             f"{exc}") from None
            self._records_not_deletable(f"the broker closed the connection on DeleteRecords ({exc})")
        except OffsetOutOfRangeError:
            raise ValueError(f"cannot delete records of {where} on {self._servers}: an offset is past "
                             "its partition's end") from None
        except UnknownTopicOrPartitionError:
            raise StreamkitError(f"cannot delete records of {where} on {self._servers}: the topic or "
                                 "partition does not exist") from None
        except KafkaError as exc:
            refusal = authorization_error(exc, self._config, f"to delete records of {where} (DELETE)")
            if refusal is not None:
                raise refusal from None
            raise StreamkitError(f"deleting records of {where} on {self._servers} failed: "
                                 f"{type(exc).__name__}: {exc}") from None

    def _records_not_deletable(self, why: str) -> None:
        self._cannot_delete_records = why
        log.warning("Kafka at %s cannot delete records (DeleteRecords): %s; records of repartition topics "
                    "are kept (retention.ms=-1) and the topics grow until they are deleted", self._servers, why)

    def close(self) -> None:
        async def stop() -> None:
            if self._offsets is not None:
                await quietly(self._offsets.stop())
            if self._client is not None:
                await quietly(self._client.close())
        self._loop.close(stop())


def _is_default(entry: tuple) -> bool:
    # DescribeConfigs v0 carries is_default at index 3; v1+ a config_source at 3
    # (5 = DEFAULT_CONFIG, 4 = STATIC_BROKER_CONFIG).
    flag = entry[3] if len(entry) > 3 else False
    if isinstance(flag, bool):
        return flag
    return flag in (4, 5)

