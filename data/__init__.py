"""What the package ships: real-model graphs and trained policy weights (package data, so a built
wheel carries them too).

>>> "resnet50" in shipped_graphs()
True
>>> shipped_graph_path("resnet50").name
'resnet50.json.gz'
"""

from __future__ import annotations

from pathlib import Path

from ..errors import IncschedError

__all__ = ["DATA_DIR", "GRAPHS_DIR", "MODELS_DIR", "shipped_graphs", "shipped_graph_path"]

DATA_DIR = Path(__file__).resolve().parent
GRAPHS_DIR = DATA_DIR / "graphs"
MODELS_DIR = DATA_DIR / "models"


def shipped_graphs() -> list[str]:
    """Names of the shipped real-model graphs (``resnet50``, ``gpt2``, ...), sorted."""
    return sorted(p.name.removesuffix(".json.gz") for p in GRAPHS_DIR.glob("*.json.gz"))


def shipped_graph_path(name: str) -> Path:
    """The file of the shipped graph ``name``; an `IncschedError` naming the choices if there is none."""
    path = GRAPHS_DIR / f"{name}.json.gz"
    if not path.is_file():
        raise IncschedError(f"no shipped graph named {name!r} (shipped: {', '.join(shipped_graphs())})")
    return path
