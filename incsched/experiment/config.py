"""Experiment configs: a TOML file declares graphs, problems, methods with budgets, seeds and
repeats; `load_experiment` checks it once, at the boundary, and every mistake is one line naming
the key (``doppler.toml: methods[2].time_limit: must be a positive number, got -1``).

A config may hold ``[profiles.NAME]`` tables whose keys replace the top-level ones
(``incsched experiment run doppler --profile quick``). Shipped configs live in
``data/experiments/`` and are named without their suffix.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, LimitError
from ..data import DATA_DIR
from ..jsonio import json_bytes
from ..limits import ENV_VARS, input_limits

__all__ = [
    "ConfigError",
    "Experiment",
    "GraphSpec",
    "ProblemSpec",
    "MethodSpec",
    "ExecutionSpec",
    "TrainingSpec",
    "load_experiment",
    "shipped_experiments",
    "method_kinds",
    "solve_cells_per_graph",
    "check_grid_size",
    "GENERATORS",
]

EXPERIMENTS_DIR = DATA_DIR / "experiments"

#: Graph generators a config may name, by their function names in `incsched.generators`.
GENERATORS = ("layered_dag", "respect_like", "icml24_like", "chained_matmul", "ffnn", "transformer_block", "transformer_layer")

#: What an execution cell may run besides `solve()` methods: the whole model on one device.
SINGLE_DEVICE = "single_device_each"


@dataclass(frozen=True)
class GraphSpec:
    """Where graphs come from: ``shipped`` names, a ``generator`` with ``args`` and ``seeds``, or a
    ``folder`` of graph files matching ``pattern`` (``optional``: skipped with a note if absent)."""

    source: str
    names: tuple[str, ...] = ()
    generator: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    folder: str | None = None
    pattern: str = "*"
    optional: bool = False


@dataclass(frozen=True)
class ProblemSpec:
    """A stage problem per K in ``stages`` or a placement problem per count in ``devices``.

    Stage objective: ``"peer"`` (``alpha`` or ``weights``; the default), ``"memory"`` (mem_peak
    alone) or ``"throughput"`` (`StageProblem.pipeline`: ``memory`` bytes per stage, ``bandwidth``
    of its sends, ``micro_batches``). Placement links: ``bandwidth`` in bytes/s, or ``comm_ratio``
    (a mean transfer is that many mean ops, DOPPLER's setting), plus ``latency`` seconds.
    """

    kind: str
    stages: tuple[int, ...] = ()
    alpha: float = 100.0
    weights: dict[str, float] | None = None
    capacity: int | None = None
    devices: tuple[int, ...] = ()
    comm_ratio: float | None = None
    bandwidth: float | None = None
    latency: float = 0.0
    objective: str = "peer"
    memory: int | None = None
    micro_batches: int = 4


@dataclass(frozen=True)
class MethodSpec:
    """A `solve()` method and its budget; ``label`` names it in tables (default: ``name``)."""

    name: str
    label: str
    time_limit: float = 60.0
    work_limit: float | None = None
    deterministic: bool = True
    workers: int = 1
    preschedule: str | None = None
    record_progress: bool = False

    def solve_kwargs(self, seed: int) -> dict[str, Any]:
        kw = {"method": self.name, "time_limit": self.time_limit, "work_limit": self.work_limit, "seed": seed,
              "deterministic": self.deterministic, "workers": self.workers}
        if self.preschedule is not None:
            kw["preschedule"] = self.preschedule
        return kw


@dataclass(frozen=True)
class ExecutionSpec:
    """Capture a zoo ``model``, profile it on ``devices``, solve it with ``methods`` and run each
    answer on the real devices (plus the whole model on each device alone when ``single_device``).

    ``devices = "auto"``: ``cuda:0`` and ``cpu`` where a GPU is present, two CPU workers otherwise.
    """

    model: str
    kind: str = "placement"
    devices: tuple[str, ...] | str = "auto"
    methods: tuple[MethodSpec, ...] = ()
    single_device: bool = False
    weights: dict[str, float] | None = None
    batch_size: int = 1
    image_size: int | None = None
    micro_batches: int = 4
    timed_runs: int = 3
    profile_runs: int = 5


@dataclass(frozen=True)
class TrainingSpec:
    """Train the ``policy`` (``placement`` or ``stage``) from each seed with ``config`` (fields of
    `incsched.train.placement.PlacementTrainConfig` or `incsched.train.stage.StageTrainConfig` that
    differ from its defaults, which are the shipped checkpoint's), once under each of ``kernels``
    (`incsched.train.kernels.KERNEL_SETTINGS`: ``native``, ``avx2``, ``portable``)."""

    policy: str
    label: str
    config: dict[str, Any] = field(default_factory=dict)
    kernels: tuple[str, ...] = ("native",)


@dataclass(frozen=True)
class Experiment:
    """A checked config, its profile applied. ``digest`` is the SHA-256 of everything that
    decides its numbers (the config hash every row carries)."""

    name: str
    description: str
    source: str
    profile: str | None
    seeds: tuple[int, ...]
    repeats: int
    graphs: tuple[GraphSpec, ...]
    problems: tuple[ProblemSpec, ...]
    methods: tuple[MethodSpec, ...]
    executions: tuple[ExecutionSpec, ...]
    report: dict[str, Any]
    base_dir: str
    trainings: tuple[TrainingSpec, ...] = ()

    @property
    def digest(self) -> str:
        data = asdict(self)
        for k in ("source", "base_dir", "description"):
            data.pop(k)
        return hashlib.sha256(json_bytes(data)).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "digest": self.digest}


def shipped_experiments() -> list[str]:
    """Names of the shipped configs (``inc_ilp``, ``doppler``, ...), sorted."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.toml"))


def load_experiment(name_or_path: str | Path, profile: str | None = None) -> Experiment:
    """Read and check a config: a shipped name (``doppler``) or a ``.toml`` path.

    Relative ``folder`` paths resolve against the config file's folder, except in shipped configs,
    where they resolve against the current folder (run them from the repository root).

    Raises
    ------
    ConfigError
        Unknown config or profile, a TOML syntax error, a bad value (generator arguments included,
        checked by the generator's own rules and the input limits), or a grid of more cells than
        ``INCSCHED_MAX_EXPERIMENT_CELLS`` allows, counted before it is expanded; one line naming
        the key.
    """
    path = Path(name_or_path)
    shipped = not path.suffix and not path.exists() and "/" not in str(name_or_path)
    if shipped:
        path = EXPERIMENTS_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise ConfigError(f"no shipped experiment named {str(name_or_path)!r} (shipped: {', '.join(shipped_experiments())}; or give a .toml path)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    src = path.name
    profiles = _table(raw.pop("profiles", {}), "profiles", src)
    if profile is not None:
        if profile not in profiles:
            raise ConfigError(f"{src}: profiles: no profile {profile!r} (has: {', '.join(profiles) or 'none'})")
        overrides = _table(profiles[profile], f"profiles.{profile}", src)
        bad = sorted(set(overrides) & {"name", "profiles"})
        if bad:
            raise ConfigError(f"{src}: profiles.{profile}.{bad[0]}: a profile cannot change this key")
        _known(overrides, _TOP_KEYS, f"profiles.{profile}", src)
        raw = {**raw, **overrides}
    else:
        overrides = {}
    return _experiment(raw, src, profile, set(overrides), base_dir=str(Path.cwd() if shipped else path.resolve().parent))


# ---------------------------------------------------------------------------- checking, key by key

_TOP_KEYS = {"name", "description", "seeds", "repeats", "graphs", "problems", "methods", "executions", "trainings", "report"}


def _experiment(raw: dict, src: str, profile: str | None, overridden: set[str], base_dir: str) -> Experiment:
    def at(key: str) -> str:  # where a key's value came from: the profile's table or the top level
        return f"profiles.{profile}.{key}" if key in overridden else key

    def top(key: str) -> str:
        return f"profiles.{profile}" if key in overridden else ""

    _known(raw, _TOP_KEYS, "", src)
    name = _get(raw, "name", str, "", src, required=True)
    seeds = tuple(_ints(raw.get("seeds", [0]), at("seeds"), src, low=0, high=2**31 - 1))
    repeats = _get(raw, "repeats", int, top("repeats"), src, default=1, low=1)

    def each(key: str, check) -> tuple:
        return tuple(check(t, f"{at(key)}[{i}]", src) for i, t in enumerate(_tables(raw.get(key, []), at(key), src)))

    graphs, problems, methods = each("graphs", _graph), each("problems", _problem), each("methods", _method)
    executions, trainings = each("executions", _execution), each("trainings", _training)
    if not executions and not trainings and not (graphs and problems and methods):
        missing = next(k for k, v in (("graphs", graphs), ("problems", problems), ("methods", methods)) if not v)
        raise ConfigError(f"{src}: {at(missing)}: at least one is needed (or an [[executions]] or [[trainings]] table)")
    kinds = {p.kind for p in problems}
    for i, m in enumerate(methods):
        if not method_kinds(m.name) & kinds:
            raise ConfigError(f"{src}: {at('methods')}[{i}].name: {m.name!r} solves none of this config's problems ({', '.join(sorted(kinds))})")
    labels = [m.label for m in methods]
    dup = next((lab for lab in labels if labels.count(lab) > 1), None)
    if dup:
        raise ConfigError(f"{src}: {at('methods')}: two methods labelled {dup!r}; give one a distinct label")
    report = _table(raw.get("report", {}), at("report"), src)
    _known(report, {"reference"}, at("report"), src)
    if "reference" in report and report["reference"] not in labels:
        raise ConfigError(f"{src}: {at('report')}.reference: {report['reference']!r} is not a method label ({', '.join(labels)})")
    exp = Experiment(name=name, description=_get(raw, "description", str, top("description"), src, default=""), source=src, profile=profile,
                     seeds=seeds, repeats=repeats, graphs=graphs, problems=problems, methods=methods,
                     executions=executions, report=report, base_dir=base_dir, trainings=trainings)
    check_grid_size(exp, keys={"repeats": at("repeats"), "seeds": at("seeds"), "graphs": at("graphs"), "problems": at("problems")})
    return exp


def solve_cells_per_graph(exp: Experiment) -> int:
    """Solve cells one graph makes: its problem instances x the methods solving each x seeds x repeats."""
    per = 0
    for p in exp.problems:
        instances = len(p.stages) if p.kind == "stage" else len(p.devices)
        per += instances * sum(1 for m in exp.methods if p.kind in method_kinds(m.name))
    return per * len(exp.seeds) * exp.repeats


def check_grid_size(exp: Experiment, *, folder_graphs: int = 1, extra_graphs: int = 0, keys: dict[str, str] | None = None) -> int:
    """Count the cells ``exp`` expands into, without expanding it, and refuse more than the
    ``max_experiment_cells`` input limit (``INCSCHED_MAX_EXPERIMENT_CELLS``).

    Graphs from a folder are counted as ``folder_graphs`` per folder (their files are listed only
    when the experiment runs, where `incsched.experiment.run.plan` counts again with
    ``extra_graphs``, the graphs it found beyond those).

    Returns
    -------
    int
        The number of cells.

    Raises
    ------
    ConfigError
        Naming the largest factor's key (``repeats``, ``seeds``, ``graphs``, ``problems``), the
        product and the limit.
    """
    keys = {"repeats": "repeats", "seeds": "seeds", "graphs": "graphs", "problems": "problems", **(keys or {})}
    n_graphs = extra_graphs + sum(len(g.names) if g.source == "shipped" else len(g.seeds) if g.source == "generated" else folder_graphs
                                  for g in exp.graphs)
    runs = len(exp.seeds) * exp.repeats
    solve = n_graphs * solve_cells_per_graph(exp)
    executions = runs * sum(len(e.methods) + (len(e.devices) if e.single_device and not isinstance(e.devices, str) else 2 * e.single_device)
                            for e in exp.executions)
    trainings = runs * sum(len(t.kernels) for t in exp.trainings)
    total = solve + executions + trainings
    limit = input_limits().max_experiment_cells
    if total > limit:
        per_graph = solve_cells_per_graph(exp) // max(runs, 1)
        factors = {"repeats": exp.repeats, "seeds": len(exp.seeds), "graphs": n_graphs, "problems": per_graph}
        key = max(factors, key=lambda k: factors[k])
        shown = (f"{n_graphs:,} graphs x {per_graph:,} problem instances and methods x {len(exp.seeds):,} seeds x {exp.repeats:,} repeats"
                 + (f", plus {executions + trainings:,} execution and training cells" if executions + trainings else ""))
        raise ConfigError(
            f"{exp.source}: {keys[key]}: the grid has {total:,} cells ({shown}), more than the limit of {limit:,} "
            f"(set {ENV_VARS['max_experiment_cells']} to raise it)"
        )
    return total


def _graph(t: dict, where: str, src: str) -> GraphSpec:
    sources = [k for k in ("shipped", "generator", "folder") if k in t]
    if len(sources) != 1:
        raise ConfigError(f"{src}: {where}: give exactly one of 'shipped', 'generator', 'folder' (got {', '.join(sources) or 'none'})")
    kind = sources[0]
    if kind == "shipped":
        _known(t, {"shipped"}, where, src)
        from ..data import shipped_graphs

        names = t["shipped"]
        if names == "*":
            names = shipped_graphs()
        names = _strings(names, f"{where}.shipped", src)
        unknown = [n for n in names if n not in shipped_graphs()]
        if unknown:
            raise ConfigError(f"{src}: {where}.shipped: no shipped graph {unknown[0]!r} (shipped: {', '.join(shipped_graphs())})")
        return GraphSpec("shipped", names=tuple(names))
    if kind == "generator":
        _known(t, {"generator", "args", "seeds"}, where, src)
        gen = _get(t, "generator", str, where, src, required=True)
        if gen not in GENERATORS:
            raise ConfigError(f"{src}: {where}.generator: unknown generator {gen!r} (known: {', '.join(GENERATORS)})")
        args = _table(t.get("args", {}), f"{where}.args", src)
        from .. import generators

        params = inspect.signature(getattr(generators, gen)).parameters
        for k in args:
            if k not in params or k == "seed":
                raise ConfigError(f"{src}: {where}.args.{k}: {gen} takes no argument {k!r}"
                                  + (" (use seeds)" if k == "seed" else f" (takes: {', '.join(p for p in params if p != 'seed')})"))
        try:  # the generator's own checks and the input limits, before anything is generated
            generators.check_arguments(gen, args)
        except LimitError as exc:
            raise ConfigError(f"{src}: {where}.args: {exc}") from None
        except ValueError as exc:  # "n_nodes must be ...": named as the key it is about
            first, _, rest = str(exc).partition(" ")
            key = first.rstrip(":")
            raise ConfigError(f"{src}: {where}.args.{key}: {rest}" if key in args else f"{src}: {where}.args: {exc}") from None
        return GraphSpec("generated", generator=gen, args=dict(args),
                         seeds=tuple(_ints(t.get("seeds", [0]), f"{where}.seeds", src, low=0, high=2**63 - 1)))
    _known(t, {"folder", "pattern", "optional"}, where, src)
    return GraphSpec("folder", folder=_get(t, "folder", str, where, src, required=True), pattern=_get(t, "pattern", str, where, src, default="*"),
                     optional=_get(t, "optional", bool, where, src, default=False))


def _problem(t: dict, where: str, src: str) -> ProblemSpec:
    kind = _get(t, "kind", str, where, src, required=True)
    if kind == "stage":
        _known(t, {"kind", "stages", "alpha", "weights", "capacity", "objective", "memory", "bandwidth", "micro_batches"}, where, src)
        if "stages" not in t:
            raise ConfigError(f"{src}: {where}.stages: missing (a list of stage counts, e.g. [2, 4, 8])")
        weights = _weights(t.get("weights"), f"{where}.weights", src)
        objective = _get(t, "objective", str, where, src, default="peer")
        if objective not in ("peer", "memory", "throughput"):
            raise ConfigError(f"{src}: {where}.objective: must be 'peer', 'memory' or 'throughput', got {objective!r}")
        if objective != "peer" and (weights is not None or "alpha" in t):
            raise ConfigError(f"{src}: {where}.objective: {objective!r} is an objective of its own; 'alpha' and 'weights' belong to 'peer'")
        for key in ("memory", "bandwidth", "micro_batches"):
            if key in t and objective != "throughput":
                raise ConfigError(f"{src}: {where}.{key}: belongs to objective = 'throughput'")
        return ProblemSpec("stage", stages=tuple(_ints(t["stages"], f"{where}.stages", src, low=1, high=1024)),
                           alpha=_number(t, "alpha", where, src, default=100.0, low=0.0), weights=weights,
                           capacity=_get(t, "capacity", int, where, src, default=None, low=0), objective=objective,
                           memory=_get(t, "memory", int, where, src, default=None, low=1),
                           bandwidth=_number(t, "bandwidth", where, src, default=None, low=0.0, above=True),
                           micro_batches=_get(t, "micro_batches", int, where, src, default=4, low=1))
    if kind == "placement":
        _known(t, {"kind", "devices", "comm_ratio", "bandwidth", "latency"}, where, src)
        if "devices" not in t:
            raise ConfigError(f"{src}: {where}.devices: missing (a list of device counts, e.g. [4, 8])")
        if ("comm_ratio" in t) == ("bandwidth" in t):
            raise ConfigError(f"{src}: {where}: give exactly one of 'comm_ratio' and 'bandwidth'")
        return ProblemSpec("placement", devices=tuple(_ints(t["devices"], f"{where}.devices", src, low=1, high=256)),
                           comm_ratio=_number(t, "comm_ratio", where, src, default=None, low=0.0, above=True),
                           bandwidth=_number(t, "bandwidth", where, src, default=None, low=0.0, above=True),
                           latency=_number(t, "latency", where, src, default=0.0, low=0.0))
    raise ConfigError(f"{src}: {where}.kind: must be 'stage' or 'placement', got {kind!r}")


def _method(t: dict, where: str, src: str) -> MethodSpec:
    _known(t, {"name", "label", "time_limit", "work_limit", "deterministic", "workers", "preschedule", "record_progress"}, where, src)
    name = _get(t, "name", str, where, src, required=True)
    if not method_kinds(name):
        from ..front_door import METHODS

        raise ConfigError(f"{src}: {where}.name: unknown method {name!r} (known: {', '.join(list(METHODS) + sorted(_all_preschedulers()))})")
    pre = _get(t, "preschedule", str, where, src, default=None)
    if pre is not None and pre not in _all_preschedulers():
        raise ConfigError(f"{src}: {where}.preschedule: unknown pre-scheduler {pre!r}")
    return MethodSpec(name=name, label=_get(t, "label", str, where, src, default=name),
                      time_limit=_number(t, "time_limit", where, src, default=60.0, low=0.0, above=True),
                      work_limit=_number(t, "work_limit", where, src, default=None, low=0.0, above=True),
                      deterministic=_get(t, "deterministic", bool, where, src, default=True),
                      workers=_get(t, "workers", int, where, src, default=1, low=1, high=1024), preschedule=pre,
                      record_progress=_get(t, "record_progress", bool, where, src, default=False))


def _execution(t: dict, where: str, src: str) -> ExecutionSpec:
    _known(t, {"model", "kind", "devices", "methods", "single_device", "weights", "batch_size", "image_size", "micro_batches",
               "timed_runs", "profile_runs"}, where, src)
    kind = _get(t, "kind", str, where, src, default="placement")
    if kind not in ("stage", "placement"):
        raise ConfigError(f"{src}: {where}.kind: must be 'stage' or 'placement', got {kind!r}")
    devices = t.get("devices", "auto")
    if devices != "auto":
        devices = tuple(_strings(devices, f"{where}.devices", src))
        if not devices:
            raise ConfigError(f"{src}: {where}.devices: at least one device")
    methods = tuple(_method(m, f"{where}.methods[{i}]", src) for i, m in enumerate(_tables(t.get("methods", []), f"{where}.methods", src)))
    for i, m in enumerate(methods):
        if kind not in method_kinds(m.name):
            raise ConfigError(f"{src}: {where}.methods[{i}].name: {m.name!r} does not solve {kind} problems")
    single = _get(t, "single_device", bool, where, src, default=False)
    if single and kind == "stage":
        raise ConfigError(f"{src}: {where}.single_device: only for placements (a pipeline needs one device per stage)")
    if not methods and not single:
        raise ConfigError(f"{src}: {where}.methods: at least one method (or single_device = true)")
    return ExecutionSpec(model=_get(t, "model", str, where, src, required=True), kind=kind, devices=devices, methods=methods,
                         single_device=single, weights=_weights(t.get("weights"), f"{where}.weights", src),
                         batch_size=_get(t, "batch_size", int, where, src, default=1, low=1),
                         image_size=_get(t, "image_size", int, where, src, default=None, low=8),
                         micro_batches=_get(t, "micro_batches", int, where, src, default=4, low=1),
                         timed_runs=_get(t, "timed_runs", int, where, src, default=3, low=1),
                         profile_runs=_get(t, "profile_runs", int, where, src, default=5, low=1))


def _training(t: dict, where: str, src: str) -> TrainingSpec:
    _known(t, {"policy", "label", "config", "kernels"}, where, src)
    policy = _get(t, "policy", str, where, src, required=True)
    if policy not in ("placement", "stage"):
        raise ConfigError(f"{src}: {where}.policy: must be 'placement' or 'stage', got {policy!r}")
    config = _table(t.get("config", {}), f"{where}.config", src)
    if policy == "stage":
        from ..train.stage import StageTrainConfig as Config

        defaults, build = Config().to_json(), Config.from_json
    else:
        from ..train.placement import PlacementTrainConfig as Config

        defaults, build = Config().to_dict(), Config.from_dict
    for k in config:
        if k not in defaults or k == "seed":
            raise ConfigError(f"{src}: {where}.config.{k}: " + ("use seeds" if k == "seed" else f"not a {Config.__name__} field"))
        kind = _value_kind(defaults[k])
        if kind and _value_kind(config[k]) not in (kind, "whole number" if kind == "number" else None):
            raise ConfigError(f"{src}: {where}.config.{k}: must be a {kind}, got {config[k]!r}")
    try:  # the config's own check of every field (incsched.train.fields)
        build({**defaults, **config})
    except (TypeError, ValueError) as exc:
        text = " ".join(str(exc).split())
        first, _, rest = text.partition(" ")
        named = first.split(".")[0] in config  # "imitation_epochs must be ...", "policy.hidden must be ..."
        raise ConfigError(f"{src}: {where}.config.{first}: {rest}" if named else f"{src}: {where}.config: {text}") from None
    from ..train.kernels import KERNEL_SETTINGS

    kernels = _strings(t.get("kernels", ["native"]), f"{where}.kernels", src)
    bad = [k for k in kernels if k not in KERNEL_SETTINGS]
    if bad or not kernels or len(set(kernels)) != len(kernels):
        what = f"unknown setting {bad[0]!r}" if bad else ("at least one setting" if not kernels else "a setting named twice")
        raise ConfigError(f"{src}: {where}.kernels: {what} (settings: {', '.join(KERNEL_SETTINGS)})")
    if "portable" in kernels and config.get("threads", 1) != 1:  # StageTrainConfig.threads would undo the setting's one thread
        raise ConfigError(f"{src}: {where}.config.threads: the portable kernels run one thread, got {config['threads']!r}")
    return TrainingSpec(policy, _get(t, "label", str, where, src, default=policy), dict(config), tuple(kernels))


def _value_kind(v) -> str | None:
    """What a config value is, in TOML's words; None for a default of None (any value)."""
    if v is None:
        return None
    for typ, kind in ((bool, "boolean"), (int, "whole number"), (float, "number"), (str, "string"), ((list, tuple), "list"),
                      (dict, "table")):
        if isinstance(v, typ):
            return kind
    return type(v).__name__


def method_kinds(name: str) -> set[str]:
    """The problem kinds (``stage``, ``placement``) that the method ``name`` solves."""
    from ..inc_ilp.incumbent import PLACEMENT_PRESCHEDULERS, STAGE_PRESCHEDULERS
    from ..front_door import METHODS

    if name in METHODS:
        return {"stage", "placement"}
    return {k for k, table in (("stage", STAGE_PRESCHEDULERS), ("placement", PLACEMENT_PRESCHEDULERS)) if name in table}


def _all_preschedulers() -> set[str]:
    from ..inc_ilp.incumbent import PLACEMENT_PRESCHEDULERS, STAGE_PRESCHEDULERS

    return set(STAGE_PRESCHEDULERS) | set(PLACEMENT_PRESCHEDULERS)


# ---------------------------------------------------------------------------- typed getters


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _known(t: dict, keys: set[str], where: str, src: str) -> None:
    for k in t:
        if k not in keys:
            raise ConfigError(f"{src}: {_key(where, k)}: unknown key (known here: {', '.join(sorted(keys))})")


def _table(x, where: str, src: str) -> dict:
    if not isinstance(x, dict):
        raise ConfigError(f"{src}: {where}: must be a table, got {type(x).__name__}")
    return x


def _tables(x, where: str, src: str) -> list[dict]:
    if not isinstance(x, list) or not all(isinstance(t, dict) for t in x):
        raise ConfigError(f"{src}: {where}: must be an array of tables ([[{where}]])")
    return x


def _get(t: dict, key: str, typ: type, where: str, src: str, *, default=None, required: bool = False, low=None, high=None):
    if key not in t:
        if required:
            raise ConfigError(f"{src}: {_key(where, key)}: missing")
        return default
    v = t[key]
    if typ is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise ConfigError(f"{src}: {_key(where, key)}: must be a whole number, got {v!r}")
    if typ is not int and not isinstance(v, typ):
        raise ConfigError(f"{src}: {_key(where, key)}: must be a {typ.__name__}, got {v!r}")
    if (low is not None and v < low) or (high is not None and v > high):
        raise ConfigError(f"{src}: {_key(where, key)}: must be in {low} .. {high if high is not None else 'any'}, got {v!r}")
    return v


def _number(t: dict, key: str, where: str, src: str, *, default, low: float, above: bool = False):
    if key not in t:
        return default
    v = t[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low or (above and v == low):
        raise ConfigError(f"{src}: {_key(where, key)}: must be a finite number {'>' if above else '>='} {low:g}, got {v!r}")
    return v


def _ints(x, where: str, src: str, *, low: int, high: int | None = None) -> list[int]:
    if not isinstance(x, list) or not x:
        raise ConfigError(f"{src}: {where}: must be a non-empty list of whole numbers, got {x!r}")
    for v in x:
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            raise ConfigError(f"{src}: {where}: {v!r} is not a whole number in {low} .. {high if high is not None else 'any'}")
    return list(x)


def _strings(x, where: str, src: str) -> list[str]:
    if isinstance(x, str):
        x = [x]
    if not isinstance(x, list) or not all(isinstance(v, str) for v in x):
        raise ConfigError(f"{src}: {where}: must be a list of names, got {x!r}")
    return list(x)


def _weights(x, where: str, src: str) -> dict[str, float] | None:
    if x is None:
        return None
    terms = ("mem_peak", "comm_total", "comm_peak", "compute_peak", "spill")
    x = _table(x, where, src)
    for k, v in x.items():
        if k not in terms:
            raise ConfigError(f"{src}: {where}.{k}: not an objective term ({', '.join(terms)})")
        _number(x, k, where, src, default=None, low=0.0)
    return dict(x)
