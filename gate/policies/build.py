"""``build_policy``: a policy object from its name and options, as the registry declares them."""

from __future__ import annotations

from typing import Any

from .budget import BudgetLendPolicy, PreemptLendPolicy
from .floors import LendPolicy, StaticPolicy
from .interface import AdmissionPolicy
from .priority_lend import PriorityLendPolicy
from .registry import DEFAULTS, check_options, policy_named
from .shared_cap import FcfsPolicy, PriorityPolicy

__all__ = ["POLICY_CLASSES", "build_policy"]

#: The class of each policy of ``registry.POLICIES``, by the policy's name.
POLICY_CLASSES: dict[str, type[AdmissionPolicy]] = {cls.name: cls for cls in (
    FcfsPolicy, PriorityPolicy, StaticPolicy, LendPolicy, BudgetLendPolicy, PreemptLendPolicy, PriorityLendPolicy)}


def build_policy(name: str, **options: Any) -> AdmissionPolicy:
    """The policy ``name`` (or an alias of it) with ``options``, each defaulted and checked as the
    registry says; an option the policy does not take is checked and left aside. Errors are
    ``SettingError`` naming the setting."""
    spec = policy_named(name)
    check_options(options)
    return POLICY_CLASSES[spec.name](**{option: options.get(option, DEFAULTS[option]) for option in spec.options})
