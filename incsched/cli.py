"""The ``incsched`` command line: a thin caller of the library, never a second implementation.

    incsched graph info FILE
    incsched graph capture (--model NAME|pkg.module:factory | --exported FILE.pt2 | --hf-config config.json) -o FILE
    incsched graph convert IN OUT [--edges EDGES.csv] [--out-edges EDGES.csv]   (IN may be an .onnx model)
    incsched solve GRAPH --stages K [--alpha A | --weights ...] [--capacity B] [--method M] [--json OUT]
    incsched solve GRAPH --devices N [--bandwidth B] [--latency S] [--method M] [--json OUT]
    incsched solve GRAPH --links LINKS.json [--method M] [--json OUT]     (devices measured by profile)
    incsched batch DIR -o OUTDIR (--stages K | --devices N) [--jobs N] [--engine local|ray [--address ADDR]]
    incsched profile --model resnet50 [--devices cpu,cuda:0] [--repeats 10] -o FILE [--links LINKS.json]
    incsched validate --model resnet50 --result RESULT.json [--devices cuda:0,cpu] [--runtime pipelining]
    incsched train stage|placement --out CHECKPOINT
    incsched finetune --model M --devices cpu,cpu --out CHECKPOINT   (placement policy on measured runtimes)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from .errors import IncschedError
from .helper_thread import helpers_running
from .graph.cost_model import DEFAULT_KIND, ROOFLINES, short_label

__all__ = ["main", "format_result", "EXIT_INTERRUPTED", "EXIT_TERMINATED"]

log = logging.getLogger("incsched")

#: Exit status of a run stopped by Ctrl-C (128 + SIGINT) or SIGTERM (128 + 15), as shells report them.
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def main(argv: list[str] | None = None) -> int:
    """Run one command (`_main`). As its own program, a run that was interrupted, or that leaves a
    helper thread behind (the policy's load, abandoned at the clock or a signal), exits at once with
    its status; every output is written (atomically) and flushed by then. A normal shutdown there
    is not safe:
    - an interpreter that shuts down while that thread is inside torch's import aborts ("terminate
      called without an active exception", SIGABRT, seen on SIGTERM 5 s into a solve);
    - after a Ctrl-C that a C extension saw first, Python itself re-raises SIGINT at exit, so the
      run that wrote its answer and returned 130 died as -2 (seen in CI, 5 s into a solve under
      load, with nothing on stderr)."""
    status = _main(argv)
    if argv is None and (helpers_running() or status in (EXIT_INTERRUPTED, EXIT_TERMINATED)):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, ValueError):
                pass
        os._exit(status)
    return status


def _main(argv: list[str] | None = None) -> int:
    """Run one command; every error it meets on purpose is one line on stderr and exit status 1.

    Bad input of any kind (a file, an option's value, an output that cannot be written) ends as
    ``incsched: error: <what and where>``; ``-v`` adds the traceback. A closed stdout (``| head``)
    ends the run quietly; Ctrl-C ends it with status 130.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 1
    args.own_process = argv is None  # run as the `incsched` program, not called from Python
    if args.own_process:
        signal.signal(signal.SIGTERM, _terminate)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    previous_level = _configure_logging(args.verbose, args.log_quiet or getattr(args, "quiet", False))
    try:
        status = args.run(args) or 0
        sys.stdout.flush()  # here, not at exit: a reader that went away must be caught below
        return status
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except KeyboardInterrupt as exc:
        print(f"incsched: {'terminated' if isinstance(exc, _Terminated) else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(exc, _Terminated) else EXIT_INTERRUPTED
    except ImportError as exc:
        if not isinstance(exc.__context__, KeyboardInterrupt):
            raise
        # the signal landed inside a C extension's import (OR-Tools, torch): it fails that way
        print(f"incsched: {'terminated' if _terminated else 'interrupted'} while starting up", file=sys.stderr)
        return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED
    except (IncschedError, ValueError, OSError) as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"incsched: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    finally:  # main() called from Python leaves the caller's logging as it found it
        logging.getLogger("incsched").setLevel(previous_level)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: the run stops the same way and keeps its best answer."""


_terminated = False  # set by the SIGTERM handler: the exit status says which signal stopped the run


def _terminate(signum, frame) -> None:
    """SIGTERM (a batch scheduler's stop, ``kill``) ends the run like Ctrl-C: ``solve()`` returns
    the best answer so far, which is written to ``--json`` before the exit (status 143)."""
    global _terminated
    _terminated = True
    raise _Terminated()


def _configure_logging(verbose: int, quiet: bool) -> int:
    """incsched's log on stderr: warnings by default, ``-v`` info, ``-vv`` debug, ``-q`` errors only;
    returns the level it replaced.

    Other libraries (torch, transformers) stay at warnings whatever the level: their debug output
    would drown incsched's.
    """
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=max(level, logging.WARNING), format="%(levelname)s %(name)s: %(message)s")
    logger = logging.getLogger("incsched")
    previous = logger.level
    logger.setLevel(level)
    return previous


def _one_line(exc: BaseException) -> str:
    """The error's message on one line; an OSError as ``FILE: what went wrong``."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" + (f" (and {exc.filename2})" if exc.filename2 else "")
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _silence_stdout() -> None:
    # Python flushes stdout once more at exit; pointing it at /dev/null keeps that flush quiet.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass


class _UsageError(Exception):
    """A command line argparse refuses; `main` prints it as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a refused command line is one line and exit status 1 (see `main`)."""

    def error(self, message: str):
        raise _UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


# ---------------------------------------------------------------------------- option values
# argparse ``type=`` functions: a value out of range is refused while parsing, naming the option.


def _int_between(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text.strip())  # a Python int: exact at any size, never through float
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"{text!r} is out of range (must be {bound})")
        return value

    return parse


def _real(low: float, *, above: bool) -> callable:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} must be finite and {'>' if above else '>='} {low:g}")
        return value

    return parse


_count = _int_between(1)  # stages, devices, repeats ...
_byte_count = _int_between(0)  # capacities: any size, exact
_non_negative_int = _int_between(0)
_seed = _int_between(0, 2**31 - 1)  # CP-SAT takes a 32-bit seed
_workers = _int_between(1, 1024)
_positive = _real(0.0, above=True)  # seconds, bandwidth
_non_negative = _real(0.0, above=False)  # alpha, latency


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="incsched", description="Certified placement of computation graphs onto stages and devices.")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more log on stderr: -v info, -vv debug; and the traceback of an error")
    # Its own dest: the `-q` of solve and batch is a subcommand default that would overwrite this one.
    p.add_argument("-q", "--quiet", dest="log_quiet", action="store_true", help="errors only on stderr (no warnings)")
    sub = p.add_subparsers(title="commands")

    graph = sub.add_parser("graph", help="inspect, capture and convert computation graphs").add_subparsers(title="graph commands")

    info = graph.add_parser("info", help="size, depth, totals and widest level of a graph file")
    info.add_argument("file", help=".json, .json.gz or .gml graph file")
    info.add_argument("--edges", help="edge table, when FILE is a CSV node table")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.add_argument("--device-kind", "--kind", dest="kind", metavar="KIND",
                      help="also show the node times of this kind: measured, or estimated by its roofline preset "
                           f"({', '.join(sorted(ROOFLINES))}); default the measured kinds, else cpu")
    info.set_defaults(run=_graph_info)

    cap = graph.add_parser("capture", help="capture a real PyTorch model (random weights, offline) into a graph file")
    cap.add_argument("-o", "--output", required=True, help="output .json or .json.gz")
    _add_model_args(cap, tracing=True)
    cap.add_argument("--measure", action="store_true", help="measure per-node time on --device (median of repeats)")
    cap.add_argument("--device", default="cpu", help="device for measured times (cpu, cuda)")
    cap.add_argument("--repeats", type=_count, default=5)
    cap.add_argument("--training", action="store_true", help="for solve --training: record the activations each node saves "
                     "for backward and, with --measure, time each node's backward pass (otherwise both are estimated)")
    cap.add_argument("--granularity", type=_granularity, default="op", help="op (default) | layer | module:DEPTH: nodes that are the model's "
                     "modules in call order, so that a stage result maps onto split points (incsched export)")
    cap.set_defaults(run=_graph_capture)

    conv = graph.add_parser("convert", help="convert between graph formats (.json[.gz], .gml, .csv node+edge tables; .onnx models in)")
    conv.add_argument("input")
    conv.add_argument("output")
    conv.add_argument("--edges", help="edge table, when INPUT is a CSV node table")
    conv.add_argument("--out-edges", help="edge table to write, when OUTPUT is a CSV node table")
    conv.set_defaults(run=_graph_convert)

    sol = sub.add_parser("solve", help="solve a stage or placement problem and print the certified result")
    sol.add_argument("graph", help="graph file (.json, .gml, .onnx, each also .gz) or a shipped graph's name")
    _add_problem_args(sol)
    sol.add_argument("--json", metavar="OUT", help="write the result as JSON (atomically); '-' writes it to stdout and the summary to stderr")
    sol.set_defaults(run=_solve)

    bat = sub.add_parser("batch", help="solve every graph file in a folder; resumable, one result file each")
    bat.add_argument("folder", help="folder of graph files (.json, .gml, .onnx, each also .gz); any other entry is named and left out")
    bat.add_argument("-o", "--output", required=True, help="folder for <graph>.result.json files and batch.json")
    bat.add_argument("--jobs", type=_workers, default=None,
                     help="graphs solved at once: local processes (default 1), or the CPUs of the Ray --engine ray starts (default all)")
    bat.add_argument("--engine", choices=("local", "ray"), default="local",
                     help="local processes, or one Ray task per graph (needs: pip install 'incsched[distributed]')")
    bat.add_argument("--address", help="with --engine ray: join this running cluster (e.g. auto, HOST:6379) instead of starting a local Ray")
    _add_problem_args(bat)
    bat.set_defaults(run=_batch)

    val = sub.add_parser("validate", help="execute a solved result on real devices: outputs checked, measured vs predicted")
    _add_model_args(val)
    val.add_argument("--result", required=True, help="result JSON written by incsched solve --json")
    val.add_argument("--devices", help="torch devices, one per stage or device, e.g. cuda:0,cpu (default: cpu for each)")
    val.add_argument("--graph", help="graph file whose node times predict (default: profile them on --devices first)")
    val.add_argument("--granularity", type=_granularity,
                     help="the result's nodes: op | layer | module:DEPTH, as captured (default: the --graph file's, else op)")
    val.add_argument("--micro-batches", type=_count, default=4, help="stage results: micro-batches in the pipeline")
    val.add_argument("--repeats", type=_count, default=3, help="timed runs (median reported) after one warm-up")
    val.add_argument("--runtime", choices=["threads", "processes", "pipelining"], default="threads",
                     help="threads (default); processes: one per stage/device over torch.distributed (gloo, NCCL on GPUs), "
                          "point-to-point sends; pipelining: stage results under torch.distributed.pipelining's GPipe schedule")
    val.add_argument("--processes", dest="runtime", action="store_const", const="processes", help="same as --runtime processes")
    val.add_argument("--json", metavar="OUT", help="write the validation as JSON (atomically); '-' writes it to stdout")
    val.set_defaults(run=_validate)

    exp = sub.add_parser("export", help="hand a stage result over: split_spec for pipeline(), PipelineStage modules, "
                         "DeepSpeed parts, torchtitan module names per chunk, or plain JSON")
    exp.add_argument("result", help="stage result JSON written by incsched solve --json")
    exp.add_argument("--format", required=True, choices=["pipelining", "deepspeed", "torchtitan", "json"],
                     help="pipelining: a split_spec (layer-level result) or PipelineStage modules (op-level result, --model)")
    exp.add_argument("--graph", help="the graph file (or shipped name) the result was solved for")
    _add_model_args(exp, tracing=True)
    for group in exp._mutually_exclusive_groups:  # the model is needed only for PipelineStage modules
        group.required = False
    exp.add_argument("--ranks", type=_count, help="torchtitan: pipeline ranks; K / ranks stages (model chunks) each (default K)")
    exp.add_argument("--style", choices=["loop", "v"], default="loop",
                     help="torchtitan: chunk i on rank i %% ranks (loop: Interleaved1F1B ...) or V schedules (ZBVZeroBubble ...)")
    exp.add_argument("-o", "--output", default="-", help="JSON file (default '-': stdout); a folder for PipelineStage modules")
    exp.set_defaults(run=_export)

    cmp_ = sub.add_parser("compare", help="our split beside the usual splitters (torchtitan's even layers, DeepSpeed uniform and "
                          "parameters, torchgpipe balance_by_time, the PipeDream DP): predicted, and with --measure measured")
    cmp_.add_argument("graph", nargs="?", help="graph file or shipped name (else the --model captured)")
    _add_model_args(cmp_, tracing=True)
    for group in cmp_._mutually_exclusive_groups:  # a graph alone is enough for the predicted figures
        group.required = False
    cmp_.add_argument("--stages", type=_count, required=True, help="K")
    cmp_.add_argument("--granularity", type=_granularity, help="--model's capture: op | layer (default) | module:DEPTH")
    cmp_.add_argument("--bandwidth", type=_real(0, above=True), default=1e9, help="bytes/s of a stage's sends (default 1e9)")
    cmp_.add_argument("--micro-batches", type=_count, default=4)
    cmp_.add_argument("--memory", type=_count, help="bytes per stage for parameters plus activations in flight (default none)")
    cmp_.add_argument("--time-limit", type=_real(0, above=True), default=20.0, help="seconds for our solve (default 20)")
    cmp_.add_argument("--measure", action="store_true", help="also run each split as a pipeline of K CPU worker processes")
    cmp_.add_argument("--repeats", type=_count, default=3, help="--measure: timed runs (median) after one warm-up")
    cmp_.add_argument("--png", metavar="OUT.png", help="draw the figures (matplotlib)")
    cmp_.add_argument("--json", metavar="OUT", help="write the comparison as JSON; '-' writes it to stdout")
    cmp_.set_defaults(run=_compare)

    shw = sub.add_parser("show", help="draw a result: a stage split as its 1F1B pipeline with the memory per stage, "
                         "a placement as a Gantt chart per device with its transfers (PNG, SVG; needs matplotlib)")
    shw.add_argument("result", help="result JSON written by incsched solve --json")
    shw.add_argument("--png", metavar="OUT.png", help="write the picture as PNG")
    shw.add_argument("--svg", metavar="OUT.svg", help="write the picture as SVG")
    shw.add_argument("--graph", help="the graph file (or shipped name) the result was solved for: needed for a placement; "
                     "for a stage split it adds the activations in flight and the capacity lines")
    # The problem is rebuilt the way solve built it, from the same options; the stage or device
    # count defaults to the result's own, and the solver's options mean nothing here.
    _add_problem_args(shw)
    for group in shw._mutually_exclusive_groups:
        group.required = False
    for action in shw._actions:
        if action.dest in ("method", "preschedule", "time_limit", "work_limit", "seed", "workers", "no_deterministic", "quiet"):
            action.help = argparse.SUPPRESS
        elif action.dest == "micro_batches":
            action.help = "micro-batches in the drawn 1F1B schedule (and of --objective throughput; default 4)"
    shw.set_defaults(run=_show)

    prof = sub.add_parser("profile", help="measure per-node kernel and launch times, and link speeds, on real devices")
    prof.add_argument("-o", "--output", required=True, help="graph file to write (.json or .json.gz), with measured times")
    prof.add_argument("--devices", default="cpu", help="comma-separated torch devices, e.g. cpu,cuda:0 (default cpu)")
    _add_model_args(prof, tracing=True)
    prof.add_argument("--repeats", type=_count, default=10, help="profiled forwards per device (default 10)")
    prof.add_argument("--warmup", type=_non_negative_int, default=3, help="discarded forwards first (default 3)")
    prof.add_argument("--threads", type=int, help="intra-op threads for the CPU times (default: the cores each CPU worker "
                      "gets when --devices run together, e.g. 1 each for cpu,cpu on 2 cores; all cores for one CPU)")
    prof.add_argument("--links", metavar="FILE", help="also time copies between the devices and write them as JSON")
    prof.add_argument("--link-sizes", default="4K,64K,1M,16M,64M", help="bytes per timed copy, K/M/G binary suffixes")
    prof.set_defaults(run=_profile)

    ft = sub.add_parser("finetune", help="fine-tune the placement policy on runtimes measured on real devices (training stage 3)")
    _add_model_args(ft)
    ft.add_argument("--devices", default="cpu,cpu", help="torch devices, one per placement device (default cpu,cpu)")
    ft.add_argument("--checkpoint", help="placement policy to start from (default: the shipped one)")
    ft.add_argument("--out", required=True, help="checkpoint to write (its .json sidecar beside it)")
    ft.add_argument("--epochs", type=_count, default=3)
    ft.add_argument("--samples", type=_count, default=4, help="sampled placements per epoch, each executed and timed")
    ft.add_argument("--repeats", type=_count, default=3, help="timed runs per distinct placement (median)")
    ft.add_argument("--seed", type=_seed, default=0)
    ft.set_defaults(run=_finetune)

    tr = sub.add_parser("train", help="train a learned pre-scheduler (reproduces the shipped checkpoints)")
    tr.add_argument("policy", choices=["stage", "placement"])
    tr.add_argument("args", nargs=argparse.REMAINDER, help="passed on, e.g. --out data/models/stage_policy.pt; "
                    "--kernels native|avx2|portable trains in a child process under those CPU kernels")
    tr.set_defaults(run=_train)

    ex = sub.add_parser("experiment", help="reproducibility experiments: run a declared config, report its rows").add_subparsers(
        title="experiment commands")
    exr = ex.add_parser("run", help="run every cell of a config (resumable); one row with its provenance per cell")
    exr.add_argument("config", help="a shipped experiment's name (incsched experiment list) or a .toml file")
    exr.add_argument("-o", "--output", help="run folder (default out/experiments/NAME or out/experiments/NAME-PROFILE)")
    exr.add_argument("--profile", help="a profile of the config, e.g. quick")
    exr.add_argument("--engine", default="local", help="batch engine: local (processes, default) or ray")
    exr.add_argument("--workers", type=_workers, default=1, help="solves at once (default 1: timings undisturbed by each other)")
    exr.add_argument("--address", help="ray: a running cluster to join")
    exr.set_defaults(run=_experiment_run)
    exp_rep = ex.add_parser("report", help="tables (markdown, CSV) and plots (PNG, SVG) from a run folder's rows, without solving")
    exp_rep.add_argument("folder", help="run folder written by incsched experiment run")
    exp_rep.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    exp_rep.add_argument("--publish", metavar="DIR", help="also write the results page DIR/NAME.md, its figures and the index (docs/results)")
    exp_rep.set_defaults(run=_experiment_report)
    exl = ex.add_parser("list", help="the shipped experiment configs")
    exl.set_defaults(run=_experiment_list)
    return p


def _add_model_args(p: argparse.ArgumentParser, tracing: bool = False) -> None:
    """The model to capture (built offline, random weights), its input sizes, how to trace it."""
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="zoo model name (resnet50, bert_base, gpt2 ...) or a factory pkg.module:function "
                        "(or path/file.py:function) returning (model, example_inputs)")
    source.add_argument("--exported", metavar="FILE.pt2", help="a program saved by torch.export.save, with its example "
                        "inputs (loading unpickles: trusted files only)")
    source.add_argument("--hf-config", metavar="CONFIG.json", help="a Hugging Face config.json: the model built from it "
                        "with random weights, use_cache off")
    p.add_argument("--batch-size", type=_count, help="zoo models and --hf-config (default 1)")
    p.add_argument("--seq-len", type=_count, help="sequence length for transformer models (default 128)")
    p.add_argument("--image-size", type=_count, help="image height and width for vision models (default the model's)")
    if tracing:
        p.add_argument("--method", choices=["export", "fx"], default="export", help="torch.export (default) or torch.fx tracing")
        p.add_argument("--coarsen", default="trivial", help="none | trivial | chains | module:DEPTH (default trivial)")


def _load_model(args):
    """The `LoadedModel` that --model, --exported or --hf-config names."""
    from .capture.models import load_model

    return load_model(model=args.model, exported=args.exported, hf_config=args.hf_config,
                      batch_size=args.batch_size, seq_len=args.seq_len, image_size=args.image_size)


def _validate(args) -> int:
    from .capture import capture
    from .execute import default_devices, profile_devices, validate_result
    from .result import Result

    result = Result.load(args.result)
    timed = _read_graph(args.graph, None) if args.graph else None  # bad files fail before the slow capture
    devices = _device_list(args.devices) if args.devices else None
    result.check_assignment(timed, n_parts=len(devices) if devices else None, source=args.result)
    devices = devices or default_devices(result)
    loaded = _load_model(args)
    granularity = args.granularity or (timed.meta.get("granularity") if timed is not None else None) or "op"
    captured = capture(loaded.model, loaded.example_inputs, name=loaded.name, granularity=granularity)
    if timed is None and len(result.assignment or ()) not in (0, captured.graph.n_nodes):
        raise IncschedError(f"{args.result}: {len(result.assignment)} nodes, but {loaded.name} captured at granularity {granularity} "
                            f"has {captured.graph.n_nodes}: a result for another model, or one solved at another --granularity")
    if timed is None:  # node times on every device kind of the run, the CPU's with its workers' threads
        graph, _ = profile_devices(captured, devices, repeats=5, warmup=2)
        captured = dataclasses.replace(captured, graph=graph)
    else:
        if timed.structure_digest() != captured.graph.structure_digest():
            raise IncschedError(f"{args.graph}: not the graph of {loaded.name} as captured here at op granularity (nodes or edges differ)")
        # the times and what they were measured under (threads, device), so notes judge the right ones
        meta = {**captured.graph.meta, **{k: timed.meta[k] for k in ("measured", "calibration", "costs") if k in timed.meta}}
        captured = dataclasses.replace(captured, graph=captured.graph.replace(compute_time=timed.compute_time, meta=meta))
    v = validate_result(captured, result, devices, n_micro_batches=args.micro_batches, repeats=args.repeats, runtime=args.runtime)
    out = sys.stderr if args.json == "-" else sys.stdout  # stdout carries the JSON
    what = f"{v.micro_batches} micro-batches" if v.kind == "stage" else "solved per-device order"
    print(f"{v.graph}: {result.problem} result ({result.method}, {result.status}) executed as {v.parts} parts on {', '.join(v.devices)}, {what}", file=out)
    print(f"outputs match the unsplit model (max |diff| {v.max_abs_diff:.3g}); medians of {v.repeats} runs after a warm-up", file=out)
    print(v.table(), file=out)
    for kind in sorted({d.split(":")[0] for d in v.devices}):
        print(f"predicted with times ({kind}) {captured.graph.time_source(kind)}", file=out)
    for note in v.notes:
        print(f"note: {note}", file=out)
    _write_or_refuse(args.json, v.to_json, "the validation above")
    return 0


def _profile(args) -> int:
    """Capture a model, measure it on each device, write the graph (and the links)."""
    from .capture import capture
    from .execute import calibrated_devices, measure_links, profile_devices
    from .formats import save_graph
    from .jsonio import write_json

    devices = _device_list(args.devices)  # fail before the slow capture
    sizes = _byte_sizes(args.link_sizes) if args.links else ()
    if args.threads is not None and args.threads < 1:
        raise IncschedError(f"--threads must be >= 1, got {args.threads}")
    if not args.output.endswith((".json", ".json.gz")):
        raise IncschedError(f"{args.output}: the graph is written as .json or .json.gz")

    started = time.perf_counter()
    loaded = _load_model(args)
    captured = capture(loaded.model, loaded.example_inputs, method=args.method, coarsen=args.coarsen, name=loaded.name)
    graph = captured.graph
    print(f"captured {loaded.name}: {graph.n_nodes} nodes, {graph.n_edges} edges in {time.perf_counter() - started:.1f} s")

    graph, measured = profile_devices(captured, devices, repeats=args.repeats, warmup=args.warmup, threads=args.threads)
    for times in measured.values():
        print(
            f"{times.device:<8} wall {1e3 * times.wall_seconds:9.3f} ms  kernels {1e3 * times.kernel_seconds:9.3f} ms "
            f"({100 * times.kernel_share:.0f}%)  launch {1e6 * times.launch_per_op:6.2f} us/op x {int(times.ops.sum())} ops  "
            f"{times.regime}, {times.conditions['threads']} thread(s)"
        )
    save_graph(graph, args.output)
    print(f"graph with compute_time for {', '.join(sorted(measured))} -> {args.output}")

    if args.links:
        links = measure_links(devices, sizes)
        for i, j in links.pairs():
            print(
                f"{devices[i]} -> {devices[j]}: latency {1e6 * links.latency[i, j]:8.2f} us, "
                f"bandwidth {links.bandwidth[i, j] / 1e9:7.2f} GB/s  ({links.method(i, j)})"
            )
        data = links.to_dict()
        data["placement_devices"] = [d.to_dict() for d in calibrated_devices(devices)]
        write_json(args.links, data, indent=2)
        print(f"links -> {args.links}")
    return 0


def _byte_sizes(text: str) -> list[int]:
    """``--link-sizes 4K,1M,65536`` as byte counts (K/M/G binary suffixes, an optional i/B)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for item in text.split(","):
        item = item.strip().upper().removesuffix("B").removesuffix("I")
        number, unit = (item[:-1], item[-1]) if item and item[-1] in units else (item, "")
        try:
            value = int(float(number) * units[unit])
        except (ValueError, OverflowError):
            raise IncschedError(f"--link-sizes: {item!r} is not a byte count (e.g. 4K, 1M, 65536)") from None
        if value <= 0:
            raise IncschedError(f"--link-sizes: sizes must be positive, got {item!r}")
        out.append(value)
    return out


def _finetune(args) -> int:
    from .capture import capture
    from .execute import profile_devices
    from .policy.placement_policy import load_placement_policy, save_placement_policy
    from .train.measured import FinetuneConfig, finetune_on_measured

    devices = _device_list(args.devices)
    try:
        config = FinetuneConfig(seed=args.seed, epochs=args.epochs, rl_samples=args.samples, repeats=args.repeats)
    except ValueError as err:
        raise IncschedError(str(err)) from None
    if args.checkpoint:  # a bad checkpoint fails before the slow capture, naming the field
        from .policy.checkpoint import load_placement_checkpoint
        from .policy.placement_policy import CHECKPOINT_FORMAT, CHECKPOINT_VERSION

        load_placement_checkpoint(args.checkpoint, format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION)
    policy = load_placement_policy(args.checkpoint)
    loaded = _load_model(args)
    captured = capture(loaded.model, loaded.example_inputs, name=loaded.name)
    graph, _ = profile_devices(captured, devices, repeats=5, warmup=2)  # every kind, the CPU with its workers' threads
    captured = dataclasses.replace(captured, graph=graph)
    policy, metrics = finetune_on_measured(policy, captured, devices, config)
    print(f"{loaded.name} on {', '.join(devices)}: {metrics[-1]['placements_measured']} distinct placements executed and timed")
    for m in metrics:
        gain = f", best sample {m['best_sample_gain']:+.1%} vs greedy" if "best_sample_gain" in m else ""
        print(f"  {'start' if m['epoch'] < 0 else 'epoch %d' % m['epoch']:>8}: greedy placement measured "
              f"{m['greedy_measured_s'] * 1e3:.2f} ms, predicted {m['greedy_predicted_s'] * 1e3:.2f} ms{gain}")
    kept = min(metrics, key=lambda m: m["greedy_measured_s"])
    print(f"kept the weights of {'the start' if kept['epoch'] < 0 else 'epoch %d' % kept['epoch']} "
          f"({kept['greedy_measured_s'] * 1e3:.2f} ms measured); wrote {args.out}")
    save_placement_policy(policy, args.out, metrics=metrics, train_config={
        "stage": "finetune_on_measured", "model": loaded.name, "devices": devices, "batch_size": args.batch_size or 1,
        "from": args.checkpoint or "shipped", **config.to_dict()})
    return 0


def _device_list(text: str) -> list[str]:
    """``--devices cuda:0,cpu`` as torch device strings, each checked to exist on this machine."""
    from .execute import check_devices

    names = [d.strip() for d in text.split(",")]
    if not any(names):
        raise IncschedError(f"--devices {text!r} names no device (e.g. cpu,cuda:0)")
    for i, d in enumerate(names):
        if not d:
            raise IncschedError(f"--devices {text!r}: entry {i + 1} is empty (e.g. cpu,cuda:0)")
    return [str(d) for d in check_devices(names)]


def _train(args) -> int:
    if args.policy == "stage":
        from .train.stage import main as train_main
    else:
        from .train.placement import main as train_main
    return train_main(args.args) or 0


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--stages", type=_count, metavar="K", help="stage problem with K pipeline stages")
    what.add_argument("--devices", type=_count, metavar="N", help="placement problem on N identical devices")
    what.add_argument("--links", metavar="FILE", help="placement problem on the measured devices and links of FILE (incsched profile --links)")
    p.add_argument("--alpha", type=_non_negative, default=100.0, help="stage: weight of mem_peak in the peer objective (default 100)")
    p.add_argument(
        "--weights",
        help="stage: objective weights instead of the peer form, e.g. mem_peak=1,comm_total=0.001,compute_peak=1 (comm in bytes); "
             "terms mem_peak, comm_total, comm_peak, compute_peak, spill, stage_time_peak",
    )
    p.add_argument("--objective", choices=("peer", "memory", "throughput"), default="peer",
                   help="stage: peer (alpha * mem_peak + crossed edges, or --weights; the default), memory (mem_peak alone), or "
                        "throughput (the slowest stage's compute plus sends, under --memory: StageProblem.pipeline)")
    p.add_argument("--memory", type=_byte_count, metavar="BYTES",
                   help="--objective throughput: per-stage bytes for parameters plus the activations 1F1B keeps in flight")
    p.add_argument("--micro-batches", type=_count, default=4, help="--objective throughput: micro-batches per run (default 4)")
    p.add_argument("--training", action="store_true",
                   help="--objective throughput in training mode: forward plus backward, sends both ways, memory for parameters, "
                        "gradients, optimizer state and the activations the schedule stashes; prints the step time")
    p.add_argument("--optimizer", help="--training: adam-fp32 (default), adam-mixed, sgd-momentum-fp32 or sgd-fp32 (bytes per parameter)")
    p.add_argument("--schedule", help="--training: gpipe, 1f1b (default) or interleaved:V (V chunks per stage)")
    p.add_argument("--recompute", action="store_true", help="--training: activation recomputation (a stage keeps only its inputs per micro-batch)")
    p.add_argument("--capacity", type=_byte_count, help="stage: hard per-stage parameter memory in bytes")
    p.add_argument("--spill-capacity", type=_byte_count, metavar="BYTES",
                   help="stage: per-stage memory beyond which parameters spill (needed by the spill term of --weights)")
    p.add_argument("--device-kind", "--kind", dest="kind", default="cpu", metavar="KIND",
                   help="device kind whose node times are used: measured where the graph has them, else estimated by the "
                        f"roofline preset of that name ({', '.join(sorted(ROOFLINES))}; default cpu)")
    p.add_argument("--bandwidth", type=_positive,
                   help="placement: link bandwidth in bytes/s; solve --objective throughput: bytes/s of a stage's sends (default: infinite)")
    p.add_argument("--latency", type=_non_negative, default=0.0, help="placement: link latency in seconds")
    p.add_argument("--method", default="inc-ilp", help="inc-ilp (default), ilp, ilp-hinted, rl, or a baseline name")
    p.add_argument("--preschedule", metavar="NAME",
                   help="inc-ilp's incumbent: rl (the learned policy) or a baseline name (default: the best of both, by the evaluator)")
    p.add_argument("--time-limit", type=_positive, default=60.0,
                   help="wall-clock seconds from the command's start, everything counted (default 60)")
    p.add_argument("--work-limit", type=_positive, metavar="SECONDS",
                   help="deterministic work budget (CP-SAT deterministic seconds): a run it ends repeats byte for byte")
    p.add_argument("--seed", type=_seed, default=0, help="seed of every randomised step, 0 .. 2**31-1 (default 0)")
    p.add_argument("--workers", type=_workers, default=1, help="CP-SAT workers; more than 1 implies --no-deterministic")
    p.add_argument("--no-deterministic", action="store_true", help="parallel search: faster, never reproducible")
    p.add_argument("-q", "--quiet", action="store_true", help="no live progress line on stderr, and errors only in the log")


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
    kinds = sorted(graph.compute_time) or [DEFAULT_KIND]
    if args.kind is not None and args.kind not in kinds:
        kinds.append(args.kind)
    summary["costs"] = {"bytes": graph.byte_source(), "times": {k: graph.time_source(k) for k in kinds}}
    summary["estimated_time_s"] = {k: float(graph.time(k).sum()) for k in kinds if k not in graph.compute_time}
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
    for kind, label in s["costs"]["times"].items():
        seconds = s["measured_time_s"].get(kind, s["estimated_time_s"].get(kind))
        rows.append((f"time ({kind})", f"{seconds * 1e3:,.3f} ms (sum over nodes), {label}"))
    rows.append(("bytes", s["costs"]["bytes"]))
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
    from .capture import capture
    from .formats import save_graph

    started = time.perf_counter()
    loaded = _load_model(args)
    captured = capture(
        loaded.model,
        loaded.example_inputs,
        method=args.method,
        coarsen=args.coarsen,
        granularity=args.granularity,
        measure=args.measure,
        device=args.device,
        repeats=args.repeats,
        name=loaded.name,
        training=args.training,
    )
    save_graph(captured.graph, args.output)
    s = captured.graph.summary()
    print(f"captured {loaded.name}: {s['nodes']} nodes, {s['edges']} edges in {time.perf_counter() - started:.1f} s -> {args.output}")
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


# ---------------------------------------------------------------------------- solve


def _recipe(args):
    from .batch import ProblemRecipe

    if args.stages is not None:
        weights = _parse_weights(args.weights) if args.weights is not None else None
        if weights and weights.get("spill", 0) > 0 and args.spill_capacity is None:
            raise IncschedError("--weights: the spill term needs --spill-capacity BYTES (per-stage memory beyond which parameters spill)")
        if args.objective != "throughput" and args.memory is not None:
            raise IncschedError("--memory (parameters plus activations in flight) belongs to --objective throughput; --capacity bounds parameters")
        if args.objective != "peer" and weights is not None:
            raise IncschedError(f"--weights and --objective {args.objective} each name an objective; give one")
        training = _training_options(args)
        return ProblemRecipe(
            "stage",
            n_stages=args.stages,
            alpha=args.alpha,
            weights=weights,
            capacity=args.capacity,
            spill_capacity=args.spill_capacity,
            device_kind=args.kind,
            objective=args.objective,
            memory=args.memory,
            micro_batches=args.micro_batches,
            bandwidth=args.bandwidth if args.objective == "throughput" else None,
            training=training,
        )
    if args.spill_capacity is not None:
        raise IncschedError("--spill-capacity belongs to stage problems (--stages K)")
    if args.objective != "peer" or args.memory is not None:
        raise IncschedError("--objective and --memory belong to stage problems (--stages K)")
    if args.training or args.optimizer or args.schedule or args.recompute:
        raise IncschedError("--training, --optimizer, --schedule and --recompute belong to stage problems (--stages K)")
    if args.links:
        devices, links = _read_links(args.links)
        return ProblemRecipe("placement", devices=devices, links=links)
    return ProblemRecipe("placement", n_devices=args.devices, bandwidth=args.bandwidth, latency=args.latency, device_kind=args.kind)


def _training_options(args) -> dict | None:
    """``--training``'s keywords for `StageProblem.pipeline` (checked there), or None without it."""
    given = [flag for flag, value in (("--optimizer", args.optimizer), ("--schedule", args.schedule), ("--recompute", args.recompute)) if value]
    if not args.training:
        if given:
            raise IncschedError(f"{given[0]} belongs to --training")
        return None
    if args.objective != "throughput":
        raise IncschedError("--training models a training step's throughput: give --objective throughput")
    return {"optimizer": args.optimizer, "schedule": args.schedule, "recompute": args.recompute}


def _read_links(path: str) -> tuple[list[dict], dict]:
    """The measured devices and links of an ``incsched profile --links`` file, each checked."""
    from .jsonio import read_json
    from .problems import Device, Links

    data = read_json(path)
    if not isinstance(data, dict) or "placement_devices" not in data or "links" not in data:
        raise IncschedError(f"{path}: not a links file written by incsched profile --links")
    devices, links = data["placement_devices"], data["links"]
    if not isinstance(devices, list) or not devices or not all(isinstance(d, dict) for d in devices):
        raise IncschedError(f"{path}: 'placement_devices' must be a non-empty list of device objects")
    if not isinstance(links, dict):
        raise IncschedError(f"{path}: 'links' must be an object with 'latency' and 'bandwidth'")
    known = {f.name for f in dataclasses.fields(Device)}
    for i, d in enumerate(devices):
        unknown = sorted(set(d) - known)
        if unknown:
            raise IncschedError(f"{path}: device {i} has unknown field(s) {unknown} (known: {sorted(known)})")
        try:
            Device(**d)
        except IncschedError as exc:
            raise IncschedError(f"{path}: {exc}") from None
    for key in ("latency", "bandwidth"):
        value = links.get(key)
        if isinstance(value, list):
            if len(value) != len(devices) or not all(isinstance(row, list) and len(row) == len(devices) for row in value):
                raise IncschedError(f"{path}: links '{key}' must be a {len(devices)} x {len(devices)} matrix, one row per device")
            if not all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for row in value for x in row):
                raise IncschedError(f"{path}: links '{key}' must hold numbers (or null for no link)")
    try:
        Links.from_dict(links)
    except IncschedError as exc:
        raise IncschedError(f"{path}: {exc}") from None
    return devices, links


def _solve_kwargs(args, *, counted_from_start: bool = False) -> dict:
    """`solve()`'s keyword arguments; ``counted_from_start`` charges the process's own start-up
    (imports, reading the graph) to ``--time-limit``, as the user's clock does."""
    deterministic = not args.no_deterministic and args.workers == 1
    kwargs = dict(method=args.method, time_limit=args.time_limit, work_limit=args.work_limit, seed=args.seed,
                  deterministic=deterministic, workers=args.workers)
    if counted_from_start and getattr(args, "own_process", False):
        # only when this process is the command: main([...]) called from a long-running
        # process (tests, notebooks) would otherwise have its time limit eaten by that process's
        # age. The clock starts with the process; the user's time_limit is what the result records.
        kwargs["clock_started"] = time.perf_counter() - _seconds_since_start()
    if args.preschedule:
        kwargs["preschedule"] = args.preschedule
    return kwargs


def _parse_weights(text: str) -> dict[str, int | float]:
    """``--weights mem_peak=1,comm_total=1e-3`` as {term: weight}; integers stay exact Python ints."""
    from .problems.stage import ObjectiveWeights

    # Not grad_sync_peak: --weights sets inference objectives, and the sync is training's (--training weighs it).
    terms = [f.name for f in dataclasses.fields(ObjectiveWeights) if f.name != "grad_sync_peak"]
    out: dict[str, int | float] = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep:
            raise IncschedError(f"--weights: expected TERM=VALUE, got {item.strip()!r} (terms: {', '.join(terms)})")
        if key not in terms:
            raise IncschedError(f"--weights: unknown term {key!r} (terms: {', '.join(terms)})")
        if key in out:
            raise IncschedError(f"--weights: term {key!r} given twice")
        try:
            weight = int(value) if value.lstrip("+-").isdigit() else float(value)
        except ValueError:
            raise IncschedError(f"--weights: {value!r} is not a number (for {key!r})") from None
        if isinstance(weight, float) and not math.isfinite(weight) or weight < 0:
            raise IncschedError(f"--weights: {key}={value} must be finite and non-negative")
        out[key] = weight
    return out


def _solve(args) -> int:
    from .front_door import solve

    graph = _read_graph(args.graph, None)
    problem = _recipe(args).build(graph)
    live = not args.quiet and sys.stderr.isatty()
    result = solve(problem, **_solve_kwargs(args, counted_from_start=True), on_progress=_progress_line if live else None)
    if live:
        sys.stderr.write("\n")
    # Written before printing, so that a closed stdout cannot lose it; a write that fails does not
    # lose it either: the summary is printed all the same, then the error.
    failed = _write_json_output(args.json, result.to_json()) if args.json else None
    summary = sys.stderr if args.json == "-" else sys.stdout  # stdout carries the JSON
    print(format_result(result), file=summary)
    if failed:
        raise IncschedError(f"the result above was not written: {failed}")
    if args.json and args.json != "-":
        print(f"result written to {args.json}", file=summary)
    if result.stop_reason == "interrupted":
        return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED
    return 0 if result.status != "unknown" else 3


def _progress_line(progress) -> None:
    """The live line on stderr: phase, best, bound, gap, elapsed."""
    gap = "" if progress.gap is None else f"  gap {100 * progress.gap:.4f} %"
    sys.stderr.write(f"\r{progress.phase:<24} best {_number(progress.objective)}  bound {_number(progress.lower_bound)}"
                     f"{gap}  {progress.elapsed:7.1f} s\x1b[K")
    sys.stderr.flush()


def _number(x) -> str:
    """An exact objective for people: ints with separators, Fractions as decimals."""
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{float(x):,.6g}" if abs(x) >= 1e6 else f"{float(x):,.6f}".rstrip("0").rstrip(".")


def _seconds_since_start() -> float:
    """Wall seconds since this process started (Linux's /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)  # field 22: start time
    except (OSError, ValueError, IndexError):
        return 0.0


def _granularity(text: str) -> str:
    """``--granularity``, checked while parsing: a bad value fails before the model is built."""
    from .capture.granularity import parse_granularity
    from .errors import CaptureError

    try:
        parse_granularity(text)
    except CaptureError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _export(args) -> int:
    from .export import export_result, pipeline_stages
    from .result import Result

    result = Result.load(args.result)
    graph = _read_graph(args.graph, None) if args.graph else None
    module_level = graph is not None and graph.meta.get("granularity", "op") != "op"
    model_given = bool(args.model or getattr(args, "exported", None) or getattr(args, "hf_config", None))
    if args.format == "pipelining" and not module_level and model_given:
        if args.output == "-":
            raise IncschedError("PipelineStage modules are files: give -o FOLDER")
        from .capture import capture

        loaded = _load_model(args)
        captured = capture(loaded.model, loaded.example_inputs, method=args.method, coarsen=args.coarsen, name=loaded.name)
        if graph is not None and graph.structure_digest() != captured.graph.structure_digest():
            raise IncschedError(f"{args.graph}: not the graph of {loaded.name} as captured here at op granularity (nodes or edges differ)")
        stages = pipeline_stages(captured, result, n_stages=len(result.terms.get("stage_mem") or []) or None, source=args.result)
        written = stages.save(args.output)
        print(f"{stages.n_stages} PipelineStage modules of {loaded.name} -> {args.output} ({', '.join(p.name for p in written)})")
        return 0
    if graph is None:
        raise IncschedError(f"--format {args.format} needs --graph, the graph the result was solved for"
                            + (" (or --model for the PipelineStage modules of an op-level result)" if args.format == "pipelining" else ""))
    data = export_result(result, graph, args.format, ranks=args.ranks, style=args.style, source=args.result)
    failed = _write_json_output(args.output, data)
    if failed:
        raise IncschedError(f"the export was not written: {failed}")
    return 0


def _compare(args) -> int:
    """Our split and the usual splitters' (`incsched.compare`) on a graph, a graph file or a captured model."""
    from .compare import compare_splits, measure_splits, plot_comparison

    graph = _read_graph(args.graph, None) if args.graph else None
    captured = None
    model_given = bool(args.model or args.exported or args.hf_config)
    if graph is None and not model_given:
        raise IncschedError("name what to compare: a graph file or shipped name, or --model (or --exported, --hf-config)")
    if model_given or args.measure:
        captured = _compare_capture(args, graph)
    if graph is None:
        graph = captured.graph
    comparison = compare_splits(graph, args.stages, bandwidth=args.bandwidth, micro_batches=args.micro_batches,
                                memory=args.memory, time_limit=args.time_limit)
    if args.measure:
        comparison = measure_splits(comparison, captured, repeats=args.repeats)
    out = sys.stderr if args.json == "-" else sys.stdout
    print(f"{comparison.graph}, K={comparison.n_stages}: sends at {comparison.bandwidth:g} B/s, {comparison.micro_batches} "
          f"micro-batches (1F1B); ours is {comparison.status}" + (f"; measured on {comparison.measured_on}" if comparison.measured_on else ""),
          file=out)
    print(comparison.table(), file=out)
    print(f"predicted with times ({DEFAULT_KIND}) {graph.time_source(DEFAULT_KIND)}", file=out)  # the problems' default kind
    if args.png:
        print(f"figure -> {plot_comparison(comparison, args.png)}", file=out)
    _write_or_refuse(args.json, comparison.to_json, "the comparison")
    return 0


def _compare_capture(args, graph):
    """The model to measure (--model, or the zoo model of a shipped graph's name), captured at the graph's granularity."""
    from .capture import capture, zoo

    if not (args.model or args.exported or args.hf_config):
        if args.graph not in zoo.MODELS:
            raise IncschedError(f"--measure runs the model: give --model (or --exported, --hf-config) for {args.graph}")
        args.model = args.graph
    granularity = args.granularity or (graph.meta.get("granularity", "op") if graph is not None else "layer")
    loaded = _load_model(args)
    captured = capture(loaded.model, loaded.example_inputs, method=args.method, coarsen=args.coarsen, granularity=granularity, name=loaded.name)
    if graph is not None:
        if graph.structure_digest() != captured.graph.structure_digest():
            raise IncschedError(f"{args.graph}: not the graph of {loaded.name} as captured here at granularity {granularity} (nodes or edges differ)")
        captured = dataclasses.replace(captured, graph=captured.graph.replace(compute_time=graph.compute_time))
    return captured


def _show(args) -> int:
    """Draw a result (`incsched.show.draw`) on the problem its options and --graph rebuild."""
    from .result import Result
    from .show import draw

    outputs = [(path, fmt) for path, fmt in ((args.png, "png"), (args.svg, "svg")) if path]
    if not outputs:
        raise IncschedError("give --png OUT.png and/or --svg OUT.svg: the file(s) to draw the result in")
    result = Result.load(args.result)
    graph = _read_graph(args.graph, None) if args.graph else None
    result.check_assignment(graph, source=args.result)
    problem = None
    if graph is not None:
        if args.stages is None and args.devices is None and args.links is None:  # the result's own count
            if result.problem == "stage":
                args.stages = len(result.terms.get("stage_mem") or ()) or max(result.stages or [0]) + 1
            else:
                args.devices = len(result.order or ()) or max(result.device or [0]) + 1
        described = "stage" if args.stages is not None else "placement"
        if described != result.problem:
            raise IncschedError(f"{args.result}: a {result.problem} result, but the options describe a {described} problem")
        problem = _recipe(args).build(graph)
    elif result.problem == "placement":
        raise IncschedError(f"{args.result}: a placement is drawn on its problem: give --graph (the graph file or shipped name it "
                            "was solved for) and the device options it was solved with (--devices/--links, --bandwidth, --latency)")
    elif any(x is not None for x in (args.capacity, args.memory, args.stages, args.devices, args.links)):
        raise IncschedError("the problem options need --graph, the graph the result was solved for")
    for path, fmt in outputs:
        print(draw(result, problem, path, fmt, micro_batches=args.micro_batches))
    return 0


def _write_or_refuse(path: str | None, to_json, what: str) -> None:
    """Write ``to_json()`` to ``path`` (``-``: stdout) when one is given; a failure is one line."""
    if path:
        failed = _write_json_output(path, to_json())
        if failed:
            raise IncschedError(f"{what} was not written: {failed}")


def _write_json_output(path: str, data) -> str | None:
    """Write ``data`` to ``path`` (atomically), or to stdout for ``-``; why it failed, or None."""
    from .jsonio import json_bytes, write_json

    if path == "-":
        sys.stdout.write(json_bytes(data, indent=1).decode("utf-8") + "\n")
        sys.stdout.flush()
        return None
    try:
        write_json(path, data, indent=1)
    except (OSError, ValueError) as exc:
        return _one_line(exc)
    return None


def _batch(args) -> int:
    from .batch import BatchInterrupted, graph_files, left_out, run_batch
    from .formats import GRAPH_SUFFIXES

    files = graph_files(args.folder)
    others = left_out(args.folder)
    for path, why in others:
        print(f"incsched: left out {path}: {why}", file=sys.stderr)
    if not files:
        raise IncschedError(f"{args.folder}: no graph files ({', '.join(GRAPH_SUFFIXES)}) found")
    recipe = _recipe(args)  # a bad option or links file fails before any worker starts
    if args.address is not None and args.engine != "ray":
        raise IncschedError("--address names a Ray cluster: it needs --engine ray")
    if args.engine == "ray":
        from .batch.ray_engine import import_ray

        import_ray()  # a missing Ray is said (with how to install it) before anything is read

    def progress(item, done, total):
        width = 30
        bar = "#" * (width * done // total)
        what = item.error if item.outcome == "failed" else f"{item.status} {item.objective}"
        print(f"\r[{bar:<{width}}] {done}/{total} {Path(item.graph_file).name}: {item.outcome} {what}", file=sys.stderr)

    try:
        items = run_batch(files, args.output, recipe, jobs=args.jobs, engine=args.engine, address=args.address, progress=progress,
                          **_solve_kwargs(args))
    except BatchInterrupted as stop:
        _batch_summary(stop.items, args.output, others)
        print(f"incsched: interrupted; the results written are kept, {Path(args.output) / 'batch.json'} lists what is done",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    return _batch_summary(items, args.output, others)


def _batch_summary(items, output: str, others) -> int:
    counts = {k: sum(it.outcome == k for it in items) for k in ("solved", "skipped", "failed", "interrupted")}
    line = f"{counts['solved']} solved, {counts['skipped']} already done, {counts['failed']} failed"
    if counts["interrupted"]:
        line += f", {counts['interrupted']} not done (interrupted)"
    if others:
        line += f", {len(others)} left out (not graph files)"
    print(f"{line} -> {output}")
    for it in items:
        if it.outcome == "failed":
            print(f"  failed: {it.graph_file}: {it.error}")
    for path, why in others:
        print(f"  left out: {path}: {why}")
    return 1 if counts["failed"] else 0


def _experiment_run(args) -> int:
    from .experiment.config import load_experiment
    from .experiment.run import run_experiment

    exp = load_experiment(args.config, args.profile)  # a bad config is one line naming the key, before anything runs
    out = Path(args.output or Path("out", "experiments", exp.name + (f"-{exp.profile}" if exp.profile else "")))

    def show(row, done, total):
        c = row["cell"]
        r = row.get("result") or {}
        what = row["error"] or f"{r.get('status')} {r.get('objective')} [stopped: {r.get('stop_reason')}]"
        if row.get("validation") and not row["error"]:  # an execution: what the devices measured
            what = f"measured {1e3 * row['validation']['measured']['makespan_s']:.2f} ms" + (f", {what}" if r else "")
        if row.get("kind") == "train" and not row["error"]:
            what = f"weights {r['weights_sha256'][:16]} ({c['kernels']} kernels), {r['validation_metric']} {r['validation']:.4f}"
        print(f"[{done}/{total}] {c['graph']} {c['instance']} {c['method']} seed {c['seed']}: {what}", file=sys.stderr)

    summary = run_experiment(exp, out, engine=args.engine, workers=args.workers, address=args.address,
                             argv=["incsched", *sys.argv[1:]] if args.own_process else None, on_row=show)
    for note in summary["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"{summary['solved']} run, {summary['reused']} already done, {summary['failed']} failed -> {out}"
          f" (incsched experiment report {out})")
    return 1 if summary["failed"] else 0


def _experiment_report(args) -> int:
    from .experiment.report import write_report

    written = write_report(args.folder, plots=not args.no_plots, publish_to=args.publish)
    for path in written:
        print(path)
    return 0


def _experiment_list(args) -> int:
    from .experiment.config import load_experiment, shipped_experiments

    for name in shipped_experiments():
        exp = load_experiment(name)
        print(f"{name:<10} {exp.description}")
    return 0


def format_result(r) -> str:
    """A readable summary of a `Result`: status, objective, bound, gap, loads, phase times; every
    figure that node times make says where they come from (``estimated``, ``measured on cpu``)."""
    costs = (r.provenance or {}).get("costs") or {}
    tags = ", ".join(sorted({short_label(label) for label in (costs.get("times") or {}).values()}))
    timed = f"  ({tags})" if tags else ""  # beside each figure made of node times
    counted = timed if costs.get("objective_counts_times") else ""
    lines = [
        f"graph {r.graph}: {r.problem} problem, method {r.method}, seed {r.seed}"
        + ("" if r.reproducible else " (not reproducible)"),
        f"status       {r.status}" + (f"  ({r.reason})" if r.reason else "") + f"  [stopped: {r.stop_reason}]",
    ]
    if r.objective is not None:
        lines.append(f"objective    {_number(r.objective)}{counted}")
    if r.lower_bound is not None:
        lines.append(f"lower bound  {_number(r.lower_bound)}  ({r.bound_source}){counted}")
    if r.gap is not None:
        lines.append(f"gap          {100 * r.gap:.4f} %")
    t = r.terms
    if r.problem == "stage" and t:
        lines.append("terms        " + ", ".join(f"{k}={t[k]:,}" for k in ("mem_peak", "comm_total", "comm_peak", "compute_peak", "spill", "stage_time_peak", "grad_sync_peak") if k in t)
                     + (f"  (time terms: {tags})" if tags else ""))
        lines.append("stage memory " + " | ".join(_bytes(b) for b in t["stage_mem"]))
        lines.append("stage time   " + " | ".join(f"{1e3 * x:.3f} ms" for x in t["stage_compute_s"]) + timed)
        if r.replicated_weights is not None:  # tied weights: a copy (and its bytes) on each stage listed
            lines.append("replicated   " + ("; ".join(f"{w} on stages {', '.join(map(str, ks))}" for w, ks in r.replicated_weights.items()) or "none"))
        if "stage_time_s" in t:  # a pipeline problem: compute plus sends, memory with activations in flight
            lines.append("time + sends " + " | ".join(f"{1e3 * x:.3f} ms" for x in t["stage_time_s"]) + timed)
            lines.append("mem + acts   " + " | ".join(_bytes(b) for b in t["stage_memory"]))
            if t.get("throughput") is not None:
                lines.append(f"throughput   {t['throughput']:.2f} micro-batches/s (slowest stage {1e3 * t['stage_time_peak_s']:.3f} ms){timed}")
            if t.get("step_time_s") is not None:  # training mode: forward plus backward, and where backward came from
                sync = f", {1e3 * t['grad_sync_s']:.3f} ms of it syncing replicated weights" if t.get("grad_sync_s") else ""
                forward = f"forward {tags}, " if tags else ""
                lines.append(f"step time    {1e3 * t['step_time_s']:.3f} ms ({forward}backward {t['backward_time_source']}{sync})")
                if "grad_sync_peak" in t:  # the objective is this step in ticks: slots x slowest stage + the sync
                    lines.append(f"grad sync    {1e3 * (t.get('grad_sync_s') or 0.0):.3f} ms ({t['grad_sync_peak']:,} ticks: the busiest "
                                 "stage's gradient all-reduce of its replicated weights, part of the proven step)")
                if t.get("activation_source"):
                    lines.append(f"activations  {t['activation_source']}")
                if t.get("working_set_source"):  # the stage's largest working set on top of its stash
                    lines.append(f"working set  {t['working_set_source']}")
    elif r.problem == "placement" and t:
        lines.append(f"makespan     {1e3 * t['makespan_s']:.3f} ms ({t['makespan']:,} ticks){timed}")
        lines.append("device busy  " + " | ".join(f"{1e3 * x:.3f} ms" for x in t["busy_s"]) + timed)
    for kind, label in (costs.get("times") or {}).items():
        lines.append(f"times ({kind})".ljust(12) + f" {label}")
    if costs.get("bytes"):
        lines.append(f"bytes        {costs['bytes']}")
    lines.append("time         " + ", ".join(f"{k} {v:.3f} s" for k, v in r.timing.items()))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
