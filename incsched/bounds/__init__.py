"""The bounds step: global lower bounds, the floor every certificate is measured against, and the
exact reductions that shrink a model without losing an optimum.

A result is ``optimal`` only when its objective meets a proven global lower bound. The families
here hold for any answer, inside a window or not, and need no solver: `stage` (each objective
term's floor, and what precedence under a memory cap forces), `placement` (critical paths with the
transfers no schedule avoids, energy, segment sums; heads and tails in `placement_heads`, the
preemptive flow bound with the entry's feeding in `placement_flow`, and on devices of several kinds
the families that charge each op its own kind's duration in `placement_kinds`), `reductions` (loadless stage nodes merged or
placed, with a map from any answer to one as good). CP-SAT's own bounds on exact windows are
driven from `incsched.inc_ilp`, which owns every solver call.
"""

from .placement import placement_lower_bound
from .stage import stage_lower_bound, stage_term_bounds

__all__ = ["stage_lower_bound", "stage_term_bounds", "placement_lower_bound"]
