"""The streaming runtime: tasks compiled from the topology, driven by a worker or the test driver."""
