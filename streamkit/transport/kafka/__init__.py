"""Apache Kafka transport on aiokafka."""
