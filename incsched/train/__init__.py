"""Training loops of the learned pre-schedulers (stage policy here; the CLI's ``incsched train`` calls them)."""

__all__: list[str] = []  # the trainers are imported from their modules (stage, placement, measured)
