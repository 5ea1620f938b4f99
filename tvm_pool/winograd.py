"""Winograd F(4x4, 3x3) for channel-last 3x3 stride-1 convolutions with constant weights.

A convolution becomes three kernels (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016): the input tiles transformed (``winograd_input``, ``V = B^T d B`` per 6x6
tile), a batched matrix product over the 36 tile positions (``relax.op.matmul`` of ``V`` and the
transformed weights ``U = G g G^T``, computed here once, at compile time), and the product
transformed back (``winograd_output``, ``Y = A^T M A``), which the convolution's elementwise
consumers (bias, activation, a residual add) fuse into. The product does 4x fewer
multiply-adds than the direct convolution's and is a plain batched GEMM, which MetaSchedule
tunes well; the two transforms are scheduled by ``schedules/winograd.py``.

Which convolutions take it is :func:`rewrite`'s ``mode``: "auto" (``compile``) rewrites a
convolution when the current MetaSchedule database holds a record for its product, so an
untuned model builds as before; "always" (``tvm-pool tune``) rewrites every eligible one, so
tuning measures the products. Not a pooling operator: the whole-model road (issue 38).
"""

from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm import relax, te, tirx

TILE = 4  # F(4x4, 3x3): outputs per tile side
KERNEL = 3
ALPHA = TILE + KERNEL - 1  # 6: input tile side
POSITIONS = ALPHA * ALPHA  # 36 products

# Convolutions smaller than this keep the direct form: with few tiles, the 36 transformed
# weight matrices (4x the weights' bytes) are read for little work. Measured on ResNet-18
# (Intel Emerald Rapids, 2 threads, records of each product, onnxruntime 14 ms in the same
# runs): Winograd from 7x7 outputs on 14.9 ms, from 14x14 10.8 ms, from 28x28 12.3 ms, none 16.1.
MIN_CHANNELS = 32
MIN_OUTPUT_PIXELS = 14 * 14

# relax op patterns (tvm/relax/op_attr_types.h): the input transform fuses with nothing; the
# output transform takes elementwise consumers, as a convolution does.
_OPAQUE, _OUT_ELEMWISE_FUSABLE = 8, 4

# The blocks' annotation: "input" / "output", their first stages "input_rows" / "output_rows"
# (schedules/winograd.py); the output's also says its tile side.
ATTR = "tvm_pool.winograd"
TILE_ATTR = "tvm_pool.winograd_tile"


@functools.lru_cache(maxsize=None)
def matrices() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, B, G) of F(4x4, 3x3), float64: ``Y = A^T [(G g G^T) * (B^T d B)] A``."""
    from tvm.topi.nn.winograd_util import (  # pylint: disable=import-outside-toplevel
        _cook_toom_convolution, _interpolation_points)

    return _cook_toom_convolution(_interpolation_points(ALPHA), TILE, KERNEL)


def transform_weight(weight_hwio: np.ndarray) -> np.ndarray:
    """``U[e * 6 + n, c, k] = (G g[:, :, c, k] G^T)[e, n]``, float32, from HWIO weights."""
    _, _, g = matrices()
    u = np.einsum("ea,abck,nb->enck", g, weight_hwio.astype(np.float64), g)
    return np.ascontiguousarray(u.reshape(POSITIONS, *weight_hwio.shape[2:]).astype(np.float32))


def _lin(coefs, terms):
    """``sum(c * t)`` over the nonzero coefficients (float32 terms), with no multiply by 1 or -1."""
    out = None
    for c, t in zip(coefs, terms):
        c = float(c)
        if c == 0.0:
            continue
        v = t if c == 1.0 else (-t if c == -1.0 else t * tirx.const(c, "float32"))
        out = v if out is None else out + v
    return out


def _select(index, exprs):
    """``exprs[index]`` for a loop variable ``index``: a Select chain the schedule's unrolled
    loops fold to one expression each."""
    out = exprs[-1]
    for i in range(len(exprs) - 2, -1, -1):
        out = tirx.Select(index == i, exprs[i], out)
    return out


def _tiles(out_h: int, out_w: int) -> tuple[int, int]:
    return (out_h + TILE - 1) // TILE, (out_w + TILE - 1) // TILE


def input_transform(x: te.Tensor, out_h: int, out_w: int, pad_top: int, pad_left: int) -> te.Tensor:
    """``V[e * 6 + n, p, c]``: ``(B^T d B)[e, n]`` of tile ``p`` (batch, tile row, tile column)
    of the NHWC input ``x``, zero outside it (the convolution's padding and the last tiles'
    overhang). Two stages, ``B^T d`` then ``(B^T d) B``, each a Select over 6 rows only: the
    schedule unrolls them, and a Select over all 36 positions of 36 taps took TVM's
    simplifier seconds per kernel."""
    batch, height, width, channels = (int(s) for s in x.shape)
    tiles_h, tiles_w = _tiles(out_h, out_w)
    tiles = batch * tiles_h * tiles_w
    _, b, _ = matrices()
    zero = tirx.const(0.0, x.dtype)

    def tap(a, col, p, c):
        n, ty, tx = p // (tiles_h * tiles_w), (p // tiles_w) % tiles_h, p % tiles_w
        h, w = ty * TILE + a - pad_top, tx * TILE + col - pad_left
        return tirx.if_then_else(tirx.all(h >= 0, h < height, w >= 0, w < width), x[n, h, w, c], zero)

    rows = te.compute(
        (ALPHA, ALPHA, tiles, channels),
        lambda e, col, p, c: _select(e, [_lin(b[:, i], [tap(a, col, p, c) for a in range(ALPHA)]) for i in range(ALPHA)]),
        name="winograd_input_rows", attrs={ATTR: "input_rows"})
    return te.compute(
        (POSITIONS, tiles, channels),
        lambda en, p, c: _select(en % ALPHA, [
            _lin(b[:, nu], [rows[en // ALPHA, col, p, c] for col in range(ALPHA)]) for nu in range(ALPHA)]),
        name="winograd_input", attrs={ATTR: "input"})


def output_transform(m: te.Tensor, batch: int, out_h: int, out_w: int) -> te.Tensor:
    """``Y[n, h, w, k]``: ``(A^T M A)[h % 4, w % 4]`` of the products ``m[e * 6 + n, p, k]`` of
    the tile holding (h, w); two stages, as :func:`input_transform`."""
    tiles_h, tiles_w = _tiles(out_h, out_w)
    a_mat, _, _ = matrices()
    filters = int(m.shape[2])
    rows = te.compute(
        (TILE, ALPHA, int(m.shape[1]), filters),
        lambda i, nu, p, k: _select(i, [
            _lin(a_mat[:, r], [m[e * ALPHA + nu, p, k] for e in range(ALPHA)]) for r in range(TILE)]),
        name="winograd_output_rows", attrs={ATTR: "output_rows"})

    def compute(n, h, w, k):
        p = n * tiles_h * tiles_w + (h // TILE) * tiles_w + w // TILE
        return _select(w % TILE, [_lin(a_mat[:, j], [rows[h % TILE, nu, p, k] for nu in range(ALPHA)])
                                  for j in range(TILE)])

    return te.compute((batch, out_h, out_w, filters), compute, name="winograd_output",
                      attrs={ATTR: "output", TILE_ATTR: TILE})


def eligible(call: relax.Call, weight) -> bool:
    """Whether ``call`` is a conv2d this module rewrites, ``weight`` its weights (a Constant, or
    what its weights' variable is bound to): NHWC data and output, HWIO constant
    weights, float32, 3x3, stride 1, dilation 1, one group, static shapes, at least
    :data:`MIN_CHANNELS` channels in and out and :data:`MIN_OUTPUT_PIXELS` output pixels."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
        return False
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout or attrs.data_layout) != ("NHWC", "HWIO", "NHWC"):
        return False
    if not isinstance(weight, tvm.ir.expr.Constant) or int(attrs.groups) != 1:
        return False
    if [int(s) for s in attrs.strides] != [1, 1] or [int(d) for d in attrs.dilation] != [1, 1]:
        return False
    data_ty, out_ty = call.args[0].ty, call.ty
    if not all(isinstance(s, relax.TensorType) and s.shape is not None for s in (data_ty, out_ty)):
        return False
    if data_ty.dtype != "float32" or out_ty.dtype != "float32" or weight.value.dtype != "float32":
        return False
    if not all(isinstance(v, tirx.IntImm) for v in (*data_ty.shape.values, *out_ty.shape.values)):
        return False
    kh, kw, channels, filters = weight.value.shape
    _, out_h, out_w, _ = (int(v) for v in out_ty.shape.values)
    return ((kh, kw) == (KERNEL, KERNEL) and min(channels, filters) >= MIN_CHANNELS
            and out_h * out_w >= MIN_OUTPUT_PIXELS)


def product_shapes(call: relax.Call, weight) -> tuple[tuple, tuple]:
    """The shapes of the batched product's operands: V ``(36, P, C)`` and U ``(36, C, K)``."""
    batch, out_h, out_w, _ = (int(v) for v in call.ty.shape.values)
    _, _, channels, filters = weight.value.shape
    tiles_h, tiles_w = _tiles(out_h, out_w)
    return (POSITIONS, batch * tiles_h * tiles_w, channels), (POSITIONS, channels, filters)


def emit(bb: relax.BlockBuilder, call: relax.Call, weight) -> relax.Expr:
    """The three kernels of ``call`` (an :func:`eligible` conv2d), emitted into ``bb``."""
    batch, out_h, out_w, _ = (int(v) for v in call.ty.shape.values)
    pads = [int(p) for p in call.attrs.padding]  # top, left, bottom, right
    v = bb.emit_te(input_transform, call.args[0], out_h, out_w, pads[0], pads[1],
                   primfunc_name_hint="winograd_input", primfunc_attrs={"op_pattern": _OPAQUE})
    u = relax.const(transform_weight(weight.value.numpy()))
    m = bb.emit(relax.op.matmul(v, u))
    return bb.call_te(output_transform, m, batch, out_h, out_w, primfunc_name_hint="winograd_output",
                      primfunc_attrs={"op_pattern": _OUT_ELEMWISE_FUSABLE})


def rewrite(mode: str, covered=None) -> tvm.transform.Pass:
    """A Relax pass rewriting eligible conv2d calls (see the module's docstring for ``mode``:
    "auto", "always" or "never"). ``covered(v_shape, u_shape) -> bool``: in "auto", whether a
    tuning record exists for the product of those shapes."""
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"winograd mode must be one of auto, always, never, got {mode!r}")

    @relax.expr_functor.mutator
    class _Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):  # pylint: disable=arguments-renamed
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
                return call
            weight = call.args[1]
            if isinstance(weight, relax.Var):
                weight = self.lookup_binding(weight)
            if not eligible(call, weight):
                return call
            if mode == "auto" and (covered is None or not covered(*product_shapes(call, weight))):
                return call
            return emit(self.builder_, call, weight)

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.Winograd")
    def _pass(mod, _ctx):
        if mode == "never":
            return mod
        rewriter = _Rewriter(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return _pass
