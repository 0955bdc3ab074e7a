"""The streaming runtime: tasks compiled from the topology, driven by a worker or the
test driver. Its rooms import one way, each only from rooms below it
(``tests/test_architecture.py`` checks it):

- :mod:`.worker` runs an app's tasks on a transport (loop, tasks, committer);
- :mod:`.task` is one partition of one sub-topology, with what it is made of;
- :mod:`.operators` compiles IR nodes into the task's per-record functions;
- :mod:`.context` is what operators see of their task (context, collector, timers);
- :mod:`.ordering` decides the order records reach a task in.
"""
