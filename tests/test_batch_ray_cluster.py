"""The Ray engine joins a running cluster by its address and spreads the solves over its nodes:
a head and a second node on this machine (`ray.cluster_utils.Cluster`), each with a custom resource
naming it and one CPU."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from incsched.batch import ProblemRecipe, graph_files, run_batch

from batch_support import descendants, graph_folder, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.long]  # two Ray nodes start and stop


@pytest.fixture(scope="module")
def two_node_cluster(ray_sandbox):
    # a folder of its own (the Ray a test starts without an address too), loopback only
    with ray_sandbox() as temp:
        from ray.cluster_utils import Cluster

        small = dict(num_cpus=1, object_store_memory=80 * 2**20, node_ip_address="127.0.0.1")
        cluster = Cluster(initialize_head=True, head_node_args={**small, "resources": {"node_a": 1}, "include_dashboard": False,
                                                                 "temp_dir": temp})
        nodes = {"node_a": cluster.head_node, "node_b": cluster.add_node(**small, resources={"node_b": 1})}
        cluster.wait_for_nodes()
        assert cluster.address.startswith("127.0.0.1:")
        yield cluster, {name: node.node_id for name, node in nodes.items()}
        cluster.shutdown()


def test_a_batch_runs_on_both_nodes_of_a_cluster(two_node_cluster, tmp_path):
    import ray

    cluster, node_ids = two_node_cluster
    folder = graph_folder(tmp_path / "graphs", range(4), 30, 6, param_bytes=(0, 10_000), out_bytes=(1, 500))
    # submitted at once, the first two solves take each node's one CPU: both nodes must serve
    items = run_batch(graph_files(folder), tmp_path / "out", ProblemRecipe("stage", n_stages=4), engine="ray",
                      address=cluster.address, time_limit=5)
    assert [it.outcome for it in items] == ["solved"] * 4, [it.error for it in items]
    ran_on = {it.extra["node"] for it in items}
    assert ran_on == set(node_ids.values())
    assert not ray.is_initialized()  # the batch joined the cluster and left it; the cluster stays up
    assert cluster.remaining_processes_alive()


def test_without_an_address_a_ray_of_its_own_is_started_and_stopped(two_node_cluster, tmp_path):
    """Even beside a running cluster: no address means a new local Ray, gone when the batch is."""
    import ray

    cluster, node_ids = two_node_cluster
    folder = graph_folder(tmp_path / "graphs", range(2), 12, 4)
    before = set(descendants(os.getpid()))
    items = run_batch(graph_files(folder), tmp_path / "out", ProblemRecipe("stage", n_stages=2), engine="ray", jobs=1, time_limit=5)
    assert [it.outcome for it in items] == ["solved"] * 2
    assert {it.extra["node"] for it in items}.isdisjoint(node_ids.values())
    assert not ray.is_initialized()
    assert wait_gone(set(descendants(os.getpid())) - before, 10.0) == []
