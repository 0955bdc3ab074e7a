"""A Confluent-compatible Schema Registry whose state is a compacted topic of a broker.

- :mod:`.service`: :class:`~.service.SchemaRegistry`, the registry's logic (also a
  :class:`~..registry_client.RegistryClient` for in-process serdes);
- :mod:`.state`: the log's records and the rules every instance applies to them;
- :mod:`.log`: the log's interface, and the log in memory;
- :mod:`.broker_log`: the log on a broker (embedded or Kafka), the one part needing a
  transport (the serdes never import it);
- :mod:`.server`: Confluent's REST API on aiohttp (``streamkit registry serve``).
"""
from .service import SchemaRegistry

__all__ = ["SchemaRegistry"]
