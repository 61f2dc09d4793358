"""DeepSpeed's side of the hand-off: a ``PipelineModule`` that takes the exported boundaries.

DeepSpeed's ``partition_method`` is ``"uniform"``, ``"parameters"`` or ``"type:REGEX"``; none
takes boundaries. `PartsPipelineModule` is DeepSpeed's ``PipelineModule`` that also takes the
``"parts:0,3,7,12"`` that ``incsched export --format deepspeed`` writes, and stores exactly those
boundaries in ``self.parts``. Importing this module imports DeepSpeed (the ``handoff`` extra).
"""

from __future__ import annotations

from deepspeed.pipe import PipelineModule

from .split_points import PARTS_METHOD, parse_partition_method

__all__ = ["PartsPipelineModule"]


class PartsPipelineModule(PipelineModule):
    """``deepspeed.pipe.PipelineModule`` with one more ``partition_method``: ``"parts:0,3,7,12"``.

    Stage k holds ``layers[parts[k]:parts[k + 1]]``; every other method is DeepSpeed's own.

    Examples
    --------
    Inside an initialised DeepSpeed process group (``deepspeed.init_distributed()``), with the
    ``layers`` and ``partition_method`` of ``incsched export --format deepspeed``::

        model = PartsPipelineModule([LayerSpec(...) or module for each layer], num_stages=4,
                                    partition_method="parts:0,3,7,12")
        assert model.parts == [0, 3, 7, 12]

    Raises
    ------
    incsched.errors.ExportError
        For a ``parts:`` method whose boundaries do not fit the layers and stages.
    """

    def _partition_layers(self, method: str = "uniform") -> None:
        if not isinstance(method, str) or not method.lower().startswith(PARTS_METHOD):
            return super()._partition_layers(method=method)
        self.parts = parse_partition_method(method, n_layers=len(self._layer_specs), n_stages=self.num_stages)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
