"""AutoDist 0.7's import paths: second names of our objects (aliases, never copies).

That every public name of ``autodist.strategy``, ``autodist.strategy.base`` and
``autodist.checkpoint.saved_model_builder`` is the object of its home module is
checked with the other public paths in ``tests/test_api.py``.
"""
import json
import os
import subprocess
import sys

import pytest

from autodist.runtime.context import ENV_VAR, JobContext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_strategy_compiler_is_importable_from_strategies_base():
    from autodist.strategies.base import StrategyCompiler
    from autodist.strategies.compiler import StrategyCompiler as home
    from autodist.strategy.base import StrategyCompiler as alias
    assert StrategyCompiler is home is alias
    from autodist.strategy import PS, Parallax
    from autodist.strategies import PS as ps_home, Parallax as parallax_home
    assert PS is ps_home and Parallax is parallax_home


def test_autodist_module_names_the_autodist_class():
    from autodist.autodist import AutoDist
    from autodist.api import AutoDist as home
    assert AutoDist is home


_CHIEF_PROBE = ("import json, sys; from autodist.autodist import IS_AUTODIST_CHIEF, IS_AUTODIST_WORKER; "
                "print(json.dumps([IS_AUTODIST_CHIEF, IS_AUTODIST_WORKER, 'tensorflow' in sys.modules]))")


def _probe(extra_env):
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", _CHIEF_PROBE], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_is_autodist_chief_in_the_chief_and_in_launched_nodes(tmp_path):
    servers = {"127.0.0.1": "127.0.0.1:1", "127.0.0.2": "127.0.0.2:2"}
    member = JobContext(job_id="j", address="127.0.0.2", servers=servers, chief="127.0.0.1",
                        strategy_path=str(tmp_path / "s.pb"))
    chief = member.for_node("127.0.0.1", str(tmp_path / "s.pb"))
    assert _probe({}) == [True, False, False]                  # the process the user started
    assert _probe(member.to_env()) == [False, True, False]     # a node the chief launched
    assert _probe(chief.to_env()) == [True, False, False]


def test_is_autodist_chief_is_read_when_looked_up_not_at_import(monkeypatch, tmp_path):
    import autodist.autodist as module
    member = JobContext(job_id="j", address="127.0.0.2", servers={"127.0.0.1": "a:1", "127.0.0.2": "b:2"},
                        chief="127.0.0.1", strategy_path=str(tmp_path / "s.pb"))
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert module.IS_AUTODIST_CHIEF is True
    monkeypatch.setenv(ENV_VAR, member.to_env()[ENV_VAR])
    assert module.IS_AUTODIST_CHIEF is False and module.IS_AUTODIST_WORKER is True
    assert sorted(module.__all__) == ["AutoDist", "IS_AUTODIST_CHIEF", "IS_AUTODIST_WORKER"]
