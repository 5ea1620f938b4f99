"""Small TFLite flatbuffers built from Python: single-op pooling and MEAN models, several of them
side by side in one model (also chains of two: a pool feeding a MEAN, ...), and a small int8 CNN
(conv, pools, fused ReLU6).

Built with the ``tflite`` package's generated builder functions and ``flatbuffers``; nothing is
downloaded and TensorFlow is not needed. The bytes load in LiteRT
(``ai_edge_litert.interpreter.Interpreter(model_content=...)``) and in
:func:`tvm_pool.from_tflite` (through :func:`load_model`). The tests and the benchmark build
their LiteRT peers here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import flatbuffers
import numpy as np
import tflite

from . import formulas

# TFLite's TensorType values by numpy dtype name.
TENSOR_TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "int16": 7, "int8": 9}
ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGN_BIT": 5}
PADDINGS = {"SAME": 0, "VALID": 1}
POOL_OPS = {"MAX_POOL_2D": 17, "AVERAGE_POOL_2D": 1, "L2_POOL_2D": 12}
_CONV_2D = 3
_MEAN = 40
_POOL2D_OPTIONS = 5
_CONV2D_OPTIONS = 1
_REDUCER_OPTIONS = 27
# Builtin operator versions by input type (TFLite's op_version.cc): float/uint8 1, int8 2, int16 3
# (MAX_POOL_2D, AVERAGE_POOL_2D, L2_POOL_2D and MEAN alike).
_POOL_VERSION = {"float32": 1, "uint8": 1, "int8": 2, "int16": 3}


@dataclass(frozen=True)
class Quant:
    """Per-tensor (float ``scale``, int ``zero_point``) or per-axis (sequences) quantization."""

    scale: float | Sequence[float]
    zero_point: int | Sequence[int] = 0
    axis: int = 0


@dataclass
class _Tensor:
    name: str
    shape: tuple
    dtype: str
    quant: Quant | None
    buffer: int


@dataclass
class _Operator:
    opcode: int
    inputs: list
    outputs: list
    options_type: int  # 0: no builtin options
    options: Callable | None  # builder -> offset of the options table


@dataclass
class ModelBuilder:
    """Collects tensors, constant buffers and operators of one subgraph; :meth:`finish` writes
    the flatbuffer (schema version 3, buffer 0 the empty sentinel)."""

    tensors: list = field(default_factory=list)
    buffers: list = field(default_factory=lambda: [b""])
    opcodes: list = field(default_factory=list)  # (builtin code, version)
    operators: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    def tensor(self, name: str, shape, dtype: str, quant: Quant | None = None, data=None) -> int:
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data, dtype=dtype).tobytes())
            buffer = len(self.buffers) - 1
        self.tensors.append(_Tensor(name, tuple(int(d) for d in shape), dtype, quant, buffer))
        return len(self.tensors) - 1

    def input(self, name: str, shape, dtype: str, quant: Quant | None = None) -> int:
        index = self.tensor(name, shape, dtype, quant)
        self.inputs.append(index)
        return index

    def operator(self, code: int, version: int, inputs, outputs, options_type: int = 0, options: Callable | None = None):
        if (code, version) not in self.opcodes:
            self.opcodes.append((code, version))
        self.operators.append(_Operator(self.opcodes.index((code, version)), list(inputs), list(outputs),
                                        options_type, options))

    def finish(self) -> bytes:
        b = flatbuffers.Builder(1024)
        subgraph = _subgraph(b, self)
        buffers = [_buffer(b, data) for data in self.buffers]
        codes = [_opcode(b, code, version) for code, version in self.opcodes]
        description = b.CreateString("tvm_pool.tflite.models")
        subgraphs = _vector(b, tflite.ModelStartSubgraphsVector, [subgraph])
        buffer_vec = _vector(b, tflite.ModelStartBuffersVector, buffers)
        code_vec = _vector(b, tflite.ModelStartOperatorCodesVector, codes)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, code_vec)
        tflite.ModelAddSubgraphs(b, subgraphs)
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, buffer_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def _vector(b, start, offsets) -> int:
    start(b, len(offsets))
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def _ints(b, values, prepend="PrependInt32", size=4) -> int:
    b.StartVector(size, len(values), size)
    for v in reversed(values):
        getattr(b, prepend)(int(v))
    return b.EndVector()


def _buffer(b, data: bytes) -> int:
    vec = b.CreateNumpyVector(np.frombuffer(data, dtype=np.uint8)) if data else None
    tflite.BufferStart(b)
    if vec is not None:
        tflite.BufferAddData(b, vec)
    return tflite.BufferEnd(b)


def _opcode(b, code: int, version: int) -> int:
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
    tflite.OperatorCodeAddBuiltinCode(b, code)
    tflite.OperatorCodeAddVersion(b, version)
    return tflite.OperatorCodeEnd(b)


def _quantization(b, quant: Quant) -> int:
    scales = np.atleast_1d(np.asarray(quant.scale, dtype=np.float32))
    zeros = np.atleast_1d(np.asarray(quant.zero_point, dtype=np.int64))
    scale_vec = b.CreateNumpyVector(scales)
    zero_vec = b.CreateNumpyVector(zeros)
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, scale_vec)
    tflite.QuantizationParametersAddZeroPoint(b, zero_vec)
    tflite.QuantizationParametersAddQuantizedDimension(b, quant.axis)
    return tflite.QuantizationParametersEnd(b)


def _tensor(b, t: _Tensor) -> int:
    name = b.CreateString(t.name)
    shape = _ints(b, t.shape)
    quant = _quantization(b, t.quant) if t.quant is not None else None
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, TENSOR_TYPES[t.dtype])
    tflite.TensorAddBuffer(b, t.buffer)
    tflite.TensorAddName(b, name)
    if quant is not None:
        tflite.TensorAddQuantization(b, quant)
    return tflite.TensorEnd(b)


def _operator(b, op: _Operator) -> int:
    options = op.options(b) if op.options is not None else None
    inputs, outputs = _ints(b, op.inputs), _ints(b, op.outputs)
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, op.opcode)
    tflite.OperatorAddInputs(b, inputs)
    tflite.OperatorAddOutputs(b, outputs)
    if options is not None:
        tflite.OperatorAddBuiltinOptionsType(b, op.options_type)
        tflite.OperatorAddBuiltinOptions(b, options)
    return tflite.OperatorEnd(b)


def _subgraph(b, m: ModelBuilder) -> int:
    tensors = _vector(b, tflite.SubGraphStartTensorsVector, [_tensor(b, t) for t in m.tensors])
    operators = _vector(b, tflite.SubGraphStartOperatorsVector, [_operator(b, op) for op in m.operators])
    inputs, outputs = _ints(b, m.inputs), _ints(b, m.outputs)
    name = b.CreateString("main")
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors)
    tflite.SubGraphAddInputs(b, inputs)
    tflite.SubGraphAddOutputs(b, outputs)
    tflite.SubGraphAddOperators(b, operators)
    tflite.SubGraphAddName(b, name)
    return tflite.SubGraphEnd(b)


# ---------------------------------------------------------------------------------------------
# Operators
# ---------------------------------------------------------------------------------------------


def pool_options(filter_hw, stride_hw, padding: str, activation: str):
    def write(b):
        tflite.Pool2DOptionsStart(b)
        tflite.Pool2DOptionsAddPadding(b, PADDINGS[padding])
        tflite.Pool2DOptionsAddStrideW(b, stride_hw[1])
        tflite.Pool2DOptionsAddStrideH(b, stride_hw[0])
        tflite.Pool2DOptionsAddFilterWidth(b, filter_hw[1])
        tflite.Pool2DOptionsAddFilterHeight(b, filter_hw[0])
        tflite.Pool2DOptionsAddFusedActivationFunction(b, ACTIVATIONS[activation])
        return tflite.Pool2DOptionsEnd(b)

    return write


def conv_options(stride_hw, padding: str, activation: str):
    def write(b):
        tflite.Conv2DOptionsStart(b)
        tflite.Conv2DOptionsAddPadding(b, PADDINGS[padding])
        tflite.Conv2DOptionsAddStrideW(b, stride_hw[1])
        tflite.Conv2DOptionsAddStrideH(b, stride_hw[0])
        tflite.Conv2DOptionsAddFusedActivationFunction(b, ACTIVATIONS[activation])
        tflite.Conv2DOptionsAddDilationWFactor(b, 1)
        tflite.Conv2DOptionsAddDilationHFactor(b, 1)
        return tflite.Conv2DOptionsEnd(b)

    return write


def pool_output_shape(input_shape, filter_hw, stride_hw, padding: str) -> tuple:
    """The NHWC output shape TFLite gives a pool (:func:`~tvm_pool.tflite.formulas.output_size`)."""
    n, h, w, c = input_shape
    size = [formulas.output_size(padding, *args) for args in zip((h, w), filter_hw, stride_hw)]
    return n, *size, c


@dataclass(frozen=True)
class PoolCase:
    """One TFLite pool: ``op`` in :data:`POOL_OPS`, NHWC ``input_shape``, ``dtype`` float32,
    int8, uint8 or int16, and for the integer types the input and output quantization."""

    op: str
    input_shape: tuple
    filter_hw: tuple
    stride_hw: tuple
    padding: str = "VALID"
    activation: str = "NONE"
    dtype: str = "float32"
    in_quant: Quant | None = None
    out_quant: Quant | None = None

    @property
    def output_shape(self) -> tuple:
        return pool_output_shape(self.input_shape, self.filter_hw, self.stride_hw, self.padding)


def add_pool(m: ModelBuilder, case: PoolCase, source: int, name: str) -> int:
    """Append ``case``'s pool reading tensor ``source``; returns its output tensor."""
    out = m.tensor(name, case.output_shape, case.dtype, case.out_quant)
    version = _POOL_VERSION.get(case.dtype, 1)
    m.operator(POOL_OPS[case.op], version, [source], [out], _POOL2D_OPTIONS,
               pool_options(case.filter_hw, case.stride_hw, case.padding, case.activation))
    return out


def reducer_options(keep_dims: bool):
    def write(b):
        tflite.ReducerOptionsStart(b)
        tflite.ReducerOptionsAddKeepDims(b, bool(keep_dims))
        return tflite.ReducerOptionsEnd(b)

    return write


@dataclass(frozen=True)
class MeanCase:
    """One TFLite MEAN of a ``dtype`` tensor over ``axes`` (a constant int32 tensor), keeping
    the reduced axes as 1 or dropping them; for the integer types the input and output
    quantization. ``op`` is ``"MEAN"`` so that cases of both kinds read alike."""

    input_shape: tuple
    axes: tuple = (1, 2)
    keep_dims: bool = True
    dtype: str = "float32"
    in_quant: Quant | None = None
    out_quant: Quant | None = None
    op: str = field(default="MEAN", init=False)

    @property
    def output_shape(self) -> tuple:
        rank = len(self.input_shape)
        axes = {a % rank for a in self.axes}
        if self.keep_dims:
            return tuple(1 if i in axes else d for i, d in enumerate(self.input_shape))
        return tuple(d for i, d in enumerate(self.input_shape) if i not in axes)


def add_mean(m: ModelBuilder, case: MeanCase, source: int, name: str) -> int:
    """Append ``case``'s MEAN reading tensor ``source``; returns its output tensor."""
    axes = m.tensor(f"{name}_axes", (len(case.axes),), "int32", data=np.array(case.axes, np.int32))
    out = m.tensor(name, case.output_shape, case.dtype, case.out_quant)
    m.operator(_MEAN, _POOL_VERSION.get(case.dtype, 1), [source, axes], [out], _REDUCER_OPTIONS,
               reducer_options(case.keep_dims))
    return out


def add_op(m: ModelBuilder, case, source: int, name: str) -> int:
    """Append ``case`` (a :class:`PoolCase` or a :class:`MeanCase`); returns its output tensor."""
    return add_mean(m, case, source, name) if isinstance(case, MeanCase) else add_pool(m, case, source, name)


def add_chain(m: ModelBuilder, chain, source: int, name: str) -> int:
    """Append the cases of ``chain`` one after the other, each reading the previous one's output
    (which must have the next one's input shape, type and quantization); the last output is
    ``name``, the others ``name_0``, ``name_1``, ..."""
    chain = list(chain)
    for i, case in enumerate(chain):
        if i:
            prev = chain[i - 1]
            if (case.input_shape, case.dtype, case.in_quant) != (prev.output_shape, prev.dtype, prev.out_quant):
                raise ValueError(f"{case} does not read what {prev} writes")
        source = add_op(m, case, source, name if i == len(chain) - 1 else f"{name}_{i}")
    return source


def pool_model(*cases) -> bytes:
    """One operator per case (a :class:`PoolCase`, a :class:`MeanCase`, or a sequence of them
    to chain, :func:`add_chain`), each with its own input (``x0``, ``x1``, ...) and output
    (``y0``, ...)."""
    m = ModelBuilder()
    for i, case in enumerate(cases):
        chain = case if isinstance(case, (list, tuple)) else [case]
        source = m.input(f"x{i}", chain[0].input_shape, chain[0].dtype, chain[0].in_quant)
        m.outputs.append(add_chain(m, chain, source, f"y{i}"))
    return m.finish()


@dataclass(frozen=True)
class CnnModel:
    """A CNN built by :func:`build_cnn`: its flatbuffer, and each pool by output tensor name
    with the name of the tensor it reads (to check the pools alone on LiteRT's intermediates)."""

    content: bytes
    pools: dict  # output name -> (PoolCase, input tensor name)


def build_cnn(seed: int = 0, input_shape=(2, 17, 15, 3), dtype: str = "int8", exact: bool = False) -> CnnModel:
    """A small quantized CNN (int8 or uint8): conv 3x3 with fused ReLU6, MAX_POOL_2D 3x3 s2 SAME,
    conv 1x1 with fused RELU, then two outputs: AVERAGE_POOL_2D 3x3 s2 SAME with fused ReLU6 of
    the second conv, and MAX_POOL_2D 2x2 s3 VALID (stride > filter) of the first pool.

    Convs have int8 weights per channel (uint8: per tensor, zero point 128) and int32 biases.
    ``exact``: power-of-two scales with ``input scale * weight scale == output scale`` and weights
    in {-1, 0, 1} (offsets from the zero point), so each conv is exact integer arithmetic in every
    implementation (LiteRT's fixed-point and fp32 requantizations, TVM's dequantize-conv-quantize):
    the model then isolates the pools. Otherwise scales are seeded at random, and requantization
    rounds differently in each (docs/conformance.md, T8)."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    low = -128 if dtype == "int8" else 0
    in_quant = Quant(2.0**-5 if exact else float(rng.uniform(0.01, 0.05)), int(rng.integers(low + 20, low + 120)))
    x = m.input("image", input_shape, dtype, in_quant)
    y = _conv(m, rng, x, input_shape, 8, 3, "conv1", "RELU6", dtype, exact)
    shape = m.tensors[y].shape
    yq = m.tensors[y].quant
    pool1 = PoolCase("MAX_POOL_2D", shape, (3, 3), (2, 2), "SAME", "NONE", dtype, yq, yq)
    p = add_pool(m, pool1, y, "pool1")
    z = _conv(m, rng, p, pool1.output_shape, 12, 1, "conv2", "RELU", dtype, exact)
    zq = m.tensors[z].quant
    pool2 = PoolCase("AVERAGE_POOL_2D", m.tensors[z].shape, (3, 3), (2, 2), "SAME", "RELU6", dtype, zq, zq)
    pool3 = PoolCase("MAX_POOL_2D", pool1.output_shape, (2, 2), (3, 3), "VALID", "NONE", dtype, yq, yq)
    m.outputs += [add_pool(m, pool2, z, "avg_relu6"), add_pool(m, pool3, p, "max_strided")]
    pools = {"pool1": (pool1, "conv1"), "avg_relu6": (pool2, "conv2"), "max_strided": (pool3, "pool1")}
    return CnnModel(m.finish(), pools)


def int8_cnn(seed: int = 0, input_shape=(2, 17, 15, 3), dtype: str = "int8", exact: bool = False) -> bytes:
    """The flatbuffer of :func:`build_cnn`."""
    return build_cnn(seed, input_shape, dtype, exact).content


def conv_model(seed: int = 0, input_shape=(2, 20, 20, 16), channels: int = 16, kernel: int = 3,
               dtype: str = "int8", exact: bool = False) -> bytes:
    """One quantized CONV_2D (as in :func:`build_cnn`, no activation): input ``x``, output ``conv``."""
    rng = np.random.default_rng(seed)
    m = ModelBuilder()
    low = -128 if dtype == "int8" else 0
    in_quant = Quant(2.0**-5 if exact else float(rng.uniform(0.01, 0.05)), int(rng.integers(low + 20, low + 120)))
    x = m.input("x", input_shape, dtype, in_quant)
    m.outputs.append(_conv(m, rng, x, input_shape, channels, kernel, "conv", "NONE", dtype, exact))
    return m.finish()


def _conv_weights(rng, shape, dtype, exact):
    """(weights, per-channel weight scales, zero point) for an OHWI conv filter."""
    channels = shape[0]
    zero = 0 if dtype == "int8" else 128
    if exact:  # a few taps of +-1 per output channel, the rest 0
        offsets = np.zeros(shape, dtype=np.int64).reshape(channels, -1)
        for row in offsets:
            taps = rng.choice(row.size, size=min(3, row.size), replace=False)
            row[taps] = rng.choice([-1, 1], size=taps.size)
        return (offsets.reshape(shape) + zero).astype(dtype), np.full(channels, 2.0**-3), zero
    scales = rng.uniform(0.002, 0.01, channels) if dtype == "int8" else np.full(channels, rng.uniform(0.002, 0.01))
    low, high = (-127, 128) if dtype == "int8" else (0, 256)
    return rng.integers(low, high, shape).astype(dtype), scales, zero


def _conv(m, rng, source, in_shape, channels, k, name, activation, dtype, exact):
    """CONV_2D k x k stride 1 SAME, with an int32 bias; the output's scale spreads the
    accumulator over about +-50 steps (exact: ``input scale * weight scale``)."""
    cin = in_shape[3]
    in_scale = float(m.tensors[source].quant.scale)
    weights, w_scale, w_zero = _conv_weights(rng, (channels, k, k, cin), dtype, exact)
    w_scale = w_scale.astype(np.float32)
    per_channel = dtype == "int8"
    w_quant = Quant([float(s) for s in w_scale], [0] * channels) if per_channel else Quant(float(w_scale[0]), w_zero)
    bias_scale = (np.float32(in_scale) * w_scale).astype(np.float32)
    b_quant = Quant([float(s) for s in bias_scale], [0] * channels) if per_channel else Quant(float(bias_scale[0]), 0)
    bias = rng.integers(-64 if exact else -2000, 64 if exact else 2000, channels).astype(np.int32)
    out_scale = float(bias_scale[0]) if exact else in_scale * float(w_scale.mean()) * 5400 * np.sqrt(k * k * cin) / 50
    low = -128 if dtype == "int8" else 0
    out_quant = Quant(out_scale, int(rng.integers(low + 20, low + 120)))
    w = m.tensor(f"{name}_weights", weights.shape, dtype, w_quant, weights)
    bias_t = m.tensor(f"{name}_bias", (channels,), "int32", b_quant, bias)
    out = m.tensor(name, (*in_shape[:3], channels), dtype, out_quant)
    m.operator(_CONV_2D, 3 if per_channel else 1, [source, w, bias_t], [out], _CONV2D_OPTIONS,
               conv_options((1, 1), "SAME", activation))
    return out


def load_model(content: bytes):
    """``tflite.Model`` of flatbuffer bytes, the object :func:`tvm_pool.from_tflite` takes."""
    return tflite.Model.GetRootAsModel(content, 0)
