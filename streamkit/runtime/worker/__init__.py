"""The worker: runs an app's tasks on a transport until stopped, idle, or failed, as
three objects, each called one way: the loop and life cycle (:mod:`.loop`;
:class:`Worker`), its tasks with their standbys and global tables (:mod:`.tasks`), and
the :mod:`.committer` of the app's guarantee, owning the producers; :mod:`.process` runs
one as a process. The operations tools read it through :class:`~.view.WorkerView`.

This package's names below are its API (``streamkit worker``, ``App.run``, the benchmarks).
"""
from .loop import Worker, default_state_dir
from .process import WorkerCompanion, run_worker, tune_gc_for_streaming
from .view import WorkerView

__all__ = ["Worker", "WorkerCompanion", "WorkerView", "default_state_dir", "run_worker", "tune_gc_for_streaming"]
