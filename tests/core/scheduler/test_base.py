"""The policy registry: registered names are checked without importing anything."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from collapipe_core.scheduler import PolicyRegistry, UnknownPolicyError, policy_names

POLICY_MODULE = "collapipe_test_registry_policy"


@pytest.fixture
def policy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module on sys.path whose import leaves a mark, so a test sees whether it was imported."""
    marker = tmp_path / "imported"
    (tmp_path / f"{POLICY_MODULE}.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('yes')\n"
        "from collapipe_core.scheduler import get_policy\n"
        "class Mine:\n"
        "    name = 'mine'\n"
        "    def decide(self, state):\n"
        "        return get_policy('uniform').decide(state)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, POLICY_MODULE, raising=False)
    return marker


def test_the_service_registry_names_registered_policies_without_importing(policy_module: Path) -> None:
    registry = PolicyRegistry({"mine": f"{POLICY_MODULE}:Mine"})
    assert "mine" in registry.names() and set(policy_names()) <= set(registry.names())
    assert registry.problem("mine") is None
    assert not policy_module.exists()
    assert registry.create("mine").name == "mine"
    assert policy_module.exists()


@pytest.mark.parametrize("name", ["os:abort", "tempfile:mkdtemp", "this:x", f"{POLICY_MODULE}:Mine"])
def test_the_service_registry_never_imports_an_import_path(name: str, policy_module: Path) -> None:
    registry = PolicyRegistry()
    problem = registry.problem(name)
    assert problem is not None and "is not registered" in problem and "dssda" in problem
    with pytest.raises(UnknownPolicyError):
        registry.create(name)
    assert not policy_module.exists()


def test_the_local_registry_imports_a_users_class(policy_module: Path) -> None:
    assert PolicyRegistry.local().create(f"{POLICY_MODULE}:Mine").name == "mine"
    assert "cannot import" in (PolicyRegistry.local().problem("no_such_module_xyz:P") or "")


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        ({"uniform": "a.b:C"}, "built-in"),
        ({"bad name!": "a.b:C"}, "letters, digits"),
        ({"mine": "a.b"}, "package.module:Class"),
        ({"mine": "a.b:C; import os"}, "package.module:Class"),
    ],
)
def test_bad_registrations_are_refused(targets: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PolicyRegistry(targets)


def test_entry_points_are_discovered(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    found = [EntryPoint("from-package", "pkg.policies:Mine", "collapipe.policies")]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: found if group else [])
    registry = PolicyRegistry()
    assert registry.registered() == {"from-package": "pkg.policies:Mine"}
    assert PolicyRegistry(entry_points=False).registered() == {}
    copy = pickle.loads(pickle.dumps(registry))
    assert copy.registered() == {"from-package": "pkg.policies:Mine"}
