"""The policy interface and the registry that says which policies a process may run.

A policy is any object with a ``name`` and ``decide(state) -> Decision``. A config names its policy
(``scheduler.policy``); a :class:`PolicyRegistry` turns the name into a policy:

- the built-in policies (registered here with :func:`register`) are always there;
- policies the installation registers: the ``collapipe.policies`` entry points of installed packages
  (``[project.entry-points."collapipe.policies"] my-policy = "mypkg.policies:MyPolicy"``) and an
  allow-list of ``name -> "package.module:Class"`` the operator gives (the service's
  ``COLLAPIPE_POLICIES`` setting). Their names are known without importing anything; the code is
  imported only when a run uses the policy;
- ``import_paths=True`` (the local registry of the CLI and the Python API, the user's own process)
  also accepts any ``"package.module:Class"`` and imports it.

The service's registry never accepts an import path: a request can name only what the operator
registered, and checking a name imports nothing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from collapipe_core.quote import short

if TYPE_CHECKING:
    from collapipe_core.decision import Decision
    from collapipe_core.state import RoundState

ENTRY_POINT_GROUP = "collapipe.policies"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_TARGET = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, state: RoundState) -> Decision: ...


_BUILTINS: dict[str, Callable[[], Policy]] = {}


def register(name: str) -> Callable[[Callable[[], Policy]], Callable[[], Policy]]:
    """Class decorator: make a built-in policy available under ``name``."""

    def wrap(factory: Callable[[], Policy]) -> Callable[[], Policy]:
        _BUILTINS[name] = factory
        return factory

    return wrap


def policy_names() -> list[str]:
    """The built-in policies."""
    return sorted(_BUILTINS)


class UnknownPolicyError(ValueError):
    pass


class PolicyRegistry:
    """The policies one process may run (see the module docstring). Picklable: holds only strings."""

    def __init__(
        self,
        targets: Mapping[str, str] | None = None,
        *,
        entry_points: bool = True,
        import_paths: bool = False,
    ) -> None:
        self.targets = dict(targets or {})
        for name, target in self.targets.items():
            _check_registration(name, target, "the policy allow-list")
        self.entry_points = entry_points
        self.import_paths = import_paths
        self._discovered: dict[str, str] | None = None

    @classmethod
    def local(cls) -> PolicyRegistry:
        """The CLI's and the Python API's registry: registered policies and any import path."""
        return cls(import_paths=True)

    def registered(self) -> dict[str, str]:
        """Registered (non-built-in) policies: name -> "package.module:Class". Imports nothing."""
        found = dict(self._entry_point_targets())
        found.update(self.targets)  # the operator's allow-list wins over an entry point of the same name
        return found

    def names(self) -> list[str]:
        return sorted({*_BUILTINS, *self.registered()})

    def problem(self, name: str) -> str | None:
        """Why ``name`` cannot be run here (None when it can). Imports only a local import path."""
        if name in _BUILTINS or name in self.registered():
            return None
        if self.import_paths and ":" in name:
            try:
                self.create(name)
            except UnknownPolicyError as err:
                return str(err)
            return None
        return self._unknown(name)

    def create(self, name: str) -> Policy:
        """A fresh policy object for ``name``; UnknownPolicyError names what is available."""
        if name in _BUILTINS:
            return _BUILTINS[name]()
        target = self.registered().get(name)
        if target is None:
            if not (self.import_paths and ":" in name):
                raise UnknownPolicyError(self._unknown(name))
            target = name
        return _instantiate(name, target)

    def _unknown(self, name: str) -> str:
        hint = " or give 'package.module:Class'" if self.import_paths else ""
        return (
            f"policy {short(name)} is not registered; choose one of {', '.join(self.names())}{hint} "
            f"(an installation registers more with the '{ENTRY_POINT_GROUP}' entry point of an installed "
            "package or the COLLAPIPE_POLICIES setting)"
        )

    def _entry_point_targets(self) -> dict[str, str]:
        if not self.entry_points:
            return {}
        if self._discovered is None:
            found: dict[str, str] = {}
            for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                if entry.name not in _BUILTINS and _NAME.fullmatch(entry.name):
                    found[entry.name] = entry.value
            self._discovered = found
        return self._discovered

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_discovered": None}  # each process discovers its own entry points


def _check_registration(name: str, target: str, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(f"{where}: policy name {short(name)} must be 1-64 letters, digits, '_', '.', '-'")
    if name in _BUILTINS:
        raise ValueError(f"{where}: {name!r} is a built-in policy; register yours under another name")
    if not _TARGET.fullmatch(target):
        raise ValueError(f"{where}: {name!r} -> {short(target)} must be 'package.module:Class'")


def _instantiate(name: str, target: str) -> Policy:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UnknownPolicyError(
            f"policy {short(name)}: cannot import module {short(module_name)} ({err}); install the package "
            "that provides it"
        ) from None
    factory: object = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise UnknownPolicyError(f"policy {short(name)}: module {module_name!r} has no callable {attr!r}")
    policy = factory()
    if not isinstance(policy, Policy):
        raise UnknownPolicyError(f"policy {short(name)} does not have a 'name' and a 'decide(state)' method")
    return policy


def get_policy(name: str) -> Policy:
    """A policy by name from the local registry (built-ins, entry points, or ``"package.module:Class"``)."""
    return PolicyRegistry.local().create(name)
