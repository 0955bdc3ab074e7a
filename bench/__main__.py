"""``python -m bench``: the embedded-broker throughput benchmark;
``python -m bench kafka``: the same workloads on a Kafka-protocol broker;
``python -m bench joins``: stream-table and stream-stream joins on the embedded broker;
``python -m bench sinks``: Parquet/JSON-lines archives and SQLite upserts on the embedded broker;
``python -m bench spark``: a windowed count replayed on Spark local[2] vs the streaming runtime."""
import sys

from .embedded_throughput import main

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "kafka":
        from .kafka_throughput import main as kafka_main

        kafka_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "joins":
        from .join_throughput import main as joins_main

        joins_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "sinks":
        from .sink_throughput import main as sinks_main

        sinks_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "spark":
        from .spark_replay import main as spark_main

        spark_main(sys.argv[2:])
    else:
        main()
