"""Where a model to capture comes from: a zoo name, a factory, a saved ``torch.export`` program, or
a Hugging Face config; and what to tell the user when capturing one fails in a known way.

Each source gives a `LoadedModel` (the module, the positional inputs of one forward call, a name)
that `incsched.capture.capture` takes. The CLI's ``--model``, ``--exported`` and ``--hf-config``
come here. Nothing is downloaded: Hugging Face models are built from the config with random weights.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import CaptureError
from ..jsonio import read_json
from ..limits import ENV_VARS, InputLimits, input_limits
from . import zoo

log = logging.getLogger(__name__)

__all__ = ["LoadedModel", "load_model", "from_factory", "from_exported", "from_hf_config", "known_fix"]

_SEED = 0


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to capture.

    Attributes
    ----------
    model : torch.nn.Module
    example_inputs : tuple
        Positional arguments of one forward call.
    name : str
        For the graph and for errors: the zoo name, the factory's name, the file's stem, or the
        Hugging Face architecture.
    source : str
        ``"zoo"``, ``"factory"``, ``"exported"`` or ``"hf-config"``.
    """

    model: torch.nn.Module
    example_inputs: tuple[Any, ...]
    name: str
    source: str


def load_model(
    *,
    model: str | None = None,
    exported: str | os.PathLike | None = None,
    hf_config: str | os.PathLike | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
    image_size: int | None = None,
    limits: InputLimits | None = None,
) -> LoadedModel:
    """The model named by exactly one of ``model``, ``exported`` and ``hf_config``.

    Parameters
    ----------
    model : str, optional
        A zoo name (``resnet50``, see `incsched.capture.zoo.MODELS`) or a factory
        ``pkg.module:function`` / ``path/to/file.py:function`` (see `from_factory`).
    exported : path-like, optional
        A program saved by ``torch.export.save`` (see `from_exported`).
    hf_config : path-like, optional
        A Hugging Face ``config.json`` (see `from_hf_config`).
    batch_size, seq_len, image_size : int, optional
        Input sizes for zoo models and Hugging Face configs (default 1, 128 and the model's own);
        a factory or an exported program brings its own inputs, so giving them there is an error.
    limits : InputLimits, optional
        Largest file accepted (default `incsched.limits.input_limits()`).

    Raises
    ------
    CaptureError
        For a bad source, naming it and what is wrong.
    """
    given = [k for k, v in (("model", model), ("exported", exported), ("hf_config", hf_config)) if v is not None]
    if len(given) != 1:
        raise CaptureError(f"name exactly one model source (model, exported or hf_config), got {len(given)}")
    sizes = {"batch_size": batch_size, "seq_len": seq_len, "image_size": image_size}
    if exported is not None or (model is not None and ":" in model):
        extra = [k for k, v in sizes.items() if v is not None]
        if extra:
            what = "an exported program" if exported is not None else "a factory"
            raise CaptureError(f"{what} brings its own example inputs: input sizes ({', '.join(extra)}) apply to zoo models and Hugging Face configs only")
        return from_exported(exported, limits=limits) if exported is not None else from_factory(model)
    if hf_config is not None:
        return from_hf_config(hf_config, batch_size=batch_size or 1, seq_len=seq_len or 128, image_size=image_size, limits=limits)
    built, inputs = zoo.build(model, batch_size=batch_size or 1, seq_len=seq_len or 128, image_size=image_size)
    return LoadedModel(built, inputs, model, "zoo")


# ---------------------------------------------------------------------- factories


def from_factory(spec: str) -> LoadedModel:
    """Call ``pkg.module:function`` (or ``path/to/file.py:function``) for ``(model, example_inputs)``.

    The module is imported as Python would from the current folder (which is put on ``sys.path``,
    as ``python -m`` does); a ``.py`` path is loaded from that file. Importing it runs its code:
    name only modules you trust. ``example_inputs`` is a tuple or list of positional arguments (a
    lone tensor counts as one).

    Raises
    ------
    CaptureError
        The module cannot be imported, has no such callable, the call raises, or it returns
        something other than ``(torch.nn.Module, inputs)``; the message names the factory.
    """
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr.isidentifier():
        raise CaptureError(f"{spec}: a factory is written pkg.module:function or path/to/file.py:function")
    module = _import_factory_module(spec, where)
    factory = getattr(module, attr, None)
    if factory is None:
        raise CaptureError(f"{spec}: module {where!r} has no attribute {attr!r}")
    if not callable(factory):
        raise CaptureError(f"{spec}: {attr!r} is not callable ({type(factory).__name__}); name a function returning (model, example_inputs)")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_SEED)  # random weights and inputs the same every run
            returned = factory()
    except Exception as err:  # the user's code: any failure is reported, not a traceback
        raise CaptureError(f"{spec}: the factory raised {type(err).__name__}: {_first_line(err)}") from err
    model, inputs = _check_returned(spec, returned)
    return LoadedModel(model, inputs, attr, "factory")


def _import_factory_module(spec: str, where: str):
    zoo.ensure_torchvision_importable()  # a model file's `import torchvision` fails here otherwise
    try:
        if where.endswith(".py") or os.sep in where or "/" in where:
            path = Path(where)
            if not path.is_file():
                raise CaptureError(f"{spec}: no such file {where!r}")
            name = path.stem if path.stem.isidentifier() else "incsched_factory"
            loader_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules.setdefault(name, module)  # dataclasses and pickling look the module up by name
            loader_spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path and "" not in sys.path:  # `incsched` as a script does not see ./
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(where)
    except CaptureError:
        raise
    except Exception as err:  # ImportError, SyntaxError, or the module's own code failing
        raise CaptureError(f"{spec}: cannot import {where!r}: {type(err).__name__}: {_first_line(err)}") from err


def _check_returned(spec: str, returned: Any) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        got = f"a {type(returned).__name__}" + (f" of {len(returned)} items" if isinstance(returned, (tuple, list)) else "")
        raise CaptureError(f"{spec}: the factory returned {got}; it must return (model, example_inputs)")
    model, inputs = returned
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"{spec}: the factory's model is a {type(model).__name__}, not a torch.nn.Module")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, dict):
        raise CaptureError(f"{spec}: example_inputs is a dict; give the forward call's positional arguments as a tuple")
    if not isinstance(inputs, (tuple, list)):
        raise CaptureError(f"{spec}: example_inputs is a {type(inputs).__name__}; give a tuple of the forward call's positional arguments")
    return model, tuple(inputs)


# ---------------------------------------------------------------------- torch.export programs


def from_exported(path: str | os.PathLike, *, limits: InputLimits | None = None) -> LoadedModel:
    """Load a program saved by ``torch.export.save`` and the example inputs saved with it.

    ``torch.export.load`` unpickles parts of the file (torch's own documentation warns never to
    load one from an untrusted source): load only programs you trust. The archive's size, and
    the sum of its members' sizes once unpacked, must be within ``limits.max_file_bytes``.

    Raises
    ------
    CaptureError
        The file is missing, too large, not a torch.export archive, or carries no example inputs
        (or keyword ones only).
    """
    lim = input_limits(limits)
    source = str(path)
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except FileNotFoundError:
        raise CaptureError(f"{source}: no such file") from None
    except (OSError, zipfile.BadZipFile) as err:
        raise CaptureError(f"{source}: not a torch.export archive (.pt2): {_first_line(err)}") from None
    if max(size, unpacked) > lim.max_file_bytes:
        raise CaptureError(
            f"{source}: {max(size, unpacked):,} bytes unpacked, more than the limit of {lim.max_file_bytes:,} "
            f"(set {ENV_VARS['max_file_bytes']} to raise it)"
        )
    torch_export_log = logging.getLogger("torch.export")
    level = torch_export_log.level
    torch_export_log.setLevel(logging.CRITICAL)  # it logs a traceback of its own before re-raising
    try:
        program = torch.export.load(source)
    except Exception as err:  # corrupt archives fail in many ways inside torch's deserializer
        reason = _first_line(err).split(". Please check the warnings")[0]  # torch logs them; they are silenced above
        raise CaptureError(f"{source}: cannot load the exported program: {type(err).__name__}: {reason}") from err
    finally:
        torch_export_log.setLevel(level)
    example = getattr(program, "example_inputs", None)
    if not example:
        raise CaptureError(f"{source}: the program carries no example inputs; export it with them and save it again")
    args, kwargs = example
    if kwargs:
        raise CaptureError(f"{source}: the program was exported with keyword inputs ({', '.join(sorted(kwargs))}); export it with positional ones")
    return LoadedModel(program.module(), tuple(args), Path(source).name.removesuffix(".pt2"), "exported")


# ---------------------------------------------------------------------- Hugging Face configs


def from_hf_config(
    path: str | os.PathLike,
    *,
    batch_size: int = 1,
    seq_len: int = 128,
    image_size: int | None = None,
    limits: InputLimits | None = None,
) -> LoadedModel:
    """Build the model a Hugging Face ``config.json`` describes, with seeded random weights.

    The class is the config's first ``architectures`` entry when transformers has it, else
    ``AutoModel``. The key/value cache is turned off (``use_cache=False``): it is state for the
    next generation step, not work of this forward, and torch.export cannot trace it. Inputs:
    token ids ``(batch_size, seq_len)`` for text models, images ``(batch_size, channels,
    image_size, image_size)`` for vision ones.

    Raises
    ------
    CaptureError
        The file is not a config (no ``model_type``), names a type transformers does not know,
        describes an encoder-decoder or a model whose input is neither, or ``seq_len`` exceeds
        the model's positions.
    """
    source = str(path)
    try:
        data = read_json(path, limits=input_limits(limits))
    except OSError as err:
        raise CaptureError(f"{source}: {err.strerror or err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise CaptureError(f"{source}: not a Hugging Face config (no 'model_type' string)")
    tf = zoo.import_transformers()
    settings = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version")}
    settings["use_cache"] = False
    try:
        config = tf.AutoConfig.for_model(data["model_type"], **settings)
    except Exception as err:  # ValueError for an unknown type; bad field values in many ways
        raise CaptureError(f"{source}: transformers cannot build this config: {_first_line(err)}") from None
    if getattr(config, "is_encoder_decoder", False):
        raise CaptureError(f"{source}: {data['model_type']} is an encoder-decoder (it needs decoder inputs); write a factory (pkg.module:function) for it")
    architectures = data.get("architectures") or []
    cls = getattr(tf, architectures[0], None) if architectures and isinstance(architectures[0], str) else None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_SEED)
            model = (cls(config) if cls is not None else tf.AutoModel.from_config(config)).eval()
            inputs = _hf_inputs(source, model, config, batch_size, seq_len, image_size)
    except CaptureError:
        raise
    except Exception as err:
        raise CaptureError(f"{source}: building the model failed: {type(err).__name__}: {_first_line(err)}") from err
    return LoadedModel(model, inputs, cls.__name__ if cls is not None else type(model).__name__, "hf-config")


def _hf_inputs(source: str, model, config, batch_size: int, seq_len: int, image_size: int | None) -> tuple[torch.Tensor, ...]:
    kind = getattr(model, "main_input_name", "input_ids")
    if kind == "input_ids":
        positions = next((getattr(config, k) for k in ("max_position_embeddings", "n_positions") if getattr(config, k, None)), None)
        if positions is not None and seq_len > positions:
            raise CaptureError(f"{source}: seq_len {seq_len} is longer than the model's {positions} positions")
        return (torch.randint(0, config.vocab_size, (batch_size, seq_len)),)
    if kind == "pixel_values":
        size = image_size or getattr(config, "image_size", None) or 224
        size = size if isinstance(size, int) else size[0]
        return (torch.randn(batch_size, getattr(config, "num_channels", 3), size, size),)
    raise CaptureError(f"{source}: the model's input is {kind!r} (not token ids or images); write a factory (pkg.module:function) for it")


# ---------------------------------------------------------------------- known failures


def known_fix(err: BaseException) -> str | None:
    """What to do about a capture failure seen before, or None.

    >>> known_fix(RuntimeError("Found <class 'transformers.cache_utils.DynamicCache'> in output"))[:40]
    'the model returns a transformers cache ('
    """
    text = str(err)
    if "cache_utils." in text or "DynamicCache" in text:
        return ("the model returns a transformers cache (its key/value state for generation), which torch.export cannot "
                "trace; build it with use_cache=False (e.g. GPT2Config(use_cache=False), or config.use_cache = False)")
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__
