"""Reading a group's committed offsets from OffsetFetch answers (streamkit/transport/kafka/
consumer.py): a coordinator that is loading the group answers OffsetFetch v2+ with a
group-level error and no partitions, which must never read as "nothing committed" (a task
would restart from the beginning of its input on top of its restored state)."""
from __future__ import annotations

import aiokafka.errors as errors
import pytest
from aiokafka.protocol.commit import OffsetFetchResponse_v2, OffsetFetchResponse_v3

from streamkit.transport.base import TopicPartition
from streamkit.transport.kafka.consumer import _committed_in

ASKED = [TopicPartition("app-repartition", 0), TopicPartition("app-repartition", 1)]


def test_committed_offsets_and_metadata_are_read() -> None:
    answer = OffsetFetchResponse_v3(0, [("app-repartition", [(0, 11353, "note", 0), (1, -1, "", 0)])], 0)
    assert _committed_in(answer, ASKED) == {ASKED[0]: (11353, "note")}


@pytest.mark.parametrize("code, error", [(14, errors.GroupLoadInProgressError),
                                         (16, errors.NotCoordinatorForGroupError)])
def test_a_group_level_error_is_raised_not_read_as_no_commit(code: int, error: type) -> None:
    answer = OffsetFetchResponse_v2([], code)  # what Kafka sends while its coordinator loads the group
    with pytest.raises(error):
        _committed_in(answer, ASKED)
    assert error.retriable


def test_an_answer_leaving_out_a_partition_is_retried() -> None:
    answer = OffsetFetchResponse_v2([("app-repartition", [(0, 7, "", 0)])], 0)
    with pytest.raises(errors.GroupLoadInProgressError, match=r"app-repartition\[1\]"):
        _committed_in(answer, ASKED)
