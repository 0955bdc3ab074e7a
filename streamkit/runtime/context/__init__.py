"""What a task's operators see of it: the processor context with its stores, timers and
stream time (:mod:`.task_context`, :mod:`.punctuation`, :mod:`.operator_time`), the
collector buffering what they write (:mod:`.collector`), and the task's counters
(:mod:`.task_metrics`). Below the operators, so they can be compiled against it."""
