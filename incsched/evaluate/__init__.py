"""The evaluators every other part trusts, written independently of the solver models: the stage
objective (`evaluate_stages`) and the discrete-event simulator of placements (`simulate`)."""

from .simulate import DeadlockError, Schedule, ScheduleError, simulate
from .stage import StageEvaluation, evaluate_stages

__all__ = ["evaluate_stages", "StageEvaluation", "simulate", "Schedule", "DeadlockError", "ScheduleError"]
