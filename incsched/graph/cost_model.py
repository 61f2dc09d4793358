"""Estimated compute time of an operation when none was measured.

A roofline with a fixed per-op launch overhead: time = overhead + max(flops / peak, bytes / bandwidth).
Used by generators and by `CompGraph.time` for device kinds that have no measured column; measured
times (capture with ``measure=True``) always take precedence. The constants are deliberately round
figures for the two device kinds this project meets, not a calibration of any one machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Roofline", "ROOFLINES", "DEFAULT_KIND"]


@dataclass(frozen=True)
class Roofline:
    """Peak throughput of one device kind, for estimating operation times in seconds."""

    peak_flops: float  # floating-point operations per second
    mem_bandwidth: float  # bytes per second between memory and compute units
    launch_overhead: float  # seconds added to every operation (dispatch, kernel launch)

    def estimate(self, flops: np.ndarray, bytes_moved: np.ndarray) -> np.ndarray:
        """Seconds per operation for arrays of flops and bytes read plus written."""
        flops = np.asarray(flops, dtype=np.float64)
        bytes_moved = np.asarray(bytes_moved, dtype=np.float64)
        return self.launch_overhead + np.maximum(flops / self.peak_flops, bytes_moved / self.mem_bandwidth)


#: Round figures: a 2-core CPU run of PyTorch eager (about 50 GFLOP/s, 10 GB/s, 5 us per op) and one
#: modern data-centre GPU (about 400 TFLOP/s dense half precision, 4 TB/s HBM, 5 us launch).
ROOFLINES: dict[str, Roofline] = {
    "cpu": Roofline(peak_flops=5e10, mem_bandwidth=1e10, launch_overhead=5e-6),
    "cuda": Roofline(peak_flops=4e14, mem_bandwidth=4e12, launch_overhead=5e-6),
}
DEFAULT_KIND = "cpu"
