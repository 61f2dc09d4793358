"""Write the ``.npz`` twin of policy checkpoints, which inference reads without importing torch.

    PYTHONPATH=. python scripts/export_numpy_weights.py [CHECKPOINT.pt ...]

Default: the shipped ones (data/models/*_policy.pt). `save_checkpoint` writes the ``.npz`` of every
new checkpoint itself; this is for checkpoints saved before it did, or after editing one by hand.
Each ``.npz`` records its ``.pt``'s SHA-256, so a stale one is refused (and torch reads the ``.pt``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from incsched.policy.checkpoint import MODELS_DIR, save_numpy_weights


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(Path(MODELS_DIR).glob("*_policy.pt"))
    for path in paths:
        print(save_numpy_weights(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
