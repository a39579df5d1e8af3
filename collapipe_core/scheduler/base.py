"""The policy interface and the registry that resolves a policy by name or by import path.

A policy is any object with a ``name`` and ``decide(state) -> Decision``. Built-in policies are
registered here by name; ``"package.module:Class"`` imports a user's class and instantiates it with no
arguments, so researchers can bring their own scheduler without touching CollaPipe.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from collapipe_core.decision import Decision
from collapipe_core.state import RoundState


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, state: RoundState) -> Decision: ...


_REGISTRY: dict[str, Callable[[], Policy]] = {}


def register(name: str) -> Callable[[Callable[[], Policy]], Callable[[], Policy]]:
    """Class decorator: make a built-in policy available under ``name``."""

    def wrap(factory: Callable[[], Policy]) -> Callable[[], Policy]:
        _REGISTRY[name] = factory
        return factory

    return wrap


def policy_names() -> list[str]:
    return sorted(_REGISTRY)


class UnknownPolicyError(ValueError):
    pass


def get_policy(name: str) -> Policy:
    """A built-in policy by name, or a user policy by ``"package.module:Class"``."""
    if name in _REGISTRY:
        return _REGISTRY[name]()
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise UnknownPolicyError(
                f"cannot import module {module_name!r} for policy {name!r}: {err}"
            ) from None
        factory = getattr(module, attr, None)
        if factory is None:
            raise UnknownPolicyError(f"module {module_name!r} has no attribute {attr!r}")
        policy = factory()
        if not isinstance(policy, Policy):
            raise UnknownPolicyError(f"{name!r} does not have a 'name' and a 'decide(state)' method")
        return policy
    raise UnknownPolicyError(
        f"unknown policy {name!r}; choose one of {', '.join(policy_names())} or give 'package.module:Class'"
    )
