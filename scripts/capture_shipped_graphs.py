"""Re-capture the real-model graphs shipped in data/graphs (random weights, nothing downloaded).

A thin caller of `incsched.capture`: for every zoo model, batch 1, trivial coarsening and (by default)
measured CPU times, it writes ``<model>.json.gz`` and a README.md table describing them.

    python scripts/capture_shipped_graphs.py --out data/graphs [--models resnet50 bert_base] [--no-measure]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
from pathlib import Path

import torch

from incsched.capture import capture, zoo
from incsched.formats import load_graph, save_graph

log = logging.getLogger("capture_shipped_graphs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/graphs"), help="folder for the graphs and README.md")
    parser.add_argument("--models", nargs="+", default=list(zoo.MODELS), choices=zoo.MODELS, metavar="MODEL")
    parser.add_argument("--measure", action=argparse.BooleanOptionalAction, default=True, help="time every node on CPU")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per node (median kept)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per node before timing")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sequence for bert_base and gpt2")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        model, inputs = zoo.build(name, batch_size=1, seq_len=args.seq_len)
        cap = capture(
            model, inputs, coarsen="trivial", measure=args.measure, repeats=args.repeats, warmup=args.warmup, name=name
        )
        save_graph(cap.graph, args.out / f"{name}.json.gz")
        log.info("%s: %d nodes, %.1f s", name, cap.graph.n_nodes, cap.graph.meta["capture_seconds"])

    # The table covers every graph in the folder, including ones not re-captured this run.
    graphs = [load_graph(p) for p in sorted(args.out.glob("*.json.gz"))]
    order = {nm: i for i, nm in enumerate(zoo.MODELS)}
    graphs.sort(key=lambda g: order.get(g.name, len(order)))
    (args.out / "README.md").write_text(readme(graphs, args))
    return 0


def load(g) -> str:
    value = (g.meta.get("measured") or {}).get("load_average")
    return "-" if value is None else f"{value:.1f}"


def readme(graphs, args) -> str:
    rows = []
    for g in graphs:
        s = g.summary()
        cpu = s["measured_time_s"].get("cpu")
        rows.append(
            f"| {g.name} | {' x '.join(map(str, g.meta['input_shapes'][0]))} | {g.meta['fx_nodes']} | {s['nodes']} "
            f"| {s['edges']} | {s['depth']} | {s['total_param_bytes'] / 2**20:.1f} MiB ({s['total_param_bytes']:,} B) "
            f"| {g.meta['param_count'] / 1e6:.2f} M | {s['total_flops'] / 1e9:.2f} "
            f"| {'-' if cpu is None else f'{cpu * 1e3:.1f}'} | {load(g)} | {g.meta['capture_seconds']:.1f} |"
        )
    versions = f"torch {torch.__version__.split('+')[0]}, Python {platform.python_version()}"
    command = "python scripts/capture_shipped_graphs.py --out data/graphs" + ("" if args.measure else " --no-measure")
    return f"""# Shipped graphs of real models

Computation graphs captured from real PyTorch models with `incsched.capture` (torch.export, one node
per operation, views and other free ops folded into their neighbours: `coarsen="trivial"`). Weights
are random (torchvision `weights=None`; transformers models from a local `BertConfig()` /
`GPT2Config(use_cache=False)`), seeded, nothing downloaded. Batch size 1; images at the model's usual
size, token sequences of {args.seq_len}. Load one with `incsched.formats.load_graph`.

Per node: `flops` counted by `torch.utils.flop_counter.FlopCounterMode`, `out_bytes` from the real
output tensors, `param_bytes` the parameters and buffers it reads (shared weights charged once; see
`meta.shared_params`), `compute_time["cpu"]` the median of {args.repeats} timed runs of that node alone
on a 2-core CPU shared with other jobs. The machine's 1-minute load average at capture is in the
table (and in `meta.measured`): with a load well above the core count, times are inflated many-fold
and compare poorly across models (captured in sequence, under changing load); per-node timing also
includes per-op dispatch overhead that a whole forward pass hides. Re-run the command on a quiet
machine for times worth comparing. `members` lists the torch.fx node names
each node stands for; `meta` records shapes, versions and capture settings.

| model | input | fx nodes | nodes | edges | depth | parameters + buffers | parameters | GFLOPs | CPU ms (sum of nodes) | load avg | capture s |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

GFLOPs count multiply and add separately (2 per multiply-accumulate), as FlopCounterMode does.
vit_b_16's count is higher than FlopCounterMode over an eager forward in `torch.no_grad()`, which
takes PyTorch's fused attention fast path that the counter does not see; the traced graph runs
attention as linear layers and `scaled_dot_product_attention`, which it does count.

Regenerated with ({versions}):

```
{command}
```
"""


if __name__ == "__main__":
    sys.exit(main())
