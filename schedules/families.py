"""Which rule schedules a target: every family's rule, asked in order."""

from __future__ import annotations

import tvm

from . import arm, cuda, x86


def rules() -> list:
    """Every family's rule, in the order they are asked (the first that takes a target wins)."""
    return [x86.Pool(), arm.Pool(), cuda.Pool()]


def rule_for(target: tvm.target.Target):
    """The schedule rule for ``target`` (x86, aarch64 or CUDA); None for any other target."""
    return next((rule for rule in rules() if rule.is_target_available(target)), None)


def rules_for(target: tvm.target.Target) -> list:
    """The dlight rules for ``target``: ``[rule_for(target)]``, or none."""
    rule = rule_for(target)
    return [rule] if rule is not None else []


