"""Admin requests the console tools need that aiokafka's admin client lacks: changing
one topic config at a time (IncrementalAlterConfigs, as ``kafka-configs`` does) and
deleting a consumer group (DeleteGroups, as ``kafka-consumer-groups --delete`` does).

Both are sent with aiokafka's wire types; the callers in :mod:`.admin` turn the
answers into streamkit errors."""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple, TypeAlias

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import DeleteGroupsRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

TOPIC_RESOURCE = 2  # ConfigResource type of a topic
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


class IncrementalAlterConfigsResponse_v0(Response):
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("responses", Array(("error_code", Int16), ("error_message", String("utf-8")),
                            ("resource_type", Int8), ("resource_name", String("utf-8")))),
    )


class IncrementalAlterConfigsRequest_v0(RequestStruct):
    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = IncrementalAlterConfigsResponse_v0
    SCHEMA = Schema(
        ("resources", Array(("resource_type", Int8), ("resource_name", String("utf-8")),
                            ("configs", Array(("name", String("utf-8")), ("config_operation", Int8),
                                              ("value", String("utf-8")))))),
        ("validate_only", Boolean),
    )


IncrementalAlterConfigsRequestStruct: TypeAlias = IncrementalAlterConfigsRequest_v0


class IncrementalAlterConfigsRequest(Request[IncrementalAlterConfigsRequestStruct]):
    """Set or delete single configs of resources, leaving their other configs alone
    (the legacy AlterConfigs replaces a resource's whole config set)."""

    API_KEY = 44

    def __init__(self, resources: List[Any], validate_only: bool = False) -> None:
        self._resources = resources
        self._validate_only = validate_only

    def build(self, request_struct_class: type[IncrementalAlterConfigsRequestStruct]
              ) -> IncrementalAlterConfigsRequestStruct:
        return request_struct_class(self._resources, self._validate_only)


async def alter_topic_config(admin: AIOKafkaAdminClient, topic: str, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str]) -> Tuple[int, Optional[str]]:
    """Set ``set_configs`` and remove ``delete_configs`` (back to the broker's default) on
    ``topic``; return the answer's ``(error_code, error_message)``."""
    entries = [(name, SET, value) for name, value in set_configs.items()]
    entries += [(name, DELETE, None) for name in delete_configs]
    response = await admin._send_request(IncrementalAlterConfigsRequest([(TOPIC_RESOURCE, topic, entries)]))
    for error_code, error_message, _type, name in response.responses:
        if name == topic:
            return error_code, error_message
    return 0, None


async def delete_group(admin: AIOKafkaAdminClient, group: str) -> int:
    """Ask ``group``'s coordinator to delete it (its committed offsets); return the error
    code (0: deleted; GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, GROUP_AUTHORIZATION_FAILED ...)."""
    coordinator = await admin.find_coordinator(group)
    response = await admin._send_request_to_node(coordinator, DeleteGroupsRequest([group]))
    for group_id, error_code in response.results:
        if group_id == group:
            return error_code
    return 0
