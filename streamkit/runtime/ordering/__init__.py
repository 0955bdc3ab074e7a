"""The order records reach a task in: a task's inputs and their release
(:mod:`.task_inputs`), timestamp order across partitions (:mod:`.record_order`), the
merge of a repartition partition's writers (:mod:`.writer_merge`) by the stamps and
progress markers they write (:mod:`.repartition_stamps`), and pausing partitions far
ahead of the others (:mod:`.pacing`). Pure bookkeeping over records: no tasks, stores
or clients."""
