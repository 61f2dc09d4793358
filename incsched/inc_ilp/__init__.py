"""Inc-ILP as one anytime solver: incumbent -> window -> exact -> widen -> certify.

`solve()` (incsched/solve.py) is the front door; the phases live here, one module per problem
(`stage`, `placement`), sharing the incumbent portfolio (`incumbent`) and one small `Context`
(the clock, the work budget, the stop signal, progress and the best answer so far).
"""

__all__: list[str] = []  # the phases are imported from their modules (stage, placement, incumbent, context)
