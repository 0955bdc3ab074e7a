"""The peer benchmark: streamkit against faust-streaming, Quix Streams and the raw
aiokafka loop on one broker, one set of events, one machine (``python -m bench``).

Layout: ``workload`` (events, the pages table, each scenario's true result and its
check), ``probe`` (the timed window inside a framework's process), ``kafka_io``
(broker, topics, produce, read back), ``frameworks/`` (one module per framework:
what it can run and how), ``child`` (the process that runs one framework on one
scenario), ``runner`` (one verified measurement), ``latency``, ``restore``,
``report`` (table, JSON, chart) and ``main`` (the command line).
"""
