"""The graph step: `CompGraph` (the DAG of operations every later step reads), the algorithms over
it (`dag`), its versioned JSON form (`json_form`), graph-to-graph coarsening (`coarsen`) and the
roofline that estimates the times nobody measured (`cost_model`).
"""

from . import dag
from .compgraph import MAX_EXACT_FLOAT_INT, MAX_TOTAL_BYTES, CompGraph, SharedWeight

__all__ = ["CompGraph", "SharedWeight", "dag", "MAX_EXACT_FLOAT_INT", "MAX_TOTAL_BYTES"]
