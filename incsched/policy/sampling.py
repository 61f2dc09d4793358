"""How many sampled decodes the learned pre-schedulers add to their greedy one.

Both policies decode in compiled kernels (`stage_kernel`, `placement_kernel`), where a sample
costs about a microsecond per node, so they share one budget: about `SAMPLE_NODE_BUDGET` node
decodes, at least `MIN_SAMPLES` and at most `MAX_SAMPLES` -- 64 samples up to 250 nodes, 16 from
1,000 nodes up, which keeps a 1,000-node graph well inside the 0.1-s inference target
(measured by benchmarks/rl_stage.py and rl_placement.py, now the speed profiles of the respect and doppler experiments).
"""

from __future__ import annotations

__all__ = ["SAMPLE_NODE_BUDGET", "MIN_SAMPLES", "MAX_SAMPLES", "default_samples"]

SAMPLE_NODE_BUDGET = 16_000
MIN_SAMPLES = 16
MAX_SAMPLES = 64


def default_samples(n_nodes: int) -> int:
    """Sampled decodes for a graph of ``n_nodes``: ``SAMPLE_NODE_BUDGET // n_nodes`` within [`MIN_SAMPLES`, `MAX_SAMPLES`].

    >>> default_samples(100), default_samples(1_000), default_samples(10_000)
    (64, 16, 16)
    """
    n = max(int(n_nodes), 1)
    return max(MIN_SAMPLES, min(MAX_SAMPLES, SAMPLE_NODE_BUDGET // n))
