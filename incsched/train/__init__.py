"""Training loops of the learned pre-schedulers (stage policy here; the CLI's ``incsched train`` calls them)."""
