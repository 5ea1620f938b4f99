"""The layout parameter of the pooling computes: channel-first (``[N, C, *spatial]``, and any
leading axes before the spatial ones) or channel-last (``[N, *spatial, C]``).

Every compute is written once, in channel-first coordinates. A channel-last input is handed to
it as a :class:`ChannelLast` view, which has the channel-first shape and turns each
channel-first index into the channel-last one when read; the computes make every stage with
:func:`compute`, which gives a stage of a view a channel-last tensor (and a view of it). So a
channel-last pool reads and writes channel-last memory in every stage (the padded copy, the
passes, the finalize), with the same formulas, and its blocks carry
``tvm_pool.layout = "channel_last"`` (:data:`~tvm_pool.compute.common.LAYOUT_ATTR`) for the
schedules. Channel-first stages carry no layout annotation: their PrimFuncs are unchanged.

Indices that number whole tensors (ONNX MaxPool's) number the logical channel-first positions
whatever the layout; plane indices (PyTorch, OpenVINO) do not depend on the layout at all.
"""

from __future__ import annotations

import functools

from tvm import te

from .common import LAYOUT_ATTR

CHANNEL_FIRST = "channel_first"
CHANNEL_LAST = "channel_last"
_NAMES = {
    None: CHANNEL_FIRST, CHANNEL_FIRST: CHANNEL_FIRST, CHANNEL_LAST: CHANNEL_LAST,
    "NCW": CHANNEL_FIRST, "NCHW": CHANNEL_FIRST, "NCDHW": CHANNEL_FIRST,
    "NWC": CHANNEL_LAST, "NHWC": CHANNEL_LAST, "NDHWC": CHANNEL_LAST,
}
LAYOUTS = tuple(name for name in _NAMES if name is not None)


def parse(layout) -> str:
    """:data:`CHANNEL_FIRST` or :data:`CHANNEL_LAST` for a layout name (None: channel-first)."""
    key = str(layout) if layout is not None else None
    if key not in _NAMES:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
    return _NAMES[key]


def to_channel_last(idx):
    """A channel-first index ``(n, c, *spatial)`` as the channel-last one ``(n, *spatial, c)``."""
    idx = list(idx)
    return [idx[0]] + idx[2:] + [idx[1]]


def to_channel_first(idx):
    """A channel-last index or shape ``(n, *spatial, c)`` as the channel-first one."""
    idx = list(idx)
    return [idx[0], idx[-1]] + idx[1:-1]


class ChannelLast:
    """A channel-last tensor seen in channel-first order: ``shape`` is ``[N, C, *spatial]``, and
    reading ``view[n, c, *spatial]`` reads ``tensor[n, *spatial, c]``."""

    def __init__(self, tensor: te.Tensor):
        if len(tensor.shape) < 3:
            raise ValueError(f"a channel-last tensor has at least 3 axes (N, spatial, C), got shape {tensor.shape}")
        self.tensor = tensor

    @property
    def shape(self):
        return to_channel_first(self.tensor.shape)

    @property
    def dtype(self):
        return self.tensor.dtype

    @property
    def ndim(self):
        return len(self.tensor.shape)

    def __call__(self, *idx):
        return self.tensor(*to_channel_last(idx))

    def __getitem__(self, idx):
        return self(*idx) if isinstance(idx, (tuple, list)) else self(idx)


def is_channel_last(tensor) -> bool:
    return isinstance(tensor, ChannelLast)


def compute(like, shape, fcompute, name: str, attrs: dict | None = None):
    """``te.compute(shape, fcompute, ...)`` in the layout of ``like``: for a :class:`ChannelLast`
    ``like`` the stage is a channel-last tensor (``shape`` and ``fcompute``'s indices stay
    channel-first) returned as a view, or a list of views for a multi-output stage."""
    if not is_channel_last(like):
        return te.compute(shape, fcompute, name=name, attrs=attrs or {})
    out = te.compute(
        to_channel_last(shape), lambda *idx: fcompute(*to_channel_first(idx)), name=name,
        attrs={**(attrs or {}), LAYOUT_ATTR: CHANNEL_LAST},
    )
    if isinstance(out, (list, tuple)):
        return [ChannelLast(t) for t in out]
    return ChannelLast(out)


def unwrap(result):
    """The te.Tensors behind a compute's result (a tensor, a view, or a tuple/list of them)."""
    if isinstance(result, ChannelLast):
        return result.tensor
    if isinstance(result, (list, tuple)):
        return type(result)(unwrap(r) for r in result)
    return result


def with_layout(fn):
    """Give a compute ``fn(data, ...)`` written in channel-first coordinates a ``layout``
    keyword (see :func:`parse`): a channel-last ``data`` is passed as a :class:`ChannelLast`
    view, and the result's views are unwrapped. Computes calling each other pass views along
    (no ``layout``: a view stays a view)."""

    @functools.wraps(fn)
    def wrapper(data, *args, layout=None, **kwargs):
        if parse(layout) == CHANNEL_FIRST or is_channel_last(data):
            return fn(data, *args, **kwargs)
        return unwrap(fn(ChannelLast(data), *args, **kwargs))

    return wrapper
