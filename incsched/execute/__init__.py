"""Execution: run a solved stage assignment or placement on real devices and check it.

calibrate (per-node kernel and launch times, link latency and bandwidth, written into the graph and
the devices the solver reads) -> solve -> ...

partition (``split_module`` along stages or placement segments, weights moved into their parts)
-> run (one worker per stage or device, in the solved order; GPipe micro-batches for pipelines;
   threads in one process, one process per worker over torch.distributed, or for stage
   assignments torch.distributed.pipelining's GPipe schedule)
-> equivalence (outputs against the unsplit model; the first diverging node on a mismatch)
-> validation (measured beside predicted; rank correlation over several placements).
"""

from .calibrate import (
    CalibrationError,
    LinkMeasurement,
    NodeTimes,
    calibrated_devices,
    measure_links,
    profile_devices,
    profile_node_times,
    with_measured_times,
)
from .distributed import execute_distributed
from .equivalence import Divergence, OutputMismatch, check_execution, check_outputs, first_divergence, reference_outputs
from .partition import ExecutionError, Part, Program, Ref, partition_program, placement_program, segments, stage_program
from .pipelining import ChainStage, chain_stages, execute_pipelined
from .runner import Execution, TaskRecord, check_devices, cpu_threads_per_worker, execute, intra_op_threads, pipeline_plan, placement_plan, prepare
from .validate import (
    RUNTIMES,
    Validation,
    cpu_time_threads,
    default_devices,
    device_problem,
    micro_batches,
    predict_pipeline,
    rank_placements,
    validate_placement,
    validate_result,
    validate_stages,
)

__all__ = [
    "CalibrationError",
    "LinkMeasurement",
    "NodeTimes",
    "calibrated_devices",
    "measure_links",
    "profile_devices",
    "profile_node_times",
    "with_measured_times",
    "Divergence",
    "Execution",
    "ExecutionError",
    "OutputMismatch",
    "Part",
    "Program",
    "Ref",
    "TaskRecord",
    "Validation",
    "check_execution",
    "check_outputs",
    "ChainStage",
    "RUNTIMES",
    "chain_stages",
    "execute_pipelined",
    "check_devices",
    "cpu_time_threads",
    "cpu_threads_per_worker",
    "default_devices",
    "device_problem",
    "execute",
    "execute_distributed",
    "first_divergence",
    "intra_op_threads",
    "micro_batches",
    "partition_program",
    "pipeline_plan",
    "placement_plan",
    "placement_program",
    "predict_pipeline",
    "prepare",
    "rank_placements",
    "reference_outputs",
    "segments",
    "stage_program",
    "validate_placement",
    "validate_result",
    "validate_stages",
]
