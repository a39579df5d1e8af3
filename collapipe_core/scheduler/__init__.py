"""Schedulers: the policy interface, the registry, DSSDA and the baselines."""

from collapipe_core.scheduler import baselines as _baselines  # noqa: F401  (registers built-ins)
from collapipe_core.scheduler import dssda as _dssda  # noqa: F401
from collapipe_core.scheduler import optimal as _optimal  # noqa: F401
from collapipe_core.scheduler.base import (
    ENTRY_POINT_GROUP,
    Policy,
    PolicyRegistry,
    UnknownPolicyError,
    get_policy,
    policy_names,
    register,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Policy",
    "PolicyRegistry",
    "UnknownPolicyError",
    "get_policy",
    "policy_names",
    "register",
]
