"""A task: one partition of one sub-topology, with its stores, stream time and timers
(:mod:`.task`), made by :mod:`.factory` from the topology; the error handlers it
applies to failing records (:mod:`.error_policy`), the external sources read as its
inputs (:mod:`.external_sources`) and the global tables it joins against
(:mod:`.global_tables`). Used alike by the worker, the test driver and the Spark replay."""
