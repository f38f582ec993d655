"""The launcher's input checks: bad worlds are refused before any process starts."""

from __future__ import annotations

import os
import re
import traceback

import pytest
import worlds

import rpc_harness
from rpc_harness import WorldSpecError


@pytest.mark.parametrize(
    ("env", "message"),
    [({"OMP_NUM_THREADS": "two"}, "env OMP_NUM_THREADS='two' is not a positive whole number"),
     ({"OMP_NUM_THREADS": "0"}, "env OMP_NUM_THREADS='0' is not a positive whole number"),
     ({"X": 1}, "env must map str to str, got 'X': 1")],
)
def test_a_bad_env_is_refused_before_any_rank_starts(env, message):
    with pytest.raises(WorldSpecError, match=re.escape(message)):
        rpc_harness.run_world(worlds.thread_count, world_size=2, env=env)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "invalid world_size 0"),
        ({"world_size": True}, "invalid world_size True"),
        ({"world_size": "2"}, "invalid world_size '2'; use a whole number in 1..512"),
        ({"world_size": 513}, "invalid world_size 513; use at most 512"),
        ({"world_size": 2, "names": ["a"]}, "1 names given for world_size=2"),
        ({"world_size": 2, "names": ["a", "a"]}, "duplicate worker names"),
        ({"world_size": 2, "names": ["a b", "c"]}, "invalid worker name 'a b'"),
        ({"world_size": 2, "deadline": 0}, "invalid deadline 0"),
        ({"world_size": 2, "deadline": float("inf")}, "invalid deadline inf"),
        ({"world_size": 2, "seed": -1}, "invalid seed -1"),
        ({"world_size": 2, "args": (lambda: 1,)}, "worlds:identity(ctx) cannot be called as identity(ctx, <function"),
        ({"world_size": 2, "kwargs": {"x": 1}}, "cannot be called as identity(ctx, x=1): got an unexpected keyword"),
        ({"world_size": 2, "faults": "kill:nobody@x.step"}, "unknown worker 'nobody'"),
        ({"world_size": 2, "faults": "explode:worker0@x.step"}, "unknown fault kind 'explode'"),
        ({}, "give world_size"),
    ],
)
def test_bad_input_is_rejected_before_any_process_starts(monkeypatch, kwargs, message):
    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", lambda spec, **options: pytest.fail("a world was started"))
    with pytest.raises(ValueError) as caught:
        rpc_harness.run_world(worlds.identity, **kwargs)
    assert message in str(caught.value)
    assert isinstance(caught.value, rpc_harness.HarnessError)


def test_entries_must_be_importable_by_name(monkeypatch):
    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", lambda spec, **options: pytest.fail("a world was started"))

    def nested(ctx):
        return 1

    for entry, message in [
        (lambda ctx: 1, "cannot be imported by name"),
        (nested, "cannot be imported by name"),
        (42, "is not callable"),
        ("worlds:no_such_function", "does not name a function"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("worlds.identity", "is not of the form"),
    ]:
        with pytest.raises(WorldSpecError) as caught:
            rpc_harness.run_world(entry, world_size=2)
        assert message in str(caught.value)


def test_a_module_that_is_not_there_is_refused_in_one_line_and_a_broken_ones_report_shows_only_its_own_frames(
        monkeypatch, tmp_path):
    # The refusal of "nomodule:fn" printed ~40 lines of the harness's and
    # importlib's frames before its own line (outside-user trial).
    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", lambda spec, **options: pytest.fail("a world was started"))
    for entry, setup in (("no_such_module_xyz:f", None), (worlds.identity, "no_such_module_xyz:prepare")):
        with pytest.raises(WorldSpecError, match="cannot import module 'no_such_module_xyz'") as caught:
            rpc_harness.run_world(entry, world_size=2, setup=setup)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__, "nothing chained to it"
    # A module that fails as it is imported: where in it is the user's to see, and only that.
    broken = tmp_path / "broken_at_import.py"
    broken.write_text("import os\nraise RuntimeError('broken here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(WorldSpecError, match="cannot import module 'broken_at_import': broken here") as caught:
        rpc_harness.run_world("broken_at_import:f", world_size=2)
    frames = traceback.extract_tb(caught.value.__cause__.__traceback__)
    assert [(frame.filename, frame.lineno) for frame in frames] == [(str(broken), 2)]


def test_arguments_that_cannot_be_pickled_are_refused_before_any_process_starts(monkeypatch):
    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", lambda spec, **options: pytest.fail("a world was started"))
    with pytest.raises(WorldSpecError, match="the entry's args/kwargs cannot be pickled for the ranks"):
        rpc_harness.run_world(worlds.sleep_forever, world_size=2, args=(lambda: 1,))


def test_a_spawned_programs_signature_is_checked_against_its_arguments(monkeypatch):
    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", lambda spec, **options: pytest.fail("a world was started"))
    with pytest.raises(WorldSpecError, match=r"spawn\(\): worlds:add\(a, b\) cannot be called as add\(rank, 1, 2\): "
                                             "too many positional arguments"):
        rpc_harness.spawn(worlds.add, args=(1, 2), nprocs=2)
    with pytest.raises(WorldSpecError, match="invalid nprocs 0; use 1..512"):
        rpc_harness.spawn(worlds.add, args=(1,), nprocs=0)
    with pytest.raises(WorldSpecError, match="invalid nprocs 513; use at most 512"):
        rpc_harness.spawn(worlds.add, args=(1,), nprocs=513)


def test_failpoints_outside_a_world_do_nothing():
    assert rpc_harness.current_context() is None
    rpc_harness.failpoint("anything")  # must not raise


def test_message_faults_are_refused_past_33_ranks_before_any_process_starts(monkeypatch):
    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", lambda spec, **options: pytest.fail("a world was started"))
    with pytest.raises(WorldSpecError, match="message faults and schedule fuzzing work in worlds of at most 33 ranks"):
        rpc_harness.run_world(worlds.ring, world_size=34, fuzz=0.001)

    class Launched(Exception):
        pass

    def launched(spec, **options):
        raise Launched(spec.world_size)

    monkeypatch.setattr(rpc_harness._parent.launcher, "launch", launched)
    for plan, fuzz in (("msgfail:worker0@RREF_USER_DELETE=1", None), (None, 0.001)):
        with pytest.raises(Launched):  # 33 is allowed
            rpc_harness.run_world(worlds.ring, world_size=33, faults=plan, fuzz=fuzz)


def test_the_sweep_removes_stamped_folders_of_dead_owners_and_nothing_else(tmp_path):
    import subprocess
    import sys

    from rpc_harness._parent import workdirs as _workdirs

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone_pid = int(dead.stdout)
    folders = {name: tmp_path / name for name in
               ("rpc-world-dead", "pymp-dead", "pymp-alive", "pymp-unstamped", "rpc-world-unstamped", "other-dead",
                "rpc-world-reused")}
    for folder in folders.values():
        folder.mkdir()
    for name in ("rpc-world-dead", "pymp-dead", "other-dead"):
        (folders[name] / "owner").write_text(f"{gone_pid} 12345\n")
    _workdirs.stamp(str(folders["pymp-alive"]))
    # Its owner's pid now belongs to another process (this one): the start time tells them apart.
    (folders["rpc-world-reused"] / "owner").write_text(f"{os.getpid()} 1\n")
    removed = _workdirs.sweep(str(tmp_path))
    assert sorted(map(os.path.basename, removed)) == ["pymp-dead", "rpc-world-dead", "rpc-world-reused"]
    assert sorted(os.listdir(tmp_path)) == ["other-dead", "pymp-alive", "pymp-unstamped", "rpc-world-unstamped"]


def test_a_temp_folder_too_deep_for_the_forkservers_socket_is_refused_naming_it():
    rpc_harness._parent.launcher.check_socket_folder("/tmp/pymp-abcdefgh")  # what a usual TMPDIR gives
    deep = "/tmp/" + "x" * 90 + "/pymp-abcdefgh"
    with pytest.raises(WorldSpecError, match="is too deep for the forkserver's unix socket .* set TMPDIR to a shorter"):
        rpc_harness._parent.launcher.check_socket_folder(deep)


def test_a_long_isolation_setting_is_cut_in_its_error(monkeypatch):
    # Issue 28: input is echoed cut, the environment's included.
    from rpc_harness._parent.launcher import ISOLATION_ENV, isolation_mode

    monkeypatch.setenv(ISOLATION_ENV, "x" * 100_000)
    with pytest.raises(rpc_harness.WorldSpecError) as caught:
        isolation_mode()
    message = str(caught.value)
    assert message.startswith(f"{ISOLATION_ENV}='xxx") and "(100,000 characters, cut)" in message
    assert message.endswith(": use auto, off or require") and len(message) < 200


def test_a_preloaded_module_that_cannot_be_found_is_named_once_and_left_out(monkeypatch):
    from rpc_harness._parent import launcher as _launcher

    monkeypatch.setattr(_launcher, "_PRELOAD", list(_launcher._PRELOAD))  # this worker's forkserver list
    monkeypatch.setattr(_launcher, "_warned_preloads", set())
    with pytest.warns(UserWarning) as said:
        rpc_harness.preload("json", "jsno", "jsno.decoder")
        rpc_harness.preload("jsno")  # said once
    assert [str(w.message) for w in said] == [
        "rpc_harness.preload: no module named 'jsno'; worlds start without it (a rank that needs it imports "
        "it itself)",
        "rpc_harness.preload: 'jsno.decoder' cannot be imported: ModuleNotFoundError: No module named 'jsno'; "
        "worlds start without it (a rank that needs it imports it itself)"]
    assert "json" in _launcher._PRELOAD and not {"jsno", "jsno.decoder"} & set(_launcher._PRELOAD)


def test_an_rpc_harness_preload_entry_that_cannot_be_found_is_named(monkeypatch):
    from rpc_harness._parent import launcher as _launcher

    monkeypatch.setattr(_launcher, "_warned_preloads", set())
    monkeypatch.setenv(_launcher.PRELOAD_ENV, os.environ.get(_launcher.PRELOAD_ENV, ""))  # put back after
    monkeypatch.setenv("RPC_HARNESS_PRELOAD", "json, jsno")
    with pytest.warns(UserWarning, match=r"^RPC_HARNESS_PRELOAD: no module named 'jsno'; worlds start without it"):
        _launcher.forkserver_context()


def test_the_forkserver_finds_its_temp_folder_as_it_starts_not_as_it_ends(tmp_path):
    # Python finds its temp folder by writing a probe file of a random name
    # and removing it; a forkserver that first asked at exit (its sweep) was
    # seen with that file in its temp folder as it ended. The inductor
    # variable set (as an outer session's torch._dynamo sets it) skips the
    # preload's other look at the temp folder.
    import subprocess
    import sys

    code = ("import tempfile; assert tempfile.tempdir is None; "
            "import rpc_harness._parent.preload; print(tempfile.tempdir)")
    env = dict(os.environ, TMPDIR=str(tmp_path), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path)
