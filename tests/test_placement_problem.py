"""Tests of the placement problem and its modules (incsched.problems.placement, .devices, .answers):
devices, links, device symmetry, tick conversion, validation, JSON, Placement, windows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incsched.errors import FormatError
from incsched.graph import CompGraph
from incsched.problems import (
    Device,
    Links,
    Placement,
    PlacementError,
    PlacementInfeasibleError,
    PlacementProblem,
    PlacementWindow,
)
from incsched.problems.units import MIN_WORK_TICKS


def chain3(**kw) -> CompGraph:
    # a -> b -> c; seconds 1, 2, 3 on cpu; a sends 100 bytes, b 300 bytes.
    return CompGraph(
        ["a", "b", "c"], ["a", "b"], ["b", "c"],
        out_bytes=[100, 300, 0], compute_time={"cpu": [1.0, 2.0, 3.0], "cuda": [0.5, 0.5, 0.5]}, **kw,
    )


def test_durations_follow_kind_and_speed():
    p = PlacementProblem(chain3(), [Device("c0"), Device("c1", speed=2.0), Device("g", kind="cuda")], time_unit=0.5)
    # seconds / speed / time_unit: cpu 1,2,3 -> 2,4,6 ticks; double speed -> 1,2,3; cuda 0.5 -> 1.
    assert p.durations().tolist() == [[2, 1, 1], [4, 2, 1], [6, 3, 1]]
    assert np.allclose(p.durations_seconds()[:, 1], [0.5, 1.0, 1.5])


def test_uniform_transfer_is_latency_plus_bytes_over_bandwidth_and_free_on_one_device():
    p = PlacementProblem.identical(chain3(), 2, latency=1.0, bandwidth=100.0, time_unit=0.5)
    # edge a->b: 1 s + 100/100 s = 2 s = 4 ticks; b->c: 1 + 3 = 4 s = 8 ticks.
    assert p.uniform_transfer_ticks().tolist() == [4, 8]
    t = p.transfer_ticks()
    assert t.shape == (2, 2, 2)
    assert t[:, 0, 0].tolist() == [0, 0] and t[:, 1, 1].tolist() == [0, 0]
    assert t[:, 0, 1].tolist() == [4, 8] and t[:, 1, 0].tolist() == [4, 8]


def test_per_pair_links():
    lat = [[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]
    bw = [[math.inf, 100.0, 50.0], [100.0, math.inf, math.inf], [50.0, math.inf, math.inf]]
    p = PlacementProblem(chain3(), [Device(f"d{i}") for i in range(3)], Links(lat, bw), time_unit=1.0)
    t = p.transfer_ticks()
    assert t[0, 0, 1] == 2 and t[0, 0, 2] == 4 and t[0, 1, 2] == 0  # 1+100/100, 2+100/50, free link
    assert p.uniform_transfer_ticks() is None
    assert p.identical_devices == ((0,), (1,), (2,))  # d1 and d2 sit at different distances from d0
    sym = PlacementProblem(chain3(), [Device(f"d{i}") for i in range(3)], Links([[0, 1, 1], [1, 0, 3], [1, 3, 0]]))
    assert sym.identical_devices == ((0,), (1, 2))


def test_infinite_bandwidth_and_zero_latency_mean_free_transfers():
    p = PlacementProblem.identical(chain3(), 3, time_unit=1.0)
    assert p.uniform_transfer_ticks().tolist() == [0, 0]
    assert p.identical_devices == ((0, 1, 2),)


def test_every_node_lasts_at_least_one_tick():
    g = CompGraph(["a", "b"], ["a"], ["b"], compute_time={"cpu": [0.0, 0.2]})
    p = PlacementProblem.identical(g, 1, time_unit=1.0)
    assert p.durations()[:, 0].tolist() == [1, 1]  # 0 s and 0.2 s both become one tick


def test_rounding_is_half_up():
    g = CompGraph(["a", "b"], [], [], compute_time={"cpu": [2.5, 3.5]})
    assert PlacementProblem.identical(g, 1, time_unit=1.0).durations()[:, 0].tolist() == [3, 4]


@given(st.lists(st.floats(1e-7, 10.0), min_size=1, max_size=30))
@settings(max_examples=40, deadline=None)
def test_auto_time_unit_is_round_and_gives_the_minimum_work(times):
    g = CompGraph([f"n{i}" for i in range(len(times))], [], [], compute_time={"cpu": times})
    p = PlacementProblem.identical(g, 2)
    mant = p.time_unit / 10.0 ** math.floor(math.log10(p.time_unit))
    assert any(abs(mant - m) < 1e-6 for m in (1.0, 2.0, 5.0))
    total = sum(times) / p.time_unit
    assert MIN_WORK_TICKS * (1 - 1e-9) <= total <= 2.5 * MIN_WORK_TICKS * (1 + 1e-9)


def test_bounds_hand_computed():
    # cpu ticks 2, 4, 6 (time unit 0.5): critical path 12; work 12 / 4 devices = 3.
    p = PlacementProblem.identical(chain3(), 4, time_unit=0.5)
    assert p.critical_path_ticks() == 12 and p.total_work_ticks() == 12 and p.lower_bound_ticks() == 12
    g = CompGraph(["a", "b", "c"], [], [], compute_time={"cpu": [1.0, 1.0, 1.0]})
    assert PlacementProblem.identical(g, 2, time_unit=1.0).lower_bound_ticks() == 2  # ceil(3 / 2)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda g: PlacementProblem(g, []), "no devices"),
        (lambda g: PlacementProblem(g, [Device("a"), Device("a")]), "duplicate device name 'a'"),
        (lambda g: PlacementProblem(g, [Device("a")], time_unit=0.0), "time_unit"),
        (lambda g: PlacementProblem(g, [Device("a"), Device("b")], Links([[0, 1, 1]] * 3)), r"\(2, 2\)"),
        (lambda g: Device("a", speed=0.0), "speed"),
        (lambda g: Device("a", speed=float("nan")), "speed"),
        (lambda g: Device("a", memory=-1), "memory"),
        (lambda g: Device("", kind="cpu"), "name"),
        (lambda g: Links(latency=-1.0), "latency"),
        (lambda g: Links(bandwidth=0.0), "bandwidth"),
    ],
)
def test_bad_problems_are_rejected(make, match):
    with pytest.raises(PlacementError, match=match):
        make(chain3())


def test_node_too_big_for_every_device_is_infeasible_and_named():
    g = chain3(param_bytes=[10, 5000, 10])
    with pytest.raises(PlacementInfeasibleError, match="'b'") as info:
        PlacementProblem(g, [Device("d0", memory=1000), Device("d1", memory=4000)])
    assert info.value.node == "b"
    # One device without a limit makes it placeable.
    PlacementProblem(g, [Device("d0", memory=1000), Device("d1")])


def test_allowed_devices_follow_memory():
    g = chain3(param_bytes=[10, 500, 10])
    p = PlacementProblem(g, [Device("small", memory=100), Device("big", memory=1000)], time_unit=1.0)
    assert p.allowed_devices().tolist() == [[True, True], [False, True], [True, True]]
    assert p.identical_devices == ((0,), (1,))


def test_json_round_trip_and_files(tmp_path):
    lat = [[0.0, 1e-3], [2e-3, 0.0]]
    p = PlacementProblem(
        chain3(param_bytes=[1, 2, 3]),
        [Device("c", memory=100), Device("g", kind="cuda", speed=1.5)],
        Links(lat, [[math.inf, 1e9], [5e8, math.inf]]),
    )
    q = PlacementProblem.from_json(p.to_json())
    assert q == p and q.time_unit == p.time_unit
    assert np.array_equal(q.durations(), p.durations()) and np.array_equal(q.transfer_ticks(), p.transfer_ticks())
    for name in ("p.json", "p.json.gz"):
        p.save(tmp_path / name)
        assert PlacementProblem.load(tmp_path / name) == p


def test_json_errors_name_the_source():
    d = PlacementProblem.identical(chain3(), 2).to_json()
    with pytest.raises(FormatError, match="version"):
        PlacementProblem.from_json({**d, "version": 99}, source="x.json")
    with pytest.raises(FormatError, match="x.json"):
        PlacementProblem.from_json({"format": "nope"}, source="x.json")
    with pytest.raises(FormatError, match="devices"):
        PlacementProblem.from_json({k: v for k, v in d.items() if k != "devices"})


def test_placement_validation():
    Placement([0, 1, 0], [(0, 2), (1,)])
    with pytest.raises(PlacementError, match="twice"):
        Placement([0, 0, 0], [(0, 1, 1), ()])
    with pytest.raises(PlacementError, match="no device's order"):
        Placement([0, 0, 0], [(0, 1), ()])
    with pytest.raises(PlacementError, match="placed on device 1"):
        Placement([0, 1, 0], [(0, 1, 2), ()])
    with pytest.raises(PlacementError, match="device 5"):
        Placement([0, 5, 0], [(0, 2), ()])


def test_placement_from_assignment_orders_by_start_then_priority():
    pl = Placement.from_assignment([0, 0, 1, 0], 2, start=[5, 1, 0, 1])
    assert pl.order == ((1, 3, 0), (2,))  # ties at 1 broken by index
    pl = Placement.from_assignment([0, 0, 1, 0], 3, priority=[3, 2, 1, 0])
    assert pl.order == ((3, 1, 0), (2,), ())


def test_placement_relabel_and_json():
    pl = Placement([0, 1, 1], [(0,), (1, 2)], start=[0, 0, 3], method="x")
    r = pl.relabel([1, 0])
    assert r.device.tolist() == [1, 0, 0] and r.order == ((1, 2), (0,))
    assert Placement.from_json(pl.to_json()) == pl
    with pytest.raises(PlacementError, match="permutation"):
        pl.relabel([0, 0])


def test_window():
    p = PlacementProblem.identical(chain3(), 2, time_unit=1.0)
    w = PlacementWindow.from_devices([[0], [0, 1], [1]], 2, start_lo=[0, 0, 0], start_hi=[0, 5, 10])
    assert w.contains(p, np.array([0, 1, 1]), np.array([0, 5, 7]))
    assert not w.contains(p, np.array([1, 1, 1]))
    assert not w.contains(p, np.array([0, 1, 1]), np.array([0, 6, 7]))
    with pytest.raises(PlacementError, match="empty start range"):
        PlacementWindow(start_lo=[3], start_hi=[2])
    with pytest.raises(PlacementError, match="allowed"):
        PlacementWindow(np.ones((3, 3), bool)).check(p)


def test_signature_ignores_names_and_sees_costs():
    def chain(names, secs, params):
        g = CompGraph(names, names[:-1], names[1:], out_bytes=[100] * len(names), param_bytes=params,
                      compute_time={"cpu": secs})
        return PlacementProblem.identical(g, 2, bandwidth=1e3, time_unit=1.0)

    a = chain(["a", "b", "c"], [1.0, 2.0, 3.0], [0, 5, 0])
    assert a.signature() == chain(["x", "y", "z"], [1.0, 2.0, 3.0], [0, 5, 0]).signature()
    assert a.signature() != chain(["a", "b", "c"], [1.0, 2.0, 4.0], [0, 5, 0]).signature()
    assert a.signature() != chain(["a", "b", "c"], [1.0, 2.0, 3.0], [0, 6, 0]).signature()


# ---------------------------------------------------------------------- exact ticks, fast symmetry (issue 12)


def _closure_groups(devices, lat, bw):
    """The old O(D^3) definition: union of every swappable pair."""
    from incsched.problems.devices import _swappable

    D = len(devices)
    parent = list(range(D))

    def find(a):
        while parent[a] != a:
            a = parent[a]
        return a

    for a in range(D):
        for b in range(a + 1, D):
            if _swappable(devices, lat, bw, a, b):
                parent[find(b)] = find(a)
    groups = {}
    for d in range(D):
        groups.setdefault(find(d), []).append(d)
    return tuple(tuple(g) for g in sorted(groups.values()))


@pytest.mark.parametrize("seed", range(12))
def test_identical_devices_match_the_pairwise_definition(seed):
    import itertools as it

    rng = np.random.default_rng(seed)
    D = int(rng.integers(2, 9))
    # A few device classes; links by class pair, so same-class devices are (usually) swappable,
    # then a few entries perturbed so that some are not.
    cls = rng.integers(0, 3, size=D)
    table = rng.integers(1, 4, size=(3, 3)).astype(float)
    table = table + table.T
    lat = table[cls][:, cls] * 1e-3
    bw = np.full((D, D), 1e9)
    for _ in range(int(rng.integers(0, 3))):
        a, b = rng.integers(0, D, size=2)
        if a != b:
            lat[a, b] = lat[b, a] = 7e-3
    devices = [Device(f"d{i}", speed=1.0 + (cls[i] == 2), memory=None) for i in range(D)]
    g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[10, 0], compute_time={"cpu": [1e-3, 1e-3]})
    p = PlacementProblem(g, devices, Links(latency=lat, bandwidth=bw))
    assert p.identical_devices == _closure_groups(p.devices, lat, bw)
    del it


@pytest.mark.slow  # asserts a time: within 5 s
def test_identical_devices_are_fast_for_many_devices():
    import time as _time

    g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[10, 0], compute_time={"cpu": [1e-3, 1e-3]})
    D = 256
    lat = np.full((D, D), 1e-3)
    lat[:128, 128:] = lat[128:, :128] = 5e-3  # two islands
    t0 = _time.perf_counter()
    p = PlacementProblem(g, [Device(f"d{i}") for i in range(D)], Links(latency=lat))
    groups = p.identical_devices
    assert _time.perf_counter() - t0 < 5.0
    assert groups == (tuple(range(128)), tuple(range(128, 256)))
    assert len(PlacementProblem.identical(g, D).identical_devices) == 1
    with pytest.raises(PlacementError, match="at most 256"):
        PlacementProblem.identical(g, 1000)


@pytest.mark.parametrize(
    "links",
    [dict(latency=0.0, bandwidth=1e-6), dict(latency=1e12), dict(latency=1e-3, bandwidth=1e-9)],
)
def test_extreme_links_give_safe_ticks(links):
    from incsched.problems.placement import MAX_HORIZON_TICKS

    g = CompGraph(["a", "b", "c"], ["a", "b"], ["b", "c"], out_bytes=[10**6, 10**6, 0], compute_time={"cpu": [1e-9, 2e-9, 1e-9]})
    p = PlacementProblem.identical(g, 2, **links)
    ticks = p.transfer_ticks()
    assert ticks.min() >= 0 and p.durations().min() >= 1
    assert int(p.durations().max(axis=1).sum()) + int(ticks.max(axis=(1, 2)).sum()) <= MAX_HORIZON_TICKS
    with pytest.raises(PlacementError, match="2\\*\\*50"):
        PlacementProblem.identical(g, 2, time_unit=1e-12, **links)


def test_tiny_node_times_with_real_links_do_not_wrap():
    g = CompGraph(["a", "b"], ["a"], ["b"], out_bytes=[10**9, 0], compute_time={"cpu": [1e-300, 1e-300]})
    p = PlacementProblem.identical(g, 2, latency=1e-3, bandwidth=1e9)
    assert p.transfer_ticks().min() >= 0 and p.uniform_transfer_ticks()[0] > 0


def test_device_memory_compares_exactly():
    g = CompGraph(["a", "b"], ["a"], ["b"], param_bytes=[2**53 + 1, 1], compute_time={"cpu": [1.0, 1.0]})
    with pytest.raises(PlacementInfeasibleError, match="'a'"):
        PlacementProblem(g, [Device("d0", memory=2**53)])
    p = PlacementProblem(g, [Device("d0", memory=2**53), Device("d1", memory=2**80)])
    assert p.allowed_devices().tolist() == [[False, True], [True, True]]


@pytest.mark.parametrize("bad", [[1], {"latency": 0, "bw": 1}, {"bandwidth": [1, 2]}])
def test_malformed_links_are_refused_with_one_line(bad):
    from incsched.problems import Links, PlacementError

    with pytest.raises(PlacementError, match="links"):
        Links.from_dict(bad)
