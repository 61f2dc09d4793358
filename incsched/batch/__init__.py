"""Many solves at once: `solve_many` runs `SolveTask`s on an engine (local processes or Ray) and
yields their outcomes as they finish; `run_batch` turns a folder of graph files into result
files on top of it, resumable by content.

``tasks`` (the unit of work and what a worker runs), ``local`` and ``ray_engine`` (the engines),
``engines`` (`solve_many`), ``folder`` (`run_batch`: keys, stored results, atomic writes).
"""

from .engines import ENGINES, solve_many
from .folder import BatchInterrupted, BatchItem, graph_files, left_out, not_a_file, result_path, run_batch
from .tasks import ProblemRecipe, SolveTask, TaskOutcome, batch_key

__all__ = ["ProblemRecipe", "SolveTask", "TaskOutcome", "solve_many", "ENGINES", "BatchItem", "BatchInterrupted", "run_batch",
           "graph_files", "left_out", "not_a_file", "result_path", "batch_key"]
