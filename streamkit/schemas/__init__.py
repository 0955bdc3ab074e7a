"""Schemas on the wire: Confluent Schema Registry's model, clients and a compatible registry.

- :mod:`.model`: schemas, registered versions, references, compatibility levels, errors.
- :mod:`.registry_client`: the :class:`~.registry_client.RegistryClient` protocol the
  serdes use, whatever registry answers (HTTP or in-process).

Nothing here imports a schema library at module level; each format loads its own
(fastavro, avro, jsonschema, protobuf) when first used.
"""
