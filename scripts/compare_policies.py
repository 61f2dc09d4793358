"""The shipped policies against retrained ones: pre-scheduler quality on held-out graphs (seeds training never draws).

    .venv/bin/python scripts/compare_policies.py [PLACEMENT.pt STAGE.pt]   # default: /tmp/retrain/*_policy.pt
"""
import statistics
import sys
from incsched.policy import placement_policy as pp, stage_policy as sp
from incsched.generators import chained_matmul, ffnn, transformer_block, respect_like, bandwidth_for_comm_ratio
from incsched.problems import PlacementProblem, StageProblem
from incsched.baselines.placement import critical_path_list
from incsched.evaluate.simulate import simulate
from incsched.evaluate.stage import evaluate_stages
from incsched.data import shipped_graphs, shipped_graph_path
from incsched.formats import load_graph

NEW = dict(zip(("placement", "stage"), sys.argv[1:3] or ["/tmp/retrain/placement_policy.pt", "/tmp/retrain/stage_policy.pt"]))
# placement: DOPPLER-shaped graphs, 4 and 8 devices, comm ratio 4
gs = []
for s in range(1000, 1006):
    gs += [transformer_block(n_blocks=1 + s % 2, jitter=0.1, seed=s), ffnn(n_layers=8, tiles=4, jitter=0.1, seed=s),
           chained_matmul(n_matrices=6 + s % 3, tiles=2 + s % 2, jitter=0.1, seed=s)]
ratios = {"shipped": [], "portable": []}  # "portable": the retrained files given
for g in gs:
    for D in (4, 8):
        p = PlacementProblem.identical(g, D, bandwidth=bandwidth_for_comm_ratio(g, 4.0, "cpu"))
        cpl = simulate(p, critical_path_list(p, 0), "ordered").makespan
        for name, ck in (("shipped", None), ("portable", NEW["placement"])):
            ratios[name].append(simulate(p, pp.preschedule(p, 0, checkpoint=ck), "ordered").makespan / cpl)
n = len(ratios["shipped"])
print(f"placement rl / cpl, {n} instances: shipped {statistics.mean(ratios['shipped']):.4f}  portable {statistics.mean(ratios['portable']):.4f}  "
      f"portable better on {sum(b < a for a, b in zip(ratios['shipped'], ratios['portable']))}, worse on {sum(b > a for a, b in zip(ratios['shipped'], ratios['portable']))}")
# stage: shipped graphs K 2/4/8 and respect_like held-out, rl+dp / best baseline
old_s, _ = sp.load_stage_policy(); new_s, _ = sp.load_stage_policy(NEW["stage"])
probs = [StageProblem.peer(load_graph(shipped_graph_path(n)), n_stages=k, alpha=100) for n in shipped_graphs() for k in (2, 4, 8)]
probs += [StageProblem.peer(respect_like(120, seed=s), n_stages=k, alpha=100) for s in range(10007, 10013) for k in (4, 8)]
r = {"shipped": [], "portable": []}
for p in probs:
    vals = {name: evaluate_stages(p, sp.preschedule(p, 0, policy=pol)).objective for name, pol in (("shipped", old_s), ("portable", new_s))}
    lo = min(vals.values())
    for name in r:
        r[name].append(float(vals[name] / lo))
print(f"stage rl+dp / better of the two, {len(probs)} instances: shipped {statistics.mean(r['shipped']):.4f}  portable {statistics.mean(r['portable']):.4f}  "
      f"portable better on {sum(b < a for a, b in zip(r['shipped'], r['portable']))}, worse on {sum(b > a for a, b in zip(r['shipped'], r['portable']))}")
