"""torchtitan's side of the hand-off: a model part that keeps the named modules, at any depth.

torchtitan 0.3.0 builds each model part with ``_split_module(whole_model, module_names)``, which
keeps top-level children and elements of top-level ModuleLists/ModuleDicts only: a nested model
(Hugging Face GPT-2: ``transformer.h.3``) loses ``transformer`` whole. `split_module` has the same
signature and, on the names torchtitan's keeps, the same result; it also descends into nested
modules. It is the splitter's stand-in for the ``nested`` exports of `torchtitan_chunks`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from torch import nn

__all__ = ["split_module"]


def split_module(whole_model: nn.Module, module_names: Iterable[str]) -> nn.Module:
    """A copy of ``whole_model`` holding only the modules named (and what encloses them).

    A module named is kept whole; a module enclosing a named one is kept and cut inside; any other
    child is set to None, or emptied if it is a ModuleList/ModuleDict. A ModuleList keeps its named
    elements in order, renumbered from 0 (as torchtitan's splitter does); a ModuleDict keeps their keys.

    Parameters
    ----------
    whole_model : torch.nn.Module
        The model (deep-copied, never changed).
    module_names : iterable of str
        Module paths (``"transformer.h.3"``), as in ``module_fqns_per_model_part``.

    Returns
    -------
    torch.nn.Module

    Examples
    --------
    >>> outer = nn.Module(); outer.inner = nn.Module(); outer.head = nn.Linear(2, 2)
    >>> outer.inner.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> part = split_module(outer, ["inner.blocks.2"])
    >>> len(part.inner.blocks), part.head
    (1, None)
    """
    model = copy.deepcopy(whole_model)
    _keep(model, "", set(module_names))
    return model


def _keep(module: nn.Module, prefix: str, names: set[str]) -> None:
    """Cut ``module`` (at path ``prefix``) down to the named modules below it, in place."""
    for child_name, child in list(module.named_children()):
        path = prefix + child_name
        if path in names:
            continue
        inside = any(name.startswith(path + ".") for name in names)
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            kept = [(key, element) for key, element in child.named_children()
                    if f"{path}.{key}" in names or any(name.startswith(f"{path}.{key}.") for name in names)]
            for key, element in kept:
                if f"{path}.{key}" not in names:  # enclosing a named module: cut inside it
                    _keep(element, f"{path}.{key}.", names)
            if isinstance(child, nn.ModuleList):
                setattr(module, child_name, type(child)([element for _, element in kept]))
            else:
                for key in [key for key in child.keys() if key not in dict(kept)]:
                    del child[key]
        elif inside:
            _keep(child, path + ".", names)
        else:
            setattr(module, child_name, None)
