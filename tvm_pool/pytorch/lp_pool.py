"""lp_pool's traced formula, converted as PyTorch computes it.

``torch.nn.functional.lp_pool*d`` is Python: ``(sign(a) * relu(abs(a)) * kernel_size) ** (1/p)``
with ``a = avg_pool*d(x ** p)``, so torch.export records it as those ATen operators and no
pooling converter sees it. Two of TVM's converters differ from PyTorch on that formula:

- ``relu``: TVM's ``max(x, 0)`` turns NaN into 0, PyTorch's relu keeps NaN. In the formula relu
  takes ``abs(a)``, where ``relu(abs(a)) == abs(a)`` holds for every value, NaN included: a
  relu of an abs is converted as the abs itself (so ``x ** 1.5`` of a negative x gives NaN, as
  in torch). Every other relu stays TVM's.
- ``pow`` (Tensor ** Scalar) of a bfloat16 tensor: TVM refuses it ("power only applies to
  float"); PyTorch computes it in float32 and rounds once, which is what is emitted here.
  Every other pow stays TVM's.

Each wrapper takes the importer, the node and TVM's own converter for the op.
"""

from __future__ import annotations

from tvm import relax

WRAPPERS = {}


def wraps(name: str):
    def register(fn):
        WRAPPERS[name] = fn
        return fn

    return register


def _is_call(arg, target_name: str) -> bool:
    return getattr(arg, "op", None) == "call_function" and getattr(arg.target, "__name__", "") == target_name


@wraps("relu.default")
def relu(importer, node, original):
    source = node.args[0]
    if _is_call(source, "abs.default"):
        return importer.env[source]
    return original(node)


@wraps("pow.Tensor_Scalar")
def power(importer, node, original):
    x = importer.env.get(node.args[0])
    exponent = node.args[1]
    ty = getattr(x, "ty", None)
    if not isinstance(ty, relax.TensorType) or str(ty.dtype) != "bfloat16" or not isinstance(exponent, (int, float)):
        return original(node)
    bb = importer.block_builder
    wide = bb.emit(relax.op.astype(x, "float32"))
    raised = bb.emit(relax.op.power(wide, relax.const(float(exponent), "float32")))
    return bb.emit(relax.op.astype(raised, "bfloat16"))
