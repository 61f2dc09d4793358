"""The ``incsched`` command line: a thin caller of the library, never a second implementation.

    incsched graph info FILE
    incsched graph capture --model resnet50 -o FILE
    incsched graph convert IN OUT [--edges EDGES.csv] [--out-edges EDGES.csv]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from .errors import IncschedError

log = logging.getLogger("incsched")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except (IncschedError, FileNotFoundError) as exc:
        print(f"incsched: error: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="incsched", description="Certified placement of computation graphs onto stages and devices.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(title="commands")

    graph = sub.add_parser("graph", help="inspect, capture and convert computation graphs").add_subparsers(title="graph commands")

    info = graph.add_parser("info", help="size, depth, totals and widest level of a graph file")
    info.add_argument("file", help=".json, .json.gz or .gml graph file")
    info.add_argument("--edges", help="edge table, when FILE is a CSV node table")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.set_defaults(run=_graph_info)

    cap = graph.add_parser("capture", help="capture a real PyTorch model (random weights, offline) into a graph file")
    cap.add_argument("--model", required=True, help="model name (see --list)")
    cap.add_argument("-o", "--output", required=True, help="output .json or .json.gz")
    cap.add_argument("--batch-size", type=int, default=1)
    cap.add_argument("--seq-len", type=int, default=128, help="sequence length for transformer models")
    cap.add_argument("--method", choices=["export", "fx"], default="export", help="torch.export (default) or torch.fx tracing")
    cap.add_argument("--coarsen", default="trivial", help="none | trivial | chains | module:DEPTH (default trivial)")
    cap.add_argument("--measure", action="store_true", help="measure per-node time on --device (median of repeats)")
    cap.add_argument("--device", default="cpu", help="device for measured times (cpu, cuda)")
    cap.add_argument("--repeats", type=int, default=5)
    cap.set_defaults(run=_graph_capture)

    conv = graph.add_parser("convert", help="convert between graph formats (.json[.gz], .gml, .csv node+edge tables)")
    conv.add_argument("input")
    conv.add_argument("output")
    conv.add_argument("--edges", help="edge table, when INPUT is a CSV node table")
    conv.add_argument("--out-edges", help="edge table to write, when OUTPUT is a CSV node table")
    conv.set_defaults(run=_graph_convert)
    return p


# ---------------------------------------------------------------------------- graph commands


def _read_graph(path: str, edges: str | None):
    if path.endswith(".csv"):  # a node table; its edge table comes with --edges
        from .formats.csv_tables import read_csv_tables

        if not edges:
            raise IncschedError(f"{path}: a CSV node table needs its edge table (--edges EDGES.csv)")
        return read_csv_tables(path, edges)
    from .formats import load_graph

    return load_graph(path)


def _graph_info(args) -> int:
    graph = _read_graph(args.file, args.edges)
    summary = graph.summary()
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    print(_format_summary(summary, graph.meta))
    return 0


def _format_summary(s: dict, meta: dict) -> str:
    rows = [
        ("graph", s["name"]),
        ("nodes", f"{s['nodes']:,}"),
        ("edges", f"{s['edges']:,}"),
        ("sources / sinks", f"{s['sources']} / {s['sinks']}"),
        ("depth (levels)", f"{s['depth']}"),
        ("widest level", f"{s['widest_level']} nodes"),
        ("op kinds", f"{s['op_kinds']}"),
        ("total flops", f"{s['total_flops'] / 1e9:,.3f} GFLOP"),
        ("total parameters", _bytes(s["total_param_bytes"])),
        ("total outputs", _bytes(s["total_out_bytes"])),
        ("total edge bytes", _bytes(s["total_edge_bytes"])),
    ]
    for kind, seconds in s["measured_time_s"].items():
        rows.append((f"measured time ({kind})", f"{seconds * 1e3:,.3f} ms (sum over nodes)"))
    for key in ("model", "batch_size", "method", "coarsen"):
        if key in meta:
            rows.append((key.replace("_", " "), str(meta[key])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _graph_capture(args) -> int:
    from .capture import capture, zoo
    from .formats import save_graph

    started = time.perf_counter()
    model, inputs = zoo.build(args.model, batch_size=args.batch_size, seq_len=args.seq_len)
    captured = capture(
        model,
        inputs,
        method=args.method,
        coarsen=args.coarsen,
        measure=args.measure,
        device=args.device,
        repeats=args.repeats,
        name=args.model,
    )
    save_graph(captured.graph, args.output)
    s = captured.graph.summary()
    print(f"captured {args.model}: {s['nodes']} nodes, {s['edges']} edges in {time.perf_counter() - started:.1f} s -> {args.output}")
    return 0


def _graph_convert(args) -> int:
    graph = _read_graph(args.input, args.edges)
    out = args.output
    if out.endswith(".csv"):
        from .formats.csv_tables import write_csv_tables

        if not args.out_edges:
            raise IncschedError(f"{out}: writing a CSV node table needs --out-edges EDGES.csv for its edge table")
        write_csv_tables(graph, out, args.out_edges)
    elif out.endswith((".gml", ".gml.gz")):
        from .formats.gml import write_gml

        write_gml(graph, out)
    else:
        from .formats import save_graph

        save_graph(graph, out)
    print(f"wrote {out} ({graph.n_nodes} nodes, {graph.n_edges} edges)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
