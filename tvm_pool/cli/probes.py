"""What ``tvm-pool inspect`` reports for one pooling node's probe module, whatever road it came
from (ONNX, torch.export, TFLite): the schedule rule its PrimFuncs get and the tuning record."""

from __future__ import annotations

from .common import MODEL_ERRORS, one_line


def schedule_rule_for(probe_mod, target) -> str:
    """The name of the first tvm_pool schedule rule that applies to the node's PrimFunc(s). A
    rule that fails on a function raises here, as it would fail ``compile``."""
    from tvm import relax, tirx  # pylint: disable=import-outside-toplevel

    from .. import lowering, schedules  # pylint: disable=import-outside-toplevel

    rules = list(schedules.rules_for(target))
    if not rules:
        return "none (unscheduled)"
    if probe_mod is None:
        return "? (input shape unknown)"
    mod = probe_mod
    with target:
        mod = relax.transform.LegalizeOps(customize_legalize_map=lowering.legalize_map())(mod)
    found = []
    for _, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        func = func.with_attr("target", target)
        found.append(_first_rule(rules, func, target))
    names = [f for f in found if f]
    if not names:
        return "none (unscheduled)"
    return ", ".join(dict.fromkeys(names))


def _first_rule(rules, func, target) -> str | None:
    """The name of the first rule that schedules ``func``; a rule that declines it (a
    ``ScheduleDeclined`` warning, as compile would give) is named with its reason."""
    import warnings  # pylint: disable=import-outside-toplevel

    from ..schedules import ScheduleDeclined  # pylint: disable=import-outside-toplevel

    for rule in rules:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ScheduleDeclined)
            applied = rule.apply(func, target, False)
        declined = [w.message for w in caught if isinstance(w.message, ScheduleDeclined)]
        if declined:
            return f"none ({declined[0].family} declined it: {declined[0].reason})"
        if applied is not None:
            return getattr(rule, "name", None) or _rule_name(rule)
    return None


def _rule_name(rule) -> str:
    module = type(rule).__module__.rsplit(".", 1)[-1]
    return f"{module}.{type(rule).__name__}" if module not in ("__main__", "builtins") else type(rule).__name__


def tuning_record_for(probe_mod, target, tuning_logs=None, shipped: bool = True) -> str | None:
    """The tuning record the node's PrimFunc gets from ``tuning_logs`` and the shipped logs
    (None: none); "? (why)" when the node's functions cannot be fused or extracted as tasks."""
    from .. import tuning  # pylint: disable=import-outside-toplevel

    if probe_mod is None:
        return None
    try:
        return tuning.tuning_record_for(target, probe_mod, tuning_logs, shipped)
    except MODEL_ERRORS as err:
        return f"? ({one_line(err)})"
