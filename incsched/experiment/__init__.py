"""Reproducibility experiments: a TOML config declares graphs, problems, methods with budgets, seeds
and repeats (`config`); `run` solves every cell through the batch engine into rows with their
provenance (`provenance`); `report` turns the rows into tables and `plots` into figures, without
solving again.

    incsched experiment run doppler --profile quick -o runs/doppler
    incsched experiment report runs/doppler
"""

__all__: list[str] = []  # the parts are imported from their modules (config, run, report, plots)
