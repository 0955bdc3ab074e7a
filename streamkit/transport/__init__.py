"""Transports: how the runtime reads and writes topics (embedded log, Kafka)."""
