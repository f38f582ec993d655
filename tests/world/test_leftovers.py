"""What a session leaves on the user's machine (issue 38, item 8): nothing
of the harness's making outside the folders it was asked to write."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import rpc_harness

    def entry(ctx):
        return ctx.rank

    if __name__ == "__main__":
        assert rpc_harness.run_world(entry, world_size=2).values == [0, 1]
""")


def run_a_world(folder, temp):
    script = folder / "one_world.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if key != "TORCHINDUCTOR_CACHE_DIR"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=folder,
                          env=dict(env, TMPDIR=str(temp)))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("there_before", [False, True], ids=["made by the world", "the user's"])
def test_the_forkserver_leaves_no_empty_inductor_cache_folder_in_the_temp_folder(tmp_path, short_tmp, there_before):
    # Preloading torch._dynamo made torch's inductor cache folder,
    # torchinductor_<user>, in the temp folder: every session left one, empty.
    torchs = f"torchinductor_{getpass.getuser()}"  # torch's name for it
    if there_before:
        (short_tmp / torchs).mkdir()
    run_a_world(tmp_path, short_tmp)
    left = sorted(path.name for path in short_tmp.iterdir() if path.name.startswith("torchinductor_"))
    assert left == ([torchs] if there_before else []), left


DRAWN = """
from hypothesis import given, strategies as st

@given(st.integers(0, 3))
def test_drawn(n):
    assert n >= 0
"""


@pytest.mark.parametrize("chosen", [False, True], ids=["pytest's cache", "HYPOTHESIS_STORAGE_DIRECTORY"])
def test_hypothesis_keeps_its_folder_in_pytests_cache_not_in_the_users_project(pytester, monkeypatch, chosen):
    # Hypothesis writes .hypothesis/ (its database, its caches) into the
    # current folder: the user's project.
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    if chosen:
        monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(pytester.path / "mine"))
    pytester.makepyfile(test_drawn=DRAWN)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".hypothesis").exists()
    where = pytester.path / "mine" if chosen else pytester.path / ".pytest_cache" / "d" / "hypothesis"
    assert where.is_dir() and any(where.iterdir()), sorted(p.name for p in pytester.path.rglob("*"))
