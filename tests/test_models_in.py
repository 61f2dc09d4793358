"""Any model in (incsched.capture.models): factories, saved torch.export programs, Hugging Face
configs, through the library and the CLI; bad sources end as one line naming the problem."""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

from incsched.capture import capture
from incsched.capture.models import from_exported, from_factory, from_hf_config, known_fix, load_model
from incsched.cli import main
from incsched.errors import CaptureError
from incsched.formats import load_graph
from incsched.limits import InputLimits

FACTORIES = '''
import torch
import torchvision  # noqa: F401  (fails in this venv unless incsched made it importable first)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def make():
    return Tiny().eval(), (torch.randn(2, 8),)

def lone_tensor():
    return Tiny().eval(), torch.randn(2, 8)

def train_mode():
    return Tiny(), (torch.randn(2, 8),)

def model_only():
    return Tiny()

def keyword_inputs():
    return Tiny(), {"x": torch.randn(2, 8)}

def not_a_module():
    return "Tiny", (torch.randn(2, 8),)

def raises():
    raise ValueError("no weights here")

NOT_CALLABLE = 3
'''


@pytest.fixture
def factory_file(tmp_path, monkeypatch):
    """A model file in the current folder, importable as ``tiny_models`` and by path."""
    if importlib.util.find_spec("torchvision") is None:  # not importorskip: a plain import may fail here
        pytest.skip("torchvision is not installed")
    (tmp_path / "tiny_models.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "tiny_models.py"
    sys.modules.pop("tiny_models", None)


def state_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


@pytest.mark.slow
def test_factory_by_module_and_by_path(factory_file):
    loaded = from_factory("tiny_models:make")
    assert loaded.name == "make" and loaded.source == "factory" and loaded.example_inputs[0].shape == (2, 8)
    graph = capture(loaded.model, loaded.example_inputs, name=loaded.name).graph
    assert graph.param_bytes.sum() == state_bytes(loaded.model) == 4 * (8 * 16 + 16 + 16 * 4 + 4)
    by_path = from_factory(f"{factory_file}:lone_tensor")
    assert len(by_path.example_inputs) == 1 and torch.equal(by_path.example_inputs[0], loaded.example_inputs[0])  # seeded


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tiny_models:model_only", "tiny_models:model_only: the factory returned a Tiny; it must return (model, example_inputs)"),
        ("tiny_models:keyword_inputs", "example_inputs is a dict; give the forward call's positional arguments as a tuple"),
        ("tiny_models:not_a_module", "the factory's model is a str, not a torch.nn.Module"),
        ("tiny_models:raises", "tiny_models:raises: the factory raised ValueError: no weights here"),
        ("tiny_models:NOT_CALLABLE", "'NOT_CALLABLE' is not callable (int)"),
        ("tiny_models:missing", "module 'tiny_models' has no attribute 'missing'"),
        ("no_such_module:make", "cannot import 'no_such_module': ModuleNotFoundError"),
        ("no/such/file.py:make", "no such file 'no/such/file.py'"),
        ("tiny_models:", "a factory is written pkg.module:function"),
    ],
)
def test_bad_factories_are_one_line_naming_the_problem(factory_file, capsys, spec, message):
    with pytest.raises(CaptureError, match=None) as err:
        from_factory(spec)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert main(["graph", "capture", "--model", spec, "-o", "g.json"]) == 1
    out = capsys.readouterr()
    assert out.err.startswith("incsched: error: ") and out.err.count("\n") == 1 and "Traceback" not in out.err


def test_input_sizes_are_refused_for_sources_that_bring_their_own_inputs(factory_file):
    with pytest.raises(CaptureError, match=r"a factory brings its own example inputs: input sizes \(batch_size\)"):
        load_model(model="tiny_models:make", batch_size=4)
    with pytest.raises(CaptureError, match="exactly one model source"):
        load_model(model="resnet18", hf_config="c.json")


def test_capture_warns_on_a_model_left_in_training_mode(factory_file, caplog):
    loaded = from_factory("tiny_models:train_mode")
    with caplog.at_level(logging.WARNING, logger="incsched.capture"):
        capture(loaded.model, loaded.example_inputs, name="tiny")
    assert any("tiny: the model is in training mode" in r.getMessage() and "model.eval()" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="incsched.capture"):
        capture(loaded.model.eval(), loaded.example_inputs, name="tiny")
    assert not any("training mode" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_torchvision_imports_only_after_the_workaround():
    """The cause, kept visible: PyPI's torchvision 0.28.0 is a CUDA build beside a CPU torch here.

    The zoo's workaround serves installs without the venv guard `make` adds (scripts/torchvision_guard.py),
    so the guard is taken out of these interpreters. If this starts failing because plain
    ``import torchvision`` works, the workaround and the guard can go.
    """
    from incsched.capture import zoo

    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")

    unguarded = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != '_incsched_torchvision_guard']; "
    plain = subprocess.run([sys.executable, "-c", unguarded + "import torchvision"], capture_output=True, text=True, timeout=120)
    if plain.returncode == 0:
        pytest.skip("torchvision imports on its own here (its C++ extension loads)")
    assert "torchvision::nms does not exist" in plain.stderr
    fixed = subprocess.run(
        [sys.executable, "-c", unguarded + "from incsched.capture import zoo; zoo.ensure_torchvision_importable(); import torchvision"],
        capture_output=True, text=True, timeout=120,
    )
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert zoo.import_torchvision().__name__ == "torchvision"


# ---------------------------------------------------------------------- saved torch.export programs


@pytest.fixture
def exported_file(tmp_path, factory_file):
    loaded = from_factory("tiny_models:make")
    path = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(loaded.model, loaded.example_inputs), str(path))
    return path, loaded


@pytest.mark.slow
def test_exported_program_captures_like_the_model_it_came_from(exported_file):
    path, original = exported_file
    loaded = from_exported(path)
    assert loaded.name == "tiny" and loaded.source == "exported"
    assert torch.equal(loaded.example_inputs[0], original.example_inputs[0])
    direct = capture(original.model, original.example_inputs, name="tiny").graph
    again = capture(loaded.model, loaded.example_inputs, name="tiny").graph
    assert again.structure_digest() == direct.structure_digest()
    assert again.param_bytes.sum() == direct.param_bytes.sum() and again.flops.sum() == direct.flops.sum()


def test_bad_exported_programs_are_one_line(tmp_path, exported_file):
    path, _ = exported_file
    (tmp_path / "text.pt2").write_text("hello")
    with zipfile.ZipFile(tmp_path / "junk.pt2", "w") as z:  # a zip, but not a program
        z.writestr("junk/archive_format", "pt2")
        z.writestr("junk/models/model.json", "{not json")
    cases = [
        (tmp_path / "missing.pt2", "missing.pt2: no such file", None),
        (tmp_path / "text.pt2", "text.pt2: not a torch.export archive (.pt2): File is not a zip file", None),
        (tmp_path / "junk.pt2", "junk.pt2: cannot load the exported program", None),
        (path, "tiny.pt2: ", InputLimits(max_file_bytes=1000)),
    ]
    for bad, message, limits in cases:
        with pytest.raises(CaptureError) as err:
            from_exported(bad, limits=limits)
        assert message in str(err.value) and "\n" not in str(err.value)
    assert "more than the limit of 1,000 (set INCSCHED_MAX_FILE_BYTES" in str(err.value)


@pytest.mark.slow
def test_cli_captures_a_factory_and_an_exported_program(tmp_path, exported_file, capsys):
    path, _ = exported_file
    assert main(["graph", "capture", "--model", "tiny_models:make", "-o", str(tmp_path / "f.json")]) == 0
    assert main(["graph", "capture", "--exported", str(path), "-o", str(tmp_path / "e.json")]) == 0
    assert load_graph(tmp_path / "f.json").structure_digest() == load_graph(tmp_path / "e.json").structure_digest()
    assert main(["graph", "capture", "--model", "resnet18", "--exported", str(path), "-o", "x.json"]) == 1
    assert "not allowed with argument" in capsys.readouterr().err


# ---------------------------------------------------------------------- Hugging Face configs


def _write_config(tmp_path, **fields) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return str(path)


GPT2_TINY = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=1, n_embd=32, n_head=2, vocab_size=100,
                 n_positions=64, use_cache=True, bos_token_id=0, eos_token_id=0)


@pytest.mark.slow
def test_hf_config_builds_with_the_cache_off_and_captures(tmp_path):
    pytest.importorskip("transformers")
    loaded = from_hf_config(_write_config(tmp_path, **GPT2_TINY), seq_len=16)
    assert loaded.name == "GPT2LMHeadModel" and loaded.model.config.use_cache is False and not loaded.model.training
    assert loaded.example_inputs[0].shape == (1, 16)
    graph = capture(loaded.model, loaded.example_inputs, name=loaded.name).graph
    # the LM head is tied to the token embedding: one shared weight, counted once in the total
    assert graph.total_param_bytes == state_bytes(loaded.model)
    assert [w.nbytes for w in graph.shared_weights] == [loaded.model.lm_head.weight.numel() * 4]
    assert main(["graph", "capture", "--hf-config", str(tmp_path / "config.json"), "--seq-len", "8",
                 "-o", str(tmp_path / "g.json")]) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "fields, kwargs, message",
    [
        ({"n_layer": 1}, {}, "not a Hugging Face config (no 'model_type' string)"),
        ({"model_type": "no_such_model"}, {}, "transformers cannot build this config"),
        ({"model_type": "t5", "num_layers": 1, "d_model": 16}, {}, "is an encoder-decoder"),
        (GPT2_TINY, {"seq_len": 65}, "seq_len 65 is longer than the model's 64 positions"),
    ],
)
def test_bad_hf_configs_are_one_line(tmp_path, fields, kwargs, message):
    pytest.importorskip("transformers")
    with pytest.raises(CaptureError) as err:
        from_hf_config(_write_config(tmp_path, **fields), **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_transformers_cache_in_the_output_fails_with_the_fix(factory_file):
    tf = pytest.importorskip("transformers")
    config = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0)
    model = tf.GPT2Model(config).eval()  # use_cache defaults to True
    with pytest.raises(CaptureError) as err:
        capture(model, (torch.randint(0, 100, (1, 8)),), name="gpt2")
    assert str(err.value).startswith("gpt2: the model returns a transformers cache") and "use_cache=False" in str(err.value)


def test_known_fix_is_none_for_other_failures():
    assert known_fix(RuntimeError("shape mismatch")) is None
    assert "use_cache=False" in known_fix(RuntimeError(textwrap.dedent("Found <class 'transformers.cache_utils.DynamicCache'>")))
