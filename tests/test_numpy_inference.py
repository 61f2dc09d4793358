"""Inference without torch: the numpy encoder twin, the ``.npz`` weights, and the pre-schedulers on them.

The numpy forward (`numpy_encoder.encode` + the heads' node parts) must agree with the torch models
to float32 rounding, decode to the same placements and stages, read weights equal to the
checkpoint's bit for bit, refuse a stale or tampered ``.npz``, and keep torch out of a fresh
process that pre-schedules.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from incsched.generators import chained_matmul, ffnn, transformer_block
from incsched.graph import CompGraph
from incsched.policy.checkpoint import (
    NO_NPZ_ENV,
    CheckpointError,
    load_checkpoint,
    load_numpy_weights,
    load_weight_arrays,
    numpy_weights_path,
)
from incsched.policy.placement_decoder import PLACEMENT_LAYOUT, NumpyPlacementPolicy, placement_shapes
from incsched.policy.placement_policy import DEFAULT_CHECKPOINT, PlacementPolicy, PolicyConfig, load_placement_policy, save_placement_policy
from incsched.policy.stage_decoder import NumpyStagePolicy, graph_arrays
from incsched.policy.stage_policy import StagePolicy, default_stage_checkpoint, graph_tensors, load_stage_policy, save_stage_policy
from incsched.problems import PlacementProblem, StageProblem

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = pytest.mark.skipif(not (default_stage_checkpoint().exists() and DEFAULT_CHECKPOINT.exists()), reason="no shipped policies")

# Embeddings and head parts are float32 sums of ~100 products per layer over 2-3 layers, with BLAS
# and torch free to order each dot product differently: measured differences are at most 1e-6 on
# values up to ~7 (a few ulps). 1e-5 absolute plus 1e-5 relative leaves 10x room for other BLAS
# builds and still fails on any real mismatch (a wrong weight or operation moves values by >1e-2).
ATOL = RTOL = 1e-5


def _benchmark_graphs() -> list[CompGraph]:
    """The benchmark shapes (benchmarks/never_worse.py), at their default sizes and a jittered variant."""
    return [ffnn(), chained_matmul(), transformer_block(), transformer_block(n_blocks=2),
            ffnn(n_layers=5, tiles=3), transformer_block(n_blocks=1, heads=4, ffn_tiles=2, jitter=0.1, seed=3)]


def _shipped_graphs() -> list[CompGraph]:
    return [CompGraph.load(ROOT / "data" / "graphs" / f"{name}.json.gz") for name in ("resnet18", "bert_base")]


def _numpy_placement(model: PlacementPolicy) -> NumpyPlacementPolicy:
    return NumpyPlacementPolicy({k: v.detach().numpy() for k, v in model.state_dict().items()}, model.config.to_dict())


def _numpy_stage(model: StagePolicy) -> NumpyStagePolicy:
    return NumpyStagePolicy({k: v.detach().numpy() for k, v in model.state_dict().items()}, model.config)


@pytest.mark.parametrize("seed", [0, 1])
def test_numpy_heads_match_torch_on_random_policies(seed):
    torch.manual_seed(seed)
    placement = PlacementPolicy(PolicyConfig(hidden=16, n_layers=3, head_hidden=8)).eval()
    stage = StagePolicy(hidden=16, n_layers=2, decoder_hidden=8).eval()
    for g in (ffnn(n_layers=3, tiles=2), transformer_block(n_blocks=1, heads=2, ffn_tiles=2, jitter=0.2, seed=seed)):
        p = PlacementProblem.identical(g, 3)
        with torch.no_grad():
            ht = placement.numpy_heads(p)
        hn = _numpy_placement(placement).numpy_heads(p)
        for name in ("sel_part", "plc_part", "sel_dyn", "sel_out", "plc_dyn", "plc_out"):
            np.testing.assert_allclose(getattr(hn, name), getattr(ht, name), rtol=RTOL, atol=ATOL, err_msg=name)
        s = StageProblem(g, 3)
        np.testing.assert_allclose(_numpy_stage(stage)._node_terms_array(graph_arrays(s)), stage._node_terms_array(graph_tensors(s)),
                                   rtol=RTOL, atol=ATOL)


@SHIPPED
def test_numpy_embeddings_match_torch_on_the_shipped_policies():
    tp, npp = load_placement_policy(), NumpyPlacementPolicy.load()
    ts, nps = load_stage_policy()[0], NumpyStagePolicy.load()
    for g in _shipped_graphs() + _benchmark_graphs()[:2]:
        p = PlacementProblem.identical(g, 4)
        with torch.no_grad():
            ht = tp.numpy_heads(p)
        hn = npp.numpy_heads(p)
        np.testing.assert_allclose(hn.sel_part, ht.sel_part, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(hn.plc_part, ht.plc_part, rtol=RTOL, atol=ATOL)
        s = StageProblem(g, 4)
        np.testing.assert_allclose(nps._node_terms_array(graph_arrays(s)), ts._node_terms_array(graph_tensors(s)), rtol=RTOL, atol=ATOL)


@SHIPPED
@pytest.mark.parametrize("devices", [4, 8])
def test_numpy_and_torch_paths_decode_the_same_answers(devices):
    """Greedy and every sampled row, both policies: the rows the pre-schedulers choose among."""
    tp, npp = load_placement_policy(), NumpyPlacementPolicy.load()
    ts, nps = load_stage_policy()[0], NumpyStagePolicy.load()
    for g in _benchmark_graphs() + _shipped_graphs():
        p = PlacementProblem.identical(g, devices)
        a, b = tp.preschedule(p, 0, samples=64, temperature=0.3), npp.preschedule(p, 0, samples=64, temperature=0.3)
        assert np.array_equal(a.device, b.device) and a.order == b.order and np.array_equal(a.start, b.start), (g.n_nodes, devices)
        s = StageProblem(g, devices)
        rt, lt = ts.decode_samples(s, 32, np.random.default_rng(1), temperature=0.5, include_greedy=True)
        rn, ln = nps.decode_samples(s, 32, np.random.default_rng(1), temperature=0.5, include_greedy=True)
        assert np.array_equal(rt, rn), (g.n_nodes, devices)
        np.testing.assert_allclose(ln, lt, rtol=1e-6, atol=1e-6)


@SHIPPED
@pytest.mark.parametrize("kind", ["placement", "stage"])
def test_shipped_npz_equals_the_checkpoint_exactly(kind):
    path = DEFAULT_CHECKPOINT if kind == "placement" else default_stage_checkpoint()
    state, _ = load_checkpoint(path, kind=kind)
    policy = NumpyPlacementPolicy if kind == "placement" else NumpyStagePolicy
    arrays = policy.load(path).weights
    assert numpy_weights_path(path).is_file() and set(arrays) == set(state)
    for key, value in state.items():
        assert arrays[key].dtype == np.float32 and np.array_equal(arrays[key], value.numpy()), key


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(5)
    path = tmp_path / "p.pt"
    save_placement_policy(PlacementPolicy(PolicyConfig(hidden=8, n_layers=1, head_hidden=8)), path)
    return path


def _load(path):
    return load_numpy_weights(path, kind="placement", layout=PLACEMENT_LAYOUT, shapes=placement_shapes)


def _rewrite_npz(path, edit):
    npz = numpy_weights_path(path)
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    np.savez(npz, **arrays)


def test_save_checkpoint_writes_an_npz_equal_to_its_weights(saved):
    arrays, meta = _load(saved)
    state, _ = load_checkpoint(saved, kind="placement")
    assert all(np.array_equal(arrays[k], v.numpy()) for k, v in state.items()) and set(arrays) == set(state)


@pytest.mark.parametrize("edit, message", [
    (lambda a: a["sel_out.bias"].__setitem__(0, 1.0), "is corrupt or was edited"),
    (lambda a: a.pop("sel_out.bias"), "is corrupt or was edited"),
    (lambda a: a.__setitem__("__checkpoint_sha256__", np.array("0" * 64)), "is stale"),
])
def test_a_tampered_or_stale_npz_is_refused_and_torch_reads_the_checkpoint(saved, edit, message, caplog):
    _rewrite_npz(saved, edit)
    with pytest.raises(CheckpointError, match=message) as err:
        _load(saved)
    assert "\n" not in str(err.value) and "p.npz" in str(err.value)
    arrays, _ = load_weight_arrays(saved, kind="placement", layout=PLACEMENT_LAYOUT, shapes=placement_shapes)
    state, _ = load_checkpoint(saved, kind="placement")
    assert all(np.array_equal(arrays[k], v.numpy()) for k, v in state.items())
    assert "reading the weights with torch instead" in caplog.text


def test_a_corrupt_npz_is_a_one_line_error(saved):
    numpy_weights_path(saved).write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(CheckpointError, match="cannot be read as numpy weights") as err:
        _load(saved)
    assert "\n" not in str(err.value)


def test_an_npz_whose_shapes_do_not_fit_the_architecture_is_refused(saved):
    from incsched.policy.checkpoint import _arrays_digest

    def grow(a):
        a["sel_out.bias"] = np.zeros(2, np.float32)
        a["__arrays_sha256__"] = np.array(_arrays_digest({k: v for k, v in a.items() if not k.startswith("__")}))

    _rewrite_npz(saved, grow)
    with pytest.raises(CheckpointError, match=r"weight sel_out.bias is float32\[2\], expected float32\[1\]"):
        _load(saved)


def test_a_checkpoint_saved_after_its_npz_makes_it_stale(saved, tmp_path):
    old = numpy_weights_path(saved).read_bytes()
    torch.manual_seed(6)
    save_placement_policy(PlacementPolicy(PolicyConfig(hidden=8, n_layers=1, head_hidden=8)), saved)
    numpy_weights_path(saved).write_bytes(old)
    with pytest.raises(CheckpointError, match="is stale"):
        _load(saved)


def test_the_env_variable_hides_the_npz(saved, monkeypatch, caplog):
    _rewrite_npz(saved, lambda a: a["sel_out.bias"].__setitem__(0, 1.0))  # refused if it were read
    monkeypatch.setenv(NO_NPZ_ENV, "1")
    load_weight_arrays(saved, kind="placement", layout=PLACEMENT_LAYOUT, shapes=placement_shapes)
    assert "reading the weights with torch instead" not in caplog.text


def test_stage_checkpoints_get_their_npz_too(tmp_path):
    torch.manual_seed(7)
    model = StagePolicy(hidden=8, n_layers=1, decoder_hidden=8)
    path = tmp_path / "s.pt"
    save_stage_policy(path, model)
    loaded = NumpyStagePolicy.load(path)
    assert all(np.array_equal(loaded.weights[k], v.numpy()) for k, v in model.state_dict().items())


# A fresh interpreter pre-schedules with both shipped policies, as `solve(p, "rl")` does, and
# reports whether torch got imported.
NO_TORCH_SCRIPT = """
import sys
import incsched
from incsched.generators import ffnn
g = ffnn(n_layers=3, tiles=2)
r1 = incsched.solve(incsched.PlacementProblem.identical(g, 4), "rl", time_limit=1)
r2 = incsched.solve(incsched.StageProblem(g, 3), "rl", time_limit=1)
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("RL_WITHOUT_TORCH", r1.method, r2.method, loaded[:3])
"""


@SHIPPED
def test_rl_in_a_fresh_process_does_not_import_torch():
    run = subprocess.run([sys.executable, "-c", NO_TORCH_SCRIPT], check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "RL_WITHOUT_TORCH rl rl []" in run.stdout, run.stdout[-2000:]


def test_a_decoder_cached_for_another_cpu_reads_as_not_cached(monkeypatch):
    # numba keys its cache by CPU: a venv copied to another machine must take the slow, safe path.
    from incsched.policy import compiled
    from incsched.policy.warm import KERNELS, loads_quickly, warm

    warm()  # `make install` did this already: cached, marked
    monkeypatch.setattr(compiled, "_ready", {})  # as in a fresh process
    assert all(compiled.is_cached(k) for k in KERNELS) and loads_quickly("placement")
    monkeypatch.setattr(compiled, "cpu_fingerprint", lambda: "another-cpu")
    assert not any(compiled.is_cached(k) for k in KERNELS) and not loads_quickly("stage")
    monkeypatch.undo()
    monkeypatch.setattr(compiled, "_ready", {})
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/elsewhere")  # a cache kept elsewhere is not looked for
    assert not compiled.is_cached(KERNELS[0])
