"""The model zoo: real torchvision and transformers models, built offline with random weights.

Feeds `capture` with the models the shipped graphs in ``data/graphs`` come from and that the CLI's
``incsched graph capture --model NAME`` accepts. Nothing is downloaded: torchvision models are built
with ``weights=None`` and transformers models from a locally constructed config.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from ..errors import CaptureError

log = logging.getLogger(__name__)

__all__ = ["MODELS", "build", "ensure_torchvision_importable", "import_torchvision", "import_transformers"]

_SEED = 0

# Keeps the stand-in torchvision operator schemas registered for the life of the process.
_torchvision_stub_library: torch.library.Library | None = None


def ensure_torchvision_importable() -> None:
    """Let ``import torchvision`` succeed where its compiled extension cannot load.

    Why it cannot here: PyPI's torchvision 0.28.0 wheel is a CUDA build whose ``_C.so`` links
    ``libtorch_cuda.so`` and ``libc10_cuda.so``, which the CPU build of torch 2.13.0 lacks.
    torchvision's ``_meta_registrations`` registers fake kernels for ``torchvision::nms`` and
    ``torchvision::qnms`` at import, assuming its C++ extension defined those operators; where the
    extension cannot load (a CUDA build of torchvision beside a CPU-only torch), the import fails
    with "operator torchvision::nms does not exist", and so does importing transformers, which
    imports torchvision. Defining the two schemas ourselves (no kernels: detection ops stay
    unusable, classification models are unaffected) lets the import finish. Done only when the
    extension really is missing. The venv `make` builds does the same for every interpreter with
    a start-up guard (``scripts/torchvision_guard.py``); this call serves installs without it.
    """
    global _torchvision_stub_library
    if _torchvision_stub_library is not None or importlib.util.find_spec("torchvision") is None:
        return
    if _torchvision_extension_loads():
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _torchvision_stub_library = lib
    log.info("torchvision's C++ extension cannot load here; registered stand-in schemas for nms/qnms")


def _torchvision_extension_loads() -> bool:
    try:
        torch.ops.torchvision.nms  # noqa: B018  (already defined: the extension or a stub is loaded)
        return True
    except (AttributeError, RuntimeError):
        pass
    spec = importlib.util.find_spec("torchvision")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        for lib_path in glob.glob(os.path.join(folder, "_C*.so")) + glob.glob(os.path.join(folder, "_C*.pyd")):
            try:
                torch.ops.load_library(lib_path)
                return True
            except (OSError, RuntimeError):
                return False
    return False


def import_torchvision():
    """Import torchvision (working around an unloadable C++ extension); CaptureError if absent."""
    if importlib.util.find_spec("torchvision") is None:
        raise CaptureError("torchvision is not installed; install the 'models' extra: pip install 'incsched[models]'")
    ensure_torchvision_importable()
    return importlib.import_module("torchvision")


def import_transformers():
    """Import transformers (after the torchvision workaround it needs); CaptureError if absent."""
    if importlib.util.find_spec("transformers") is None:
        raise CaptureError("transformers is not installed; install the 'models' extra: pip install 'incsched[models]'")
    ensure_torchvision_importable()
    return importlib.import_module("transformers")


# ---------------------------------------------------------------------- builders


def _vision(arch: str, **kwargs: Any) -> Callable[..., torch.nn.Module]:
    def make() -> torch.nn.Module:
        tv = import_torchvision()
        return getattr(tv.models, arch)(weights=None, **kwargs)

    return make


def _bert() -> torch.nn.Module:
    tf = import_transformers()
    return tf.BertModel(tf.BertConfig())  # bert-base-uncased's shape: 12 layers, hidden 768


def _gpt2() -> torch.nn.Module:
    tf = import_transformers()
    # No key/value cache: the cache object in the output breaks torch.export and is not inference work.
    return tf.GPT2Model(tf.GPT2Config(use_cache=False))  # GPT-2 small: 12 layers, hidden 768


#: name -> (builder, input kind, default image size for vision models)
_REGISTRY: dict[str, tuple[Callable[[], torch.nn.Module], str, int]] = {
    "resnet18": (_vision("resnet18"), "image", 224),
    "resnet50": (_vision("resnet50"), "image", 224),
    "inception_v3": (_vision("inception_v3", aux_logits=False, init_weights=False), "image", 299),
    "mobilenet_v3_large": (_vision("mobilenet_v3_large"), "image", 224),
    "efficientnet_b0": (_vision("efficientnet_b0"), "image", 224),
    "vgg16": (_vision("vgg16"), "image", 224),
    "densenet121": (_vision("densenet121"), "image", 224),
    "vit_b_16": (_vision("vit_b_16"), "image", 224),
    "bert_base": (_bert, "tokens", 0),
    "gpt2": (_gpt2, "tokens", 0),
}

#: The names `build` accepts.
MODELS: tuple[str, ...] = tuple(_REGISTRY)


def build(
    name: str, batch_size: int = 1, seq_len: int = 128, image_size: int | None = None
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Build a zoo model in eval mode with seeded random weights, and example inputs for it.

    Parameters
    ----------
    name : str
        One of `MODELS`.
    batch_size : int
        Leading dimension of the example inputs.
    seq_len : int
        Tokens per sequence, for the language models.
    image_size : int, optional
        Height and width of the example images; default the model's usual size (299 for
        inception_v3, 224 otherwise). vit_b_16 only accepts 224.

    Returns
    -------
    (torch.nn.Module, tuple of torch.Tensor)
        The model (``.eval()``) and the positional arguments of one forward call.

    Raises
    ------
    CaptureError
        For an unknown name (the message lists the known ones), bad sizes, or a missing
        torchvision / transformers.
    """
    if name not in _REGISTRY:
        raise CaptureError(
            f"unknown model {name!r}; known models: {', '.join(MODELS)} (or a factory: pkg.module:function)"
        )
    if batch_size < 1 or seq_len < 1 or (image_size is not None and image_size < 1):
        raise CaptureError(f"{name}: batch_size, seq_len and image_size must be positive")
    make, kind, default_size = _REGISTRY[name]
    # Seeded so that the weights, the inputs and thus every captured number are reproducible.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        model = make().eval()
        if kind == "image":
            size = image_size or default_size
            inputs: tuple[torch.Tensor, ...] = (torch.randn(batch_size, 3, size, size),)
        else:
            vocab = model.config.vocab_size
            inputs = (torch.randint(0, vocab, (batch_size, seq_len)),)
    log.debug("built %s with inputs %s", name, [tuple(x.shape) for x in inputs])
    return model, inputs
