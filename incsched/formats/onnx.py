"""ONNX models in: a ``.onnx`` file read as a `CompGraph`, for models that do not come as PyTorch.

One graph node per ONNX operator (and per graph input); edges are the tensors between them. Shapes
come from ONNX shape inference, parameter bytes from the initializers each operator reads (a shared
one charged once, to its first reader, as capture does), output bytes from the inferred tensor
shapes, FLOPs from the formulas below. Shape arithmetic (``Shape``, ``Constant`` and every operator
fed only by such values) is folded as a constant, as an exporter's optimiser would, and free ops
(reshapes, casts ...) are then fused into a neighbour like ``capture(coarsen="trivial")`` does.

FLOPs follow ``torch.utils.flop_counter``'s convention where it has one: 2 per multiply-add for
Conv, ConvTranspose, Gemm, MatMul and Attention, bias not counted. Where it counts nothing
(elementwise ops, pooling, normalisation, softmax), this reader counts a few per output element
(`_PER_ELEMENT`), so an ONNX graph's total is a little above the same model's torch capture.
Needs the ``onnx`` package (``pip install 'incsched[onnx]'``); the rest of incsched imports without it.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..graph.coarsen import TRIVIAL_OPS, fuse_trivial
from ..errors import FormatError, GraphError
from ..graph import MAX_TOTAL_BYTES, CompGraph
from ..jsonio import read_limited
from ..limits import InputLimits, check_count, input_limits

log = logging.getLogger(__name__)

__all__ = ["read_onnx", "ONNX_FREE_OPS"]

#: ONNX op kinds (as this reader names them) that move no data of their own, beside `TRIVIAL_OPS`.
ONNX_FREE_OPS: frozenset[str] = frozenset(
    {"cast", "cast_like", "shape", "size", "constant", "constant_of_shape", "range", "squeeze", "unsqueeze",
     "split_to_sequence", "sequence_at"}
)

#: Operators whose outputs depend only on their inputs' shapes, never their values.
_SHAPE_ONLY = {"Shape", "Size"}

#: FLOPs per output element where torch's flop counter counts none (an op is one arithmetic step
#: per element unless listed): normalisations subtract, scale and shift (batch norm in inference
#: has its statistics folded to one scale and one shift), softmax exponentiates, sums and divides.
_PER_ELEMENT = {
    "BatchNormalization": 2, "InstanceNormalization": 5, "LayerNormalization": 5, "GroupNormalization": 5,
    "RMSNormalization": 4, "SimplifiedLayerNormalization": 4, "LpNormalization": 3,
    "Softmax": 3, "LogSoftmax": 4, "Gelu": 8, "FastGelu": 8, "Erf": 1,
}
_ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Abs", "Max", "Min", "Mean", "Sum",
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Softplus",
    "Softsign", "Clip", "Where", "Sin", "Cos", "Mish", "Erf", "Equal", "Less", "Greater", "Not", "And", "Or",
    "Floor", "Ceil", "Round", "Sign", "Mod", "Trilu", "IsNaN", "IsInf",
}
_POOLS = {"MaxPool", "AveragePool", "LpPool"}
_REDUCTIONS = {
    "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp",
}

# Packed sub-byte element types: int4, uint4 and float4 two elements a byte, int2 and uint2 four.
_SUB_BYTE_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}


def read_onnx(
    path: str | os.PathLike,
    *,
    coarsen: str = "trivial",
    dims: Mapping[str, int] | None = None,
    limits: InputLimits | None = None,
) -> CompGraph:
    """Read an ONNX model file as a computation graph.

    Parameters
    ----------
    path : path-like
        A ``.onnx`` file (gzipped too). Weights stored as external data are not read: their sizes
        come from the initializers' declared shapes.
    coarsen : {"trivial", "none"}
        ``"trivial"`` (default, as capture) fuses free ops (reshapes, casts, squeezes ...) into a
        neighbour; ``"none"`` keeps one node per operator.
    dims : mapping of str to int, optional
        Values of the inputs' symbolic dimensions (``{"batch": 8, "sequence": 128}``), each a
        positive whole number below 2**63 (ONNX's int64); any not given is 1, names the inputs do
        not have are logged, and the graph's ``meta["symbolic_dims"]`` records what was used.
    limits : InputLimits, optional
        Largest file, node and edge counts accepted (default `incsched.limits.input_limits()`).

    Returns
    -------
    CompGraph
        ``members`` are the ONNX node names; ``meta`` holds the producer, opsets, input shapes,
        ``initializer_bytes`` and ``constant_bytes`` (their sum is the graph's parameter total),
        the ops whose FLOPs are unknown and the shape-only ops folded.

    Raises
    ------
    FormatError
        The ``onnx`` package is missing (the message says how to install it), the file is not an
        ONNX model (text that is not UTF-8 included), ``dims`` is not a mapping of names to whole
        numbers from 1 to 2**63 - 1, a tensor has a negative dimension, a tensor's bytes pass
        `incsched.graph.MAX_TOTAL_BYTES` (2**62), or an operator's FLOPs pass a float64.
    GraphError
        Sizes each within 2**62 whose sum (a node's outputs, an edge, the graph's total) is not;
        the message starts with the file's name.
    LimitError
        The file or the graph is larger than ``limits`` allow.
    OSError
        The file cannot be read.
    """
    try:
        import onnx
        from onnx import shape_inference
    except ImportError:
        raise FormatError(f"{path}: reading ONNX needs the onnx package: pip install 'incsched[onnx]'") from None
    if coarsen not in ("trivial", "none"):
        raise FormatError(f"{path}: coarsen must be 'trivial' or 'none' for ONNX models, got {coarsen!r}")
    dims = _check_dims(dims, str(path))
    lim = input_limits(limits)
    raw = read_limited(path, lim.max_file_bytes)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError and friends: the bytes are not a model
        raise FormatError(f"{path}: not an ONNX model ({type(exc).__name__}: {_first_line(exc)})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise FormatError(f"{path}: not an ONNX model (no graph, or a graph without operators)")
    bad_text = _non_utf8_field(model)
    if bad_text:
        raise FormatError(f"{path}: not an ONNX model (its {bad_text} is not UTF-8 text)")
    check_count("nodes", len(model.graph.node) + len(model.graph.input), lim.max_nodes, "max_nodes", str(path))

    _drop_large_weight_data(model)
    symbolic = _fix_symbolic_dims(model, dims, str(path))
    inferred = _infer_shapes(model, shape_inference, str(path))
    try:
        return _build(inferred, onnx, source=str(path), coarsen=coarsen, symbolic=symbolic, limits=lim)
    except GraphError as exc:  # sizes each within 2**62 whose sum per node, edge or graph is not
        exc.args = (f"{path}: {exc}",)
        raise


# ---------------------------------------------------------------------- building the graph


def _build(model, onnx, *, source: str, coarsen: str, symbolic: dict[str, int], limits: InputLimits) -> CompGraph:
    g = model.graph
    tensors = _TensorTypes(g, onnx, source)
    initializers = {t.name: t for t in g.initializer}
    init_bytes = {name: tensors.bytes_of(name) or _initializer_bytes(t, onnx, source) for name, t in initializers.items()}

    # Values known before the model runs: initializers, constants, and what is computed from them
    # and from shapes alone. Operators producing only such values are folded, not graph nodes; each
    # such value remembers the weights it is computed from, charged to the operator that reads it.
    weights_of: dict[str, frozenset[str]] = {x: frozenset([x]) for x in initializers}
    constant_value_bytes: dict[str, int] = {}
    folded: list[str] = []
    names, ops, kinds, node_outputs, node_inputs, flops = [], [], [], [], [], []
    for x in g.input:
        if x.name in initializers:  # old exporters list initializers as inputs too
            continue
        names.append(x.name)
        ops.append(None)
        kinds.append("input")
        node_outputs.append([x.name])
        node_inputs.append([])
        flops.append(0.0)
    used_names = set(names)
    unknown_flops: set[str] = set()
    for i, node in enumerate(g.node):
        inputs = [x for x in node.input if x]
        # CastLike reads only the dtype of its second input, Shape and Size only their input's shape.
        value_inputs = inputs[:1] if node.op_type == "CastLike" else inputs
        if node.op_type == "Constant" or node.op_type in _SHAPE_ONLY or (inputs and all(x in weights_of for x in value_inputs)):
            if node.op_type == "Constant":
                derived = frozenset(node.output)
                for x in node.output:
                    constant_value_bytes[x] = tensors.bytes_of(x) or _constant_bytes(node, onnx, source)
            elif node.op_type in _SHAPE_ONLY:
                derived = frozenset()
            else:
                derived = frozenset().union(*(weights_of[x] for x in value_inputs))
            weights_of.update((x, derived) for x in node.output if x)
            folded.append(node.op_type)
            continue
        name = _unique(node.name or f"{node.op_type}_{i}", used_names)
        names.append(name)
        ops.append(node)
        kinds.append(_kind(node))
        node_outputs.append([x for x in node.output if x])
        node_inputs.append(inputs)
        value = _flops_of(node, name, tensors, source)
        if value is None:
            unknown_flops.add(node.op_type)
        flops.append(value or 0.0)
    check_count("nodes", len(names), limits.max_nodes, "max_nodes", source)

    for node in ops:
        if node is not None and node.op_type == "SplitToSequence":  # its pieces: as many bytes as its input
            tensors.set_bytes(node.output[0], tensors.bytes_of(node.input[0]))
    producer = {x: v for v, outs in enumerate(node_outputs) for x in outs}
    out_bytes = [sum(tensors.bytes_of(x) or 0 for x in outs) for outs in node_outputs]
    charged: set[str] = set()
    readers: dict[str, list[str]] = {}  # weight -> the nodes that read it
    edges: dict[tuple[int, int], int] = {}
    for v, inputs in enumerate(node_inputs):
        seen_here: set[str] = set()
        for x in inputs:
            if x in producer:
                u = producer[x]
                if x not in seen_here:  # a tensor moves once per reader, however often it reads it
                    edges[(u, v)] = edges.get((u, v), 0) + (tensors.bytes_of(x) or 0)
            else:
                for w in sorted(weights_of.get(x, ())):
                    charged.add(w)
                    if names[v] not in readers.setdefault(w, []):
                        readers[w].append(names[v])
            seen_here.add(x)
    check_count("edges", len(edges), limits.max_edges, "max_edges", source)
    # A weight one node reads is that node's; one several read (tied embeddings) is shared.
    param_bytes = [0] * len(names)
    position = {nm: v for v, nm in enumerate(names)}
    shared = []
    for w, r in sorted(readers.items()):
        nbytes = init_bytes.get(w, constant_value_bytes.get(w, 0))
        if len(r) > 1:
            shared.append({"name": w, "bytes": nbytes, "read_by": r})
        else:
            param_bytes[position[r[0]]] += nbytes

    outputs = sorted({names[producer[x.name]] for x in g.output if x.name in producer})
    meta: dict[str, Any] = {
        "model": g.name or os.path.basename(source),
        "method": "onnx",
        "source_format": "onnx",
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opsets": {imp.domain or "ai.onnx": int(imp.version) for imp in model.opset_import},
        "input_shapes": [tensors.shape_of(x.name) for x in g.input if x.name not in initializers],
        "symbolic_dims": symbolic,
        "outputs": outputs,
        "onnx_nodes": len(g.node),
        "folded_constant_ops": len(folded),
        "initializer_bytes": sum(init_bytes[x] for x in charged if x in init_bytes),
        "constant_bytes": sum(constant_value_bytes[x] for x in charged if x in constant_value_bytes),
        "shared_params": [{"params": [w], "held_by": r[0], "read_by": r} for w, r in sorted(readers.items()) if len(r) > 1],
        "flops_unknown_ops": sorted(unknown_flops),
        "unknown_size_tensors": tensors.unknown_count(node_outputs),
        "coarsening": [],
        "costs": {"bytes": "from tensor shapes (ONNX shape inference)"},  # no times: every kind is estimated
    }
    if any(tensors.bytes_of(outs[0]) is None for outs, kind in zip(node_outputs, kinds) if kind == "input"):
        log.warning("%s: some inputs have unknown shapes; their bytes are counted as 0", source)
    src, dst = [u for u, _ in edges], [v for _, v in edges]
    graph = CompGraph(
        names,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        op=kinds,
        flops=flops,
        param_bytes=param_bytes,
        out_bytes=out_bytes,
        edge_bytes=list(edges.values()),  # Python ints: CompGraph refuses a sum past 2**62 by name
        members=[[nm] for nm in names],
        shared_weights=shared,
        name=meta["model"],
        meta=meta,
    )
    if coarsen == "trivial":
        graph = fuse_trivial(graph, TRIVIAL_OPS | ONNX_FREE_OPS)
        graph = graph.replace(meta={**graph.meta, "fine_nodes": len(names)})
    log.info("read %s: %d ONNX operators -> %d nodes (%d folded as constants)", source, len(g.node), graph.n_nodes, len(folded))
    return graph


_KIND_NAMES = {"MatMul": "matmul", "MatMulInteger": "matmul_integer", "FusedMatMul": "matmul", "IsNaN": "isnan", "IsInf": "isinf"}


def _kind(node) -> str:
    """Op kind as capture names them where the two agree (``Conv`` -> ``conv``, ``MatMul`` -> ``matmul``)."""
    kind = _KIND_NAMES.get(node.op_type) or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", node.op_type).lower()
    if node.domain and node.domain not in ("ai.onnx", ""):
        return f"{node.domain}.{kind}"
    return kind


def _unique(name: str, used: set[str]) -> str:
    out, k = name, 1
    while out in used:
        out, k = f"{name}_{k}", k + 1
    used.add(out)
    return out


def _non_utf8_field(model) -> str | None:
    """The name of a text field (an op type, a tensor name ...) that is not UTF-8, or None.

    ONNX's text fields are proto2 strings, which protobuf does not check: a damaged file gives
    ``bytes`` where every later step expects ``str``. Walked with a stack, not recursion, since
    subgraphs (If, Loop) may nest deeply.
    """
    stack = [model]
    while stack:
        msg = stack.pop()
        for field, value in msg.ListFields():
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED  # protobuf < 6.31
            values = value if repeated else (value,)
            if field.type == field.TYPE_STRING:
                if any(isinstance(v, bytes) for v in values):
                    return f"{field.containing_type.name}.{field.name}"
            elif field.type == field.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:  # ONNX has no maps
                stack.extend(values)
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


#: Longest 1-D tensor that ONNX's data propagation may see. It turns every 1-D tensor of known
#: length that an Add, Mul, Slice ... reads into a list of that many dimensions, about 260 bytes
#: each (measured with onnx 1.23: 274 MB at 2**20, std::bad_alloc or the OOM killer at 2**24 and
#: up); shape tensors, what it is for, have a handful of elements.
_DATA_PROP_MAX_LENGTH = 2**16


def _infer_shapes(model, shape_inference, source: str):
    """The model with ONNX's inferred shapes: a plain pass, then data propagation (which infers the
    shapes that shape arithmetic computes) only when the plain pass left some unknown and no 1-D
    tensor is long enough to make it exhaust memory. A model inference fails on is kept as declared."""
    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
    except Exception as exc:  # an inconsistent model: keep what the file declares, say so
        log.warning("%s: ONNX shape inference failed (%s); sizes of undeclared tensors are unknown", source, _first_line(exc))
        return model
    g = inferred.graph
    infos = [*g.input, *g.value_info, *g.output]
    known = {x.name for x in infos if x.type.HasField("tensor_type") and x.type.tensor_type.HasField("shape")
             and all(d.HasField("dim_value") for d in x.type.tensor_type.shape.dim)}
    produced = {x for node in g.node for x in node.output if x}
    if produced <= known | {t.name for t in g.initializer}:
        return inferred
    longest = max(
        [t.dims[0] for t in g.initializer if len(t.dims) == 1]
        + [x.type.tensor_type.shape.dim[0].dim_value for x in infos if x.name in known and len(x.type.tensor_type.shape.dim) == 1],
        default=0,
    )
    if longest > _DATA_PROP_MAX_LENGTH:
        log.info("%s: a 1-D tensor of %d elements; shapes computed by shape arithmetic are left unknown", source, longest)
        return inferred
    try:
        return _data_propagation(model, shape_inference)
    except MemoryError:
        log.warning("%s: ONNX shape inference with data propagation needed more than %d MiB; shapes computed by shape "
                    "arithmetic are left unknown", source, _DATA_PROP_MEMORY >> 20)
    except Exception as exc:
        log.warning("%s: ONNX shape inference with data propagation failed (%s); some sizes are unknown", source, _first_line(exc))
    return inferred


#: Memory ONNX's data propagation may take beyond what the process holds. A 1-D tensor whose length
#: only data propagation learns (a ConstantOfShape of a sliced Shape) escapes the length check
#: above: measured 2.5 GB at 2**24 elements, so it runs in a forked child under this limit.
_DATA_PROP_MEMORY = 2 << 30


def _data_propagation(model, shape_inference):
    """``infer_shapes(..., data_prop=True)``, in a forked child whose address space is limited to
    the parent's plus `_DATA_PROP_MEMORY` where the platform allows (Linux); in this process elsewhere.

    Raises
    ------
    MemoryError
        The child ran out of its limit.
    RuntimeError
        Inference failed in the child (the message is its error's).
    """
    def infer():
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)

    try:
        import resource

        page_bytes = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/statm") as fh:
            address_space = int(fh.read().split()[0]) * page_bytes
    except (ImportError, OSError, ValueError, AttributeError):
        return infer()
    if not hasattr(os, "fork"):
        return infer()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: infer, send the model back, and leave without running the parent's exit handlers
        code = 0
        try:
            os.close(read_end)
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            limit = address_space + _DATA_PROP_MEMORY
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
            try:
                payload = b"OK" + infer().SerializeToString()
            except MemoryError:
                payload, code = b"MEMORY", 3
            except Exception as exc:  # noqa: BLE001 - sent back as the parent's error
                payload, code = b"ERROR" + _first_line(exc).encode("utf-8", "replace"), 4
            with os.fdopen(write_end, "wb") as fh:
                fh.write(payload)
        except BaseException:  # noqa: BLE001 - nothing may escape a forked child
            code = 5
        os._exit(code)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as fh:
            payload = fh.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if payload.startswith(b"OK") and os.waitstatus_to_exitcode(status) == 0:
        out = type(model)()
        out.ParseFromString(payload[2:])
        return out
    if payload.startswith(b"MEMORY") or not payload:  # an empty pipe: killed, most likely for memory
        raise MemoryError
    raise RuntimeError(payload[5:].decode("utf-8", "replace") or f"exit status {os.waitstatus_to_exitcode(status)}")


def _drop_large_weight_data(model, keep_bytes: int = 4096) -> None:
    """Forget the values of large initializers, in place: sizes come from their declared shapes, and
    shape inference then copies kilobytes, not the weights (seconds for a 100 MB model). Small ones
    stay: shape inference reads them when they are shapes (a Reshape's target)."""
    for t in model.graph.initializer:
        if t.ByteSize() > keep_bytes:
            for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
                t.ClearField(field)


#: Largest value of a symbolic dimension: ONNX stores dimensions as int64.
_MAX_DIM = 2**63 - 1


def _check_dims(dims, source: str) -> dict[str, int]:
    """``read_onnx``'s ``dims`` as a dict of names to whole numbers from 1 to 2**63 - 1."""
    if dims is None:
        return {}
    if not isinstance(dims, Mapping):
        raise FormatError(f"{source}: dims must be a mapping of dimension names to sizes, got {type(dims).__name__} ({dims!r:.80})")
    out: dict[str, int] = {}
    for label, value in dims.items():
        if not isinstance(label, str):
            raise FormatError(f"{source}: dims names must be strings, got {type(label).__name__} ({label!r:.80})")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= int(value) <= _MAX_DIM:
            shown = f"an integer of {int(value).bit_length()} bits" if isinstance(value, int) and abs(value) > 2**64 else repr(value)
            raise FormatError(
                f"{source}: dims[{label!r}] must be a whole number from 1 to 2**63 - 1 (ONNX's int64), got {shown:.80}"
            )
        out[label] = int(value)
    return out


def _fix_symbolic_dims(model, dims: dict[str, int], source: str) -> dict[str, int]:
    """Give every symbolic or unknown input dimension a value (``dims``, else 1), in place.

    A dimension of 0 is kept (an empty tensor: no bytes); a negative one is refused by name.
    """
    used: dict[str, int] = {}
    initializers = {t.name for t in model.graph.initializer}
    for x in model.graph.input:
        if x.name in initializers or not x.type.HasField("tensor_type"):
            continue
        for axis, d in enumerate(x.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise FormatError(
                        f"{source}: input {x.name!r} has dimension {d.dim_value} at axis {axis}; "
                        "ONNX dimensions are 0 or more, or symbolic"
                    )
                continue
            label = d.dim_param or "?"
            value = dims.get(label, 1)
            d.Clear()
            d.dim_value = value
            used[label] = value
    unknown = sorted(set(dims) - set(used))
    if unknown:
        log.warning("%s: dims %s name no symbolic input dimension of the model (it has %s)", source, unknown, sorted(used))
    if used:
        log.info("symbolic input dimensions set to %s", used)
    return used


def _shape_text(shape: list[int]) -> str:
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:4]))}, ... ({len(shape)} dimensions)]"


def _size_text(n: int) -> str:
    return f"{n:,}" if n < 10**30 else f"about 2**{n.bit_length() - 1}"


def _checked_bytes(what: str, name: str, shape: list[int], bits: int, source: str) -> int | None:
    """Bytes of a tensor of ``shape`` with ``bits`` per element (0: unknown), as an exact Python int.

    Refuses by name a negative dimension, more elements than int64 counts, or more bytes than a
    graph may hold (`MAX_TOTAL_BYTES`): past those, numpy's int64 and float64 costs would overflow.
    """
    for axis, d in enumerate(shape):
        if d < 0:
            raise FormatError(f"{source}: {what} {name!r} has dimension {d} at axis {axis}; ONNX dimensions are 0 or more")
    numel = math.prod(shape)
    nbytes = (numel * bits + 7) // 8 if bits else None
    if numel > _MAX_DIM or (nbytes is not None and nbytes > MAX_TOTAL_BYTES):
        size = f"{_size_text(nbytes)} bytes" if nbytes is not None else f"{_size_text(numel)} elements"
        raise FormatError(
            f"{source}: {what} {name!r} of shape {_shape_text(shape)} holds {size}, "
            "beyond the supported 2**62 bytes per graph"
        )
    return nbytes


class _TensorTypes:
    """Shape, element size and bytes of every tensor that shape inference (or the file) describes.

    Every shape is checked as it is recorded (`_checked_bytes`), so sizes, FLOPs and edge bytes
    computed from them stay within int64 and float64.
    """

    def __init__(self, g, onnx, source: str):
        self.source = source
        self.shapes: dict[str, list[int] | None] = {}
        self.bits: dict[str, int] = {}
        for info in [*g.input, *g.value_info, *g.output]:
            self._add(info.name, info.type, onnx)
        for t in g.initializer:
            self.bits[t.name] = _element_bits(t.data_type, onnx)
            self.shapes[t.name] = list(t.dims)
            _checked_bytes("initializer", t.name, self.shapes[t.name], self.bits[t.name], source)

    def _add(self, name: str, type_proto, onnx) -> None:
        if not type_proto.HasField("tensor_type"):
            return
        tt = type_proto.tensor_type
        self.bits[name] = _element_bits(tt.elem_type, onnx)
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            self.shapes[name] = None  # symbolic or unknown dimensions: size unknown
            return
        self.shapes[name] = [d.dim_value for d in tt.shape.dim]
        _checked_bytes("tensor", name, self.shapes[name], self.bits[name], self.source)

    def set_bytes(self, name: str, nbytes: int | None) -> None:
        """Bytes of a value that is not one tensor (a sequence of tensors)."""
        if nbytes is not None:
            self.shapes[name], self.bits[name] = [nbytes], 8

    def shape_of(self, name: str) -> list[int] | None:
        return self.shapes.get(name)

    def numel(self, name: str) -> int | None:
        shape = self.shapes.get(name)
        return None if shape is None else math.prod(shape)

    def bytes_of(self, name: str) -> int | None:
        n, bits = self.numel(name), self.bits.get(name)
        return None if n is None or not bits else (n * bits + 7) // 8

    def unknown_count(self, outputs: list[list[str]]) -> int:
        return sum(self.bytes_of(x) is None for outs in outputs for x in outs)


def _element_bits(elem_type: int, onnx) -> int:
    """Bits of one element (packed sub-byte types: 4 or 2); 0 when unknown (strings, undefined)."""
    name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else ""
    if name in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[name]
    try:
        return 8 * int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # strings, undefined, types numpy does not know: size unknown
        return 0


def _initializer_bytes(t, onnx, source: str) -> int:
    return _checked_bytes("initializer", t.name, list(t.dims), _element_bits(t.data_type, onnx), source) or 0


def _constant_bytes(node, onnx, source: str) -> int:
    for attr in node.attribute:
        if attr.name == "value" and attr.HasField("t"):
            t = attr.t
            name = node.name or (node.output[0] if node.output else "Constant")
            return _checked_bytes("constant", name, list(t.dims), _element_bits(t.data_type, onnx), source) or 0
    return 0


# ---------------------------------------------------------------------- FLOPs


def _attr(node, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            if a.ints:
                return list(a.ints)
            if a.type == a.INT:
                return a.i
            if a.type == a.FLOAT:
                return a.f
            if a.type == a.STRING:
                return a.s.decode("utf-8", "replace")
    return default


def _flops_of(node, name: str, tensors: _TensorTypes, source: str) -> float | None:
    """`_flops`, with shapes that do not fit the operator (a rank-1 Gemm, a scalar MatMul) read as
    unknown FLOPs (listed in ``meta["flops_unknown_ops"]``) and a count beyond float64 refused."""
    try:
        value = _flops(node, tensors)
    except (IndexError, ValueError, TypeError):
        return None
    except OverflowError:
        value = math.inf
    if value is not None and not math.isfinite(value):
        raise FormatError(f"{source}: node {name!r} ({node.op_type}) has more FLOPs than a float64 holds")
    return value


def _flops(node, tensors: _TensorTypes) -> float | None:
    """FLOPs of one operator from its input and output shapes; None when they are unknown."""
    op = node.op_type
    ins = [tensors.shape_of(x) if x else None for x in node.input]
    out = tensors.shape_of(node.output[0]) if node.output and node.output[0] else None
    out_numel = None if out is None else math.prod(out)
    if op in ("Conv", "ConvTranspose"):
        x, w = ins[0], ins[1] if len(ins) > 1 else None
        if x is None or w is None or out is None:
            return None
        if op == "Conv":  # w: (C_out, C_in / group, *kernel); every output element is C_in/group * kernel MACs
            return 2.0 * math.prod(out) * math.prod(w[1:])
        # w: (C_in, C_out / group, *kernel); every input element is scattered to C_out/group * kernel outputs
        return 2.0 * math.prod(x) * math.prod(w[1:])
    if op == "Gemm":
        a, b = ins[0], ins[1]
        if a is None or b is None:
            return None
        m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
        n = b[0] if _attr(node, "transB", 0) else b[1]
        return 2.0 * m * n * k
    if op in ("MatMul", "MatMulInteger", "FusedMatMul"):
        a, b = ins[0], ins[1]
        if a is None or b is None or out is None:
            return None
        return 2.0 * math.prod(out) * a[-1]  # every output element sums K products
    if op in ("Attention", "MultiHeadAttention"):
        return _attention_flops(node, ins)
    if op in _POOLS:
        kernel = _attr(node, "kernel_shape")
        return None if out_numel is None or not kernel else float(out_numel * math.prod(kernel))
    if op in _REDUCTIONS:
        return None if ins[0] is None else float(math.prod(ins[0]))
    if op in _PER_ELEMENT:
        return None if out_numel is None else float(_PER_ELEMENT[op] * out_numel)
    if op in _ELEMENTWISE:
        return None if out_numel is None else float(out_numel)
    return 0.0 if _kind(node) in TRIVIAL_OPS | ONNX_FREE_OPS | _DATA_MOVEMENT else None


#: Ops that only move or select data: no FLOPs, as torch's counter has none for them.
_DATA_MOVEMENT = frozenset(
    {"concat", "gather", "gather_elements", "gather_n_d", "scatter_elements", "scatter_n_d", "pad", "tile",
     "depth_to_space", "space_to_depth", "top_k", "arg_max", "arg_min", "non_zero", "one_hot", "resize",
     "sequence_construct", "sequence_insert", "concat_from_sequence"}
)


def _attention_flops(node, ins: list[list[int] | None]) -> float | None:
    """ONNX's Attention (opset 23): Q K^T and the weighted sum of V, 2 FLOPs per multiply-add each."""
    q, k, v = (ins + [None, None, None])[:3]
    if q is None or k is None or v is None:
        return None
    if len(q) == 4:  # (batch, heads, sequence, head size)
        b, h, s_q, e = q
        s_kv, e_v = k[2], v[3]
        return 2.0 * b * h * s_q * s_kv * (e + e_v)
    # 3-D (batch, sequence, hidden): the head count splits hidden sizes but not the products' number
    b, s_q, hidden = q
    s_kv, hidden_v = k[1], v[2]
    return 2.0 * b * s_q * s_kv * (hidden + hidden_v)
