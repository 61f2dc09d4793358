"""Calibration: per-node kernel and launch times, link fits, and ``incsched profile`` end to end.

CPU only. Timings on a shared 2-core machine are noisy, so nothing here asserts a tight time: the
checks are coverage, signs, shapes, round trips, and factors of tens.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from incsched.capture import capture
from incsched.execute.calibrate import (
    CalibrationError,
    LinkMeasurement,
    NodeTimes,
    _charge_ranges,
    _fit_link,
    calibrated_devices,
    measure_links,
    profile_node_times,
    with_measured_times,
)
from incsched.execute import cpu_time_threads
from incsched.formats import load_graph, save_graph
from incsched.graph import CompGraph
from incsched.problems import Links, PlacementProblem

pytestmark = pytest.mark.slow  # measures node and link times by running them


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Intra-op threads contend with every other process on a small shared machine; one thread
    # makes the measurements steadier without changing what is measured.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def small_net():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    ).eval()
    # torch.fx tracing (module calls as nodes) is much faster than torch.export; the command-line
    # test below covers the export path.
    return capture(model, (torch.randn(2, 3, 32, 32),), method="fx", coarsen="trivial", name="small_net")


@pytest.fixture(scope="module")
def small_times(small_net):
    return profile_node_times(small_net, "cpu", repeats=3, warmup=1)


# ---------------------------------------------------------------------- node times


def test_node_times_cover_every_graph_node_and_are_non_negative(small_net, small_times):
    t = small_times
    assert t.names == small_net.graph.names
    for arr in (t.kernel, t.launch, t.ops):
        assert arr.shape == (small_net.graph.n_nodes,)
        assert np.all(np.isfinite(arr)) and np.all(arr >= 0)
    assert t.launch_per_op > 0 and t.wall_seconds > 0
    np.testing.assert_allclose(t.total(), t.kernel + t.launch)
    np.testing.assert_allclose(t.launch, t.ops * t.launch_per_op)
    assert t.regime in ("kernel-bound", "mixed", "launch-bound")
    assert t.device == "cpu" and t.kind == "cpu"


def test_ops_are_charged_to_the_graph_nodes_that_issue_them(small_net, small_times):
    graph, t = small_net.graph, small_times
    fx_ops = {n.name: n.op for n in small_net.graph_module.graph.nodes}
    for v, members in enumerate(graph.members):
        calls = [m for m in members if fx_ops[m] in ("call_function", "call_module")]
        if calls:
            assert t.ops[v] >= len(calls), graph.names[v]  # every ATen call issues at least one op
            assert t.kernel[v] > 0, graph.names[v]
        elif all(fx_ops[m] == "placeholder" for m in members):
            assert t.ops[v] == 0 and t.kernel[v] == 0, graph.names[v]
    convs = [v for v, op in enumerate(graph.op) if "conv" in op]
    assert len(convs) == 2 and all(t.kernel[v] > 0 for v in convs)


def test_kernel_sum_is_within_a_sane_factor_of_the_wall_time(small_times):
    t = small_times
    assert t.conditions["threads"] == 1
    assert t.wall_seconds / 50 < t.kernel_seconds < 20 * t.wall_seconds
    assert math.isclose(t.kernel_share, t.kernel_seconds / t.wall_seconds)
    summary = t.summary()
    assert summary["regime"] == t.regime and summary["ops"] == int(t.ops.sum())
    json.dumps(summary, allow_nan=False)  # goes into graph meta: must be plain JSON


def test_profiling_leaves_the_capture_usable(small_net):
    before = small_net.graph_module(*small_net.example_inputs)
    profile_node_times(small_net, "cpu", repeats=1, warmup=0)
    after = small_net.graph_module(*small_net.example_inputs)
    torch.testing.assert_close(before, after)


def _event(name, cpu_us=0.0, device_us=0.0, children=(), device_type=torch.autograd.DeviceType.CPU):
    return SimpleNamespace(
        name=name, cpu_time_total=cpu_us, device_time_total=device_us, cpu_children=list(children),
        device_type=device_type, is_async=False,
    )


def test_ranges_charge_their_ops_kernel_time_not_the_annotation_span():
    # What the profiler gives on CUDA: the range on the CPU (its device total would include the
    # annotation's GPU copy), the ATen ops below it with their kernels, and the GPU-side copy.
    conv = _event("aten::conv2d", cpu_us=30, device_us=100)
    add = _event("aten::add", cpu_us=10, device_us=5)
    launch = _event("cudaLaunchKernel", cpu_us=4)  # runtime calls are not ops
    cpu_range = _event("incsched.fx/conv", cpu_us=60, device_us=500, children=[conv, add, launch])
    gpu_copy = _event("incsched.fx/conv", device_us=400, device_type=torch.autograd.DeviceType.CUDA)
    other = _event("aten::relu", cpu_us=3, device_us=2)  # outside every range: nobody's
    second = _event("incsched.fx/conv", cpu_us=90, children=[_event("aten::conv2d", cpu_us=80, device_us=300)])
    events = [cpu_range, gpu_copy, other, second]

    gpu = _charge_ranges(events, on_gpu=True)
    assert gpu == {"conv": (pytest.approx(1e-6 * (105 + 300) / 2), 2)}  # median of 105 and 300 us; 2 ops
    cpu = _charge_ranges(events, on_gpu=False)
    assert cpu["conv"][0] == pytest.approx(1e-6 * (40 + 80) / 2)


def test_profiling_uses_the_threads_asked_for_and_restores_the_callers(small_net):
    assert torch.get_num_threads() == 1  # the module's fixture
    t = profile_node_times(small_net, "cpu", repeats=1, warmup=0, threads=2)
    assert t.conditions["threads"] == 2 and torch.get_num_threads() == 1
    graph = with_measured_times(small_net.graph, t)
    assert graph.meta["calibration"]["cpu"]["threads"] == 2 and cpu_time_threads(graph) == 2


def test_profile_rejects_bad_arguments(small_net):
    with pytest.raises(CalibrationError, match="repeats"):
        profile_node_times(small_net, "cpu", repeats=0)
    with pytest.raises(CalibrationError, match="threads"):
        profile_node_times(small_net, "cpu", repeats=1, threads=0)
    if not torch.cuda.is_available():
        with pytest.raises(CalibrationError, match="CUDA is not available"):
            profile_node_times(small_net, "cuda:0", repeats=1)
    with pytest.raises(CalibrationError, match="only cpu and cuda"):
        profile_node_times(small_net, "meta", repeats=1)


# ---------------------------------------------------------------------- into the graph


def _times(names, kernel, launch=None, device="cpu"):
    kernel = np.asarray(kernel, dtype=float)
    launch = np.zeros_like(kernel) if launch is None else np.asarray(launch, dtype=float)
    return NodeTimes(tuple(names), kernel, launch, np.ones(len(names), dtype=np.int64), 1e-6, float(kernel.sum()), device, "kernel-bound")


def test_with_measured_times_orders_by_name_and_keeps_other_kinds():
    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], compute_time={"tpu": [1.0, 2.0, 3.0]})
    t = _times(["c", "a", "b"], [3e-3, 1e-3, 2e-3], [1e-5, 2e-5, 3e-5])
    out = with_measured_times(g, t)
    np.testing.assert_allclose(out.time("cpu"), [1e-3 + 2e-5, 2e-3 + 3e-5, 3e-3 + 1e-5])
    np.testing.assert_allclose(out.time("tpu"), [1.0, 2.0, 3.0])
    assert out.meta["calibration"]["cpu"]["regime"] == "kernel-bound"
    assert "torch_version" in out.meta["calibration"]["cpu"]
    again = with_measured_times(out, _times(["a", "b", "c"], [1.0, 1.0, 1.0], device="cpu"), kind="cuda")
    assert set(again.compute_time) == {"cpu", "cuda", "tpu"}
    assert set(again.meta["calibration"]) == {"cpu", "cuda"}
    assert g.compute_time.keys() == {"tpu"}  # the input graph is untouched


def test_measured_graph_round_trips_through_the_json_format(small_net, small_times, tmp_path):
    graph = with_measured_times(small_net.graph, small_times)
    np.testing.assert_allclose(graph.time("cpu"), small_times.total())
    path = tmp_path / "small.json.gz"
    save_graph(graph, path)
    back = load_graph(path)
    assert back == graph
    assert back.meta["calibration"]["cpu"]["launch_per_op_s"] == small_times.launch_per_op


@pytest.mark.parametrize(
    "names, match",
    [
        (["a", "b", "x"], "'c'"),  # a graph node not measured (and an unknown one)
        (["a", "b"], "1 graph node"),
        (["a", "b", "c", "d"], "'d'"),
        (["a", "b", "b"], "'c'"),
    ],
)
def test_with_measured_times_rejects_mismatched_names(names, match):
    g = CompGraph(["a", "b", "c"], ["a"], ["b"])
    with pytest.raises(CalibrationError, match=match):
        with_measured_times(g, _times(names, [1e-3] * len(names)))


def test_with_measured_times_rejects_duplicate_measured_names():
    g = CompGraph(["a", "b"], ["a"], ["b"])
    with pytest.raises(CalibrationError, match="duplicate"):
        with_measured_times(g, _times(["a", "b", "b"], [1e-3] * 3))


# ---------------------------------------------------------------------- links


def test_fit_recovers_an_exact_latency_and_bandwidth():
    sizes = np.array([4e3, 6.4e4, 1e6, 1.6e7])
    lat, bw = _fit_link(sizes, 5e-6 + sizes / 2e10)
    assert lat == pytest.approx(5e-6, rel=1e-6)
    assert bw == pytest.approx(2e10, rel=1e-6)


def test_fit_clamps_a_negative_intercept_and_handles_one_size():
    sizes = np.array([1e3, 1e6])
    lat, bw = _fit_link(sizes, np.array([1e-9, 1e-3]))  # a line through these meets the axis below 0
    assert lat >= 0 and 0 < bw < math.inf
    assert _fit_link(np.array([1e6]), np.array([1e-3])) == (0.0, pytest.approx(1e9))
    lat, bw = _fit_link(np.array([1e3, 1e6]), np.array([2e-3, 1e-3]))  # noise: larger copy faster
    assert lat == 0.0 and bw == pytest.approx(1e9)


def test_measure_links_on_one_host_gives_a_valid_links_matrix():
    sizes = [4 << 10, 64 << 10, 256 << 10]
    m = measure_links(["cpu", "cpu"], sizes, repeats=2, warmup=1)
    assert m.devices == ("cpu", "cpu") and m.sizes == tuple(sizes)
    assert m.seconds.shape == (2, 2, 3)
    assert np.all(np.isnan(m.seconds[[0, 1], [0, 1]]))
    assert np.all(m.seconds[0, 1] > 0) and np.all(m.seconds[1, 0] > 0)
    for i, j in m.pairs():
        assert 0 <= m.latency[i, j] < math.inf
        assert 0 < m.bandwidth[i, j] < math.inf
        assert "memory copy" in m.method(i, j)
    links = m.to_links()
    lat, bw = links.matrices(2)
    np.testing.assert_array_equal(lat, m.latency)
    np.testing.assert_array_equal(bw, m.bandwidth)

    g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[1 << 20, 0], compute_time={"cpu": [1e-3, 1e-3]})
    problem = PlacementProblem(g, calibrated_devices(m.devices), links)
    assert [d.name for d in problem.devices] == ["cpu", "cpu#1"]

    data = json.loads(json.dumps(m.to_dict(), allow_nan=False))
    back = LinkMeasurement.from_dict(data)
    assert back.to_links() == links
    np.testing.assert_array_equal(back.seconds, m.seconds)
    assert Links.from_dict(data["links"]) == links


def test_measure_links_rejects_bad_input():
    with pytest.raises(CalibrationError, match="at least one device"):
        measure_links([])
    with pytest.raises(CalibrationError, match="positive"):
        measure_links(["cpu", "cpu"], sizes=[0])
    if not torch.cuda.is_available():
        with pytest.raises(CalibrationError, match="CUDA"):
            measure_links(["cpu", "cuda:0"], sizes=[4096])
    with pytest.raises(CalibrationError, match="format"):
        LinkMeasurement.from_dict({"devices": []})


def test_calibrated_devices_names_kinds_and_memory():
    devs = calibrated_devices(["cpu", "cuda:0", "cpu"], memory=[None, 80 << 30, 1 << 30])
    assert [(d.name, d.kind, d.speed, d.memory) for d in devs] == [
        ("cpu", "cpu", 1.0, None),
        ("cuda:0", "cuda", 1.0, 80 << 30),
        ("cpu#1", "cpu", 1.0, 1 << 30),
    ]
    assert [d.memory for d in calibrated_devices(["cpu", "cpu"], memory=123)] == [123, 123]
    assert calibrated_devices(["cpu"], memory="auto")[0].memory is None
    with pytest.raises(CalibrationError, match="2 entries for 1"):
        calibrated_devices(["cpu"], memory=[1, 2])
    with pytest.raises(CalibrationError, match="not a torch device"):
        calibrated_devices(["gpu0"])
