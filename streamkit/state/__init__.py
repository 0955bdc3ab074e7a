"""State stores: byte stores (memory, RocksDB) wrapped by serde and logging layers."""
