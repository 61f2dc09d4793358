"""Pictures of one result, the last step after the result: a stage split as the 1F1B pipeline it
runs (bubbles and memory per stage), a placement as a Gantt chart per device with its transfers.

matplotlib is an extra (``pip install 'incsched[experiments]'``), imported only when drawing.
The experiment reports draw their per-result figures with the same functions.
"""

from .canvas import MATPLOTLIB_HINT
from .draw import DEFAULT_MICRO_BATCHES, draw
from .gantt import Timeline, Transfer, gantt_figure, timeline
from .pipeline import BACKWARD_ESTIMATE, Block, bubble_fractions, one_f_one_b, pipeline_figure

__all__ = ["draw", "MATPLOTLIB_HINT", "DEFAULT_MICRO_BATCHES", "BACKWARD_ESTIMATE", "Block", "one_f_one_b", "bubble_fractions",
           "pipeline_figure", "Timeline", "Transfer", "timeline", "gantt_figure"]
