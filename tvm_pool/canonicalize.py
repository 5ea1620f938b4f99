"""One graph for every road: the rewrites that make a model's Relax module from ``torch.export`` or
either ONNX exporter give the same kernels, so a tuning record made on one road serves the
others. Both run first in ``lowering.fusion_passes`` (compile, tune and the coverage check).

Inference batch norms folded into the convolution before them (:func:`fold_batch_norm`):

A TorchScript ONNX export folds each eval-mode BatchNorm that follows a Conv into the Conv's
weights and bias; ``torch.export`` and the dynamo ONNX exporter keep it as an operator. Relax
then legalizes it to a per-element ``(x - mean) / sqrt(var + eps) * gamma + beta`` that fuses
into the convolution's kernel, so the same network gives other kernels on those roads: other
tuning tasks, which the logs tuned on the TorchScript export do not cover (torchvision's
ResNet-50 through torch.export: 31 of 40 kernels without a record, 60% of its FLOPs; folded,
2 of 26 and 0.05%), and more work per output.

:func:`fold_batch_norm` rewrites ``conv2d(x, W)`` (plus a bias ``b``) followed by an inference
batch norm over its channels into ``conv2d(x, W * s) + (beta + (b - mean) * s)`` with
``s = gamma / sqrt(var + eps)``, the TorchScript exporter's fold (:func:`fold_constants` computes the new constants).
TVM's ``FoldBatchnormToConv2D`` does the same without looking at ``training``, ``center``,
``scale``, the axis or the data layout; this one folds only what it computes exactly as the
batch norm does (to float32 rounding: the product is rounded once more, as ONNX Runtime's and
OpenVINO's own folds do) and leaves every other batch norm to Relax's legalization.

Constant operands of an add moved second (:func:`constants_last`): ``torch.export`` writes a
linear layer as ``addmm(bias, x, W^T)``, which TVM imports as ``add(bias, matmul)``, where the
ONNX exporters' Gemm gives ``add(matmul, bias)``; IEEE addition is commutative, so the swap
changes no bit, and the classifier's kernel is the same on both roads.

Constant expressions computed once, in NumPy (:func:`fold_constants`): the folded batch norms'
weights (``W * s``) and, with channel-last convolutions (``lowering.CONV_LAYOUTS``), every
weight's and bias's transpose. Relax's ``FoldConstant`` builds and runs a kernel for each of
them (ResNet-50 in NHWC: 113 builds, most of its fusion time); NumPy's float32 arithmetic rounds
each operation as that kernel does (IEEE add, multiply, divide and square root), and transposes
and reshapes move bits, so the constants are the same.

Clips as Relax's maximum and minimum (:func:`lift_clips`): a ReLU6 or a hard swish is
``relax.clip`` on the ``torch.export`` road, and TVM's ONNX Clip converter writes it as a
``call_tir`` of TOPI's maximum and minimum kernels. Relax's ``ConvertLayout`` knows neither, so
with channel-last convolutions (``lowering.CONV_LAYOUTS``) each clip was wrapped in two
transposes back to NCHW and fused with them instead of into its convolution (MobileNetV2, Intel
Emerald Rapids, 2 threads: three such kernels took 2.4 ms of 10.4). Both become the Relax ops
``minimum(maximum(x, lo), hi)``, which Relax legalizes to the same TOPI kernels as the ONNX
converter's, so the two roads give the same kernels too. ``relax.clip`` is TOPI's ``max(min(x,
hi), lo)``: the same value for every input but NaN, which TVM's max and min drop (a NaN input
now gives ``lo`` instead of ``hi``; PyTorch and onnxruntime give NaN: docs/conformance.md). The
ONNX converter's NaN-safe bounds of constants are folded to the constants, as torch.export's
are. ``lowering`` runs it only before a channel-last ``ConvertLayout``: NCHW graphs keep the
kernels the shipped NCHW records were tuned on.

Inference dropouts dropped (:func:`drop_dropout`): ``torch.export`` keeps an eval-mode
``nn.Dropout`` as ``relax.nn.dropout``, a no-op at inference (TVM legalizes it to a copy and
an all-ones mask), where the ONNX exporters drop it. Its first output is replaced by its input,
so the model is the ONNX export's graph, and Relax's ``ConvertLayout`` (which fails on the
dropout's tuple) can give its convolutions the channel-last layout.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard
from tvm.relax.expr_functor import PyExprMutator, mutator

__all__ = ["constants_last", "drop_dropout", "fold_batch_norm", "fold_constants", "lift_clips"]


def _pattern():
    """The patterns: conv2d with constant weights, optionally plus a constant per-channel bias
    (``torch.export`` writes a conv's bias as an add of its reshaped bias), then batch_norm
    over constants, its first output."""
    data, weight = wildcard(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    bias = is_const() | is_op("relax.reshape")(is_const(), wildcard())
    biased = is_op("relax.add")(conv, bias)
    params = [is_const() for _ in range(4)]  # gamma, beta, mean, var
    bn = is_op("relax.nn.batch_norm")(conv | biased, *params)
    return TupleGetItemPattern(bn, 0), {"data": data, "weight": weight, "conv": conv, "bias": bias,
                                         "biased": biased, "bn": bn, "params": params}


def _foldable(conv, bn, bias) -> bool:
    """Does the fold compute what the batch norm does: inference statistics, gamma and beta
    applied, over the channel axis of an NCHW float32 convolution with OIHW weights (and a
    bias of one value per channel)?"""
    c, b = conv.attrs, bn.attrs
    if (str(c.data_layout), str(c.kernel_layout), str(c.out_layout)) != ("NCHW", "OIHW", "NCHW"):
        return False
    if bool(b.training) or not (bool(b.center) and bool(b.scale)) or int(b.axis) != 1:
        return False
    channels = int(bn.args[1].ty.shape[0])
    if bias is not None and [int(d) for d in bias.ty.shape] not in ([channels], [1, channels, 1, 1]):
        return False
    operands = [conv, *bn.args[1:], *([bias] if bias is not None else [])]
    return all(str(a.ty.dtype) == "float32" for a in operands)


def _rewriter(p):
    def rewrite(expr, matches):
        conv, bn = matches[p["conv"]], matches[p["bn"]]
        bias = matches[p["bias"]] if p["biased"] in matches else None
        if not _foldable(conv, bn, bias):
            return expr
        gamma, beta, mean, var = (matches[q] for q in p["params"])
        channels = int(gamma.ty.shape[0])
        op = relax.op
        # a scalar tensor, not a PrimValue: Relax's ConvertLayout (lowering.CONV_LAYOUTS) crashes
        # on a binary op with a PrimValue operand
        eps = relax.const(float(bn.attrs.epsilon), str(var.ty.dtype))
        scale = op.divide(gamma, op.sqrt(op.add(var, eps)))
        if bias is None:
            shift = op.subtract(beta, op.multiply(mean, scale))
        else:
            shift = op.add(beta, op.multiply(op.subtract(op.reshape(bias, (channels,)), mean), scale))
        weight = op.multiply(matches[p["weight"]], op.reshape(scale, (channels, 1, 1, 1)))
        folded = relax.Call(conv.op, (matches[p["data"]], weight), conv.attrs)
        return op.add(folded, op.reshape(shift, (1, channels, 1, 1)))

    return rewrite


def _is_primitive(func) -> bool:
    """A fused function (FuseOps' ``Primitive``): left as it is."""
    return func.attrs is not None and bool(func.attrs.get("Primitive", 0))


@relax.transform.function_pass(opt_level=0, name="tvm_pool.fold_batch_norm")
class _FoldBatchNorm:  # pylint: disable=too-few-public-methods
    def transform_function(self, func, _mod, _ctx):
        if _is_primitive(func):
            return func
        pattern, parts = _pattern()
        return rewrite_call(pattern, _rewriter(parts), func)


def fold_batch_norm() -> tvm.transform.Pass:
    """The pass that folds every foldable inference batch norm after a conv2d into it (see the
    module docstring), in every Relax function of a module."""
    return _FoldBatchNorm()


@relax.transform.function_pass(opt_level=0, name="tvm_pool.constants_last")
class _ConstantsLast:  # pylint: disable=too-few-public-methods
    def transform_function(self, func, _mod, _ctx):
        if _is_primitive(func):
            return func
        const, other = is_const(), wildcard()
        pattern = is_op("relax.add")(const, other)

        def rewrite(expr, matches):
            if isinstance(matches[other], tvm.ir.expr.Constant):
                return expr
            return relax.op.add(matches[other], matches[const])

        return rewrite_call(pattern, rewrite, func)


def constants_last() -> tvm.transform.Pass:
    """The pass that swaps ``add(constant, x)`` into ``add(x, constant)`` (see the module
    docstring) in every Relax function of a module."""
    return _ConstantsLast()


# Float32 arithmetic on constants computed in NumPy (rounded once per operation as TVM's kernel
# rounds it); the layout ops (:func:`_layout`) are folded for every dtype.
_FLOAT32_OPS = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
                "relax.divide": np.divide, "relax.sqrt": np.sqrt}


def _layout(call, const):
    """``call``, a permute_dims or a reshape to integer sizes, applied to the Constant ``const``:
    a NumPy array; None for another call (a reshape to symbolic sizes among them)."""
    name = call.op.name
    if name == "relax.permute_dims":
        axes = None if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
        return np.transpose(const.value.numpy(), axes)
    shape = call.args[1] if name == "relax.reshape" else None
    if isinstance(shape, relax.ShapeExpr) and all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return np.reshape(const.value.numpy(), [int(d) for d in shape.values])
    return None


@mutator
class _ConstantFolder(PyExprMutator):
    def _constant(self, expr):
        """``expr`` as a Constant when it is one or a variable bound to one, else None."""
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return expr if isinstance(expr, tvm.ir.expr.GenericConst) else None

    def visit_call_(self, op):  # pylint: disable=arguments-renamed
        call = self.visit_expr_post_order(op)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        if call.op.name in _FLOAT32_OPS:
            values = [self._constant(a) for a in call.args]
            if all(v is not None and str(v.ty.dtype) == "float32" for v in values):
                with np.errstate(all="ignore"):  # inf and NaN as TVM's kernel gives them
                    folded = _FLOAT32_OPS[call.op.name](*(v.value.numpy() for v in values))
                return relax.const(np.asarray(folded, "float32"), "float32")
            return call
        data = self._constant(call.args[0]) if call.args else None
        folded = None if data is None else _layout(call, data)
        return call if folded is None else relax.const(folded, str(data.ty.dtype))


def mutator_pass(name: str, mutator_class) -> tvm.transform.Pass:
    """A module pass running ``mutator_class`` (a ``PyExprMutator`` made with the module) over
    every Relax function that is not a fused one, then dropping the bindings it left unused. The
    PrimFuncs the mutator adds through its builder (``call_te``: ``channel_last``'s pools) join
    the module."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod, _ctx):
        mutator = mutator_class(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function) and not _is_primitive(func):
                mutator.builder_.update_func(gv, relax.analysis.remove_all_unused(mutator.visit_expr(func)))
        return mutator.builder_.get()

    return _pass


def fold_constants() -> tvm.transform.Pass:
    """The pass that computes layout ops on constants and float32 arithmetic on constants in
    NumPy (see the module docstring), in every Relax function of a module."""
    return mutator_pass("tvm_pool.fold_constants", _ConstantFolder)


@mutator
class _DropoutRemover(PyExprMutator):
    def visit_tuple_getitem_(self, op):  # pylint: disable=arguments-renamed
        item = self.visit_expr_post_order(op)
        value = item.tuple_value
        if isinstance(value, relax.Var):
            value = self.lookup_binding(value)
        if item.index == 0 and isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.nn.dropout")):
            return value.args[0]
        return item


def drop_dropout() -> tvm.transform.Pass:
    """The pass that replaces each inference dropout's output by its input (see the module
    docstring); a dropout whose mask is used stays."""
    return mutator_pass("tvm_pool.drop_dropout", _DropoutRemover)


# TOPI's elementwise kernels TVM's ONNX Clip converter emits (te.create_prim_func names the block
# after the compute: T_maximum, T_minimum) and the Relax op each legalizes from
_CLIP_KERNELS = {"T_maximum": (tvm.tirx.Max, relax.op.maximum), "T_minimum": (tvm.tirx.Min, relax.op.minimum)}


def _clip_kernel(func):
    """The Relax op a ``call_tir`` of ``func`` is, when ``func`` is TOPI's maximum or minimum of
    its two inputs (in that order), else None."""
    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) != 3:
        return None
    blocks = []
    tvm_ffi.structural_walk(func.body, [(tvm.s_tir.SBlock, blocks.append)], order="post")
    blocks = [b for b in blocks if b.name_hint != "root"]
    if len(blocks) != 1 or blocks[0].name_hint not in _CLIP_KERNELS:
        return None
    node, op = _CLIP_KERNELS[blocks[0].name_hint]
    value = getattr(blocks[0].body, "value", None)
    if not isinstance(value, node):
        return None
    loaded = [getattr(v, "source", None) for v in (value.a, value.b)]  # a load's tensor (a param)
    if not all(t is not None and t.same_as(p) for t, p in zip(loaded, func.params[:2])):
        return None
    return op


@mutator
class _ClipLifter(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, op):  # pylint: disable=arguments-renamed
        call = self.visit_expr_post_order(op)
        if call.op.same_as(tvm.ir.Op.get("relax.clip")):
            return _clip_as_ops(call)
        if not call.op.same_as(tvm.ir.Op.get("relax.call_tir")) or not isinstance(call.args[1], relax.Tuple):
            return call
        gv, args = call.args[0], list(call.args[1].fields)
        lifted = _clip_kernel(self.mod_[gv]) if gv in self.mod_.get_global_vars() and len(args) == 2 else None
        if lifted is None or not tvm_ffi.structural_equal(call.ty, args[0].ty):
            return call  # another kernel, or one that broadcasts its first input
        return lifted(args[0], self._bound(args[1]))

    def _bound(self, bound):
        """The ONNX converter's NaN-safe bound ``where(isnan(c), -inf or inf, c)`` of a constant
        ``c`` as the constant it is (a clip of constants then fuses as torch.export's does:
        constants in its kernel, not arguments); any other bound as it is."""
        value = self.lookup_binding(bound) if isinstance(bound, relax.Var) else bound
        if not (isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.where"))):
            return bound
        cond, replacement, kept = value.args
        cond = self.lookup_binding(cond) if isinstance(cond, relax.Var) else cond
        isnan = isinstance(cond, relax.Call) and cond.op.same_as(tvm.ir.Op.get("relax.isnan"))
        tested = cond.args[0] if isnan else None
        constants = [e if isinstance(e, tvm.ir.expr.GenericConst) else None for e in (tested, replacement, kept)]
        if any(c is None for c in constants) or not tested.same_as(kept) or constants[0].value.numpy().ndim:
            return bound
        r, c = (k.value.numpy() for k in constants[1:])
        return relax.const(np.where(np.isnan(c), r, c).astype(c.dtype), str(c.dtype))


def _clip_as_ops(call):
    """``relax.clip(x, lo, hi)`` (constant bounds) as ``minimum(maximum(x, lo), hi)``, the ONNX
    converter's order; a clip of another dtype or bound stays."""
    x, lo, hi = call.args
    dtype = str(x.ty.dtype) if isinstance(x.ty, relax.TensorType) else ""
    if not dtype.startswith("float") or not all(isinstance(b, (tvm.tirx.IntImm, tvm.tirx.FloatImm)) for b in (lo, hi)):
        return call
    lo, hi = (relax.const(float(b.value), dtype) for b in (lo, hi))
    return relax.op.minimum(relax.op.maximum(x, lo), hi)


def lift_clips() -> tvm.transform.Pass:
    """The pass that writes each clip as Relax's maximum and minimum (see the module docstring)."""
    return mutator_pass("tvm_pool.lift_clips", _ClipLifter)
