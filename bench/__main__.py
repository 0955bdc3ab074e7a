"""``python -m bench``: the embedded-broker throughput benchmark;
``python -m bench kafka``: the same workloads on a Kafka-protocol broker."""
import sys

from .embedded_throughput import main

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "kafka":
        from .kafka_throughput import main as kafka_main

        kafka_main(sys.argv[2:])
    else:
        main()
