"""``python -m bench``: streamkit against faust-streaming, Quix Streams and the raw aiokafka
loop (``bench.peers``; ``--help`` for its options). The focused benchmarks:

``python -m bench embedded``: the embedded-broker throughput scenarios;
``python -m bench kafka``: those workloads on a Kafka-protocol broker;
``python -m bench joins``: stream-table and stream-stream joins on the embedded broker;
``python -m bench sinks``: Parquet/JSON-lines archives and SQLite upserts on the embedded broker;
``python -m bench spark``: a windowed count replayed on Spark local[2] vs the streaming runtime;
``python -m bench scaling``: S1 and S2 on the embedded broker with one worker process, then two."""
import importlib
import sys

FOCUSED = {"embedded": "bench.embedded_throughput", "kafka": "bench.kafka_throughput",
           "joins": "bench.join_throughput", "sinks": "bench.sink_throughput", "spark": "bench.spark_replay",
           "scaling": "bench.scaling"}

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in FOCUSED:
        importlib.import_module(FOCUSED[sys.argv[1]]).main(sys.argv[2:])
    else:
        from bench.peers.main import main

        sys.exit(main())
