"""The pytest plugin: options, the ``rpc_world`` marker and fixture, reports.

A thin layer: it resolves settings (call > marker > command line > ini >
default), derives each world's seed from the session seed and the test id,
calls :func:`rpc_harness.launch`, and turns results into pytest outcomes and
report sections. Heavy imports happen inside hooks, so ``pytest --help``
never imports torch.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

    from .progress import Progress
    from .result import WorldResult

from ._cuda_fork import ForkserverCudaWarning, ask_through_nvml, warn_as
from .options import (
    DECLARED,
    INI_TYPES,
    MARKER_KEYS,
    SHAPE,
    WorldArgs,
    refuse_unknown,
    takes_world_options,
)
from .repro import SEED_FLAG

# The plugin's own settings (not world options, which options.py declares).
SEED_OPTION = SEED_FLAG
SEED_HELP = "root seed of the session: every world's seed derives from it and the test id (default: random, printed in the header)"
PRELOAD_INI = "rpc_preload"
PRELOAD_HELP = ("modules the worlds' forkserver imports once, so that no rank does (besides pytest and every "
                "test module that uses the rpc_world fixture), e.g. a helper module whose entries run_world runs")
TRACE_OPTION = "--rpc-trace-dir"
TRACE_HELP = ("folder for the Chrome trace and timeline picture of every failing world (default: "
              "rpc-harness-traces in pytest's cache folder, .pytest_cache/d/; without the cache plugin, in the "
              "session's base temp folder)")
STRICT_OPTION = "--rpc-schedule-strict"
STRICT_HELP = ("a world that loses control of its controlled schedule (a step blocked where the scheduler cannot "
               "see) fails its test (ControlLost) instead of warning (ControlLostPytestWarning); ini "
               "rpc_schedule_strict = true does the same")
# The default trace folder's name, in pytest's cache folder (or base temp folder).
TRACE_FOLDER = "rpc-harness-traces"
# Hypothesis's home (database, caches) in pytest's cache folder, and the
# session that put it there (one per process: pytester's inner sessions leave it).
HYPOTHESIS_FOLDER = "hypothesis"
_hypothesis_placed_by: pytest.Config | None = None
MARKER = "rpc_world"
MARKER_HELP = (
    f"{MARKER}({', '.join(f'{key}=None' for key in MARKER_KEYS)}): defaults for the worlds this test runs with "
    "the rpc_world fixture"
)
# World options a session sets for every world (a pytest flag and ini key each).
SESSION_OPTIONS = {name: option for name, option in DECLARED.items() if option.flag}


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


_MAX_WORLD_SECTIONS = 2
_session_seed_key = pytest.StashKey[int]()
_typed_key = pytest.StashKey[dict[str, str]]()  # a node id -> as typed where the session started
_flags_key = pytest.StashKey[list]()  # the world options on the command line
_session_values_key = pytest.StashKey[dict]()
_results_key = pytest.StashKey[list]()
_asserts_key = pytest.StashKey[Any]()  # how ranks rewrote asserts before this session
_strict_key = pytest.StashKey[bool]()  # --rpc-schedule-strict, or the ini's rpc_schedule_strict
_traces_key = pytest.StashKey[str]()  # the default trace folder when pytest's cache is off
_interrupted_key = pytest.StashKey[list]()  # what a Ctrl-C (or SIGTERM) stopped: see interrupted_world


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rpc-harness", "real torch.distributed.rpc worlds")
    # Each ini key typed as its option's text form is (a TOML config gives
    # numbers as numbers); the seed's is the one world option the plugin owns.
    flags = [(SEED_OPTION, SEED_HELP, DECLARED["seed"].parse)]
    flags += [(option.flag, option.help, option.parse) for option in SESSION_OPTIONS.values()]
    for flag, text, parse in flags + [(TRACE_OPTION, TRACE_HELP, None)]:
        assert flag is not None
        group.addoption(flag, dest=_dest(flag), default=None, help=text)
        parser.addini(_dest(flag), text, type=_ini_type(parse), default=None)  # type: ignore[arg-type]
    parser.addini(PRELOAD_INI, PRELOAD_HELP, type="linelist", default=[])
    group.addoption(STRICT_OPTION, dest=_dest(STRICT_OPTION), action="store_true", default=None, help=STRICT_HELP)
    parser.addini(_dest(STRICT_OPTION), STRICT_HELP, type="bool", default=False)


# pytest 9.2 takes a union of types for an ini key: a number key then takes
# text too, which the harness reads itself, as it reads the flag's (a seed
# in hex; its own error for a value that is no number, not Python's).
_INI_UNIONS = pytest.version_tuple >= (9, 2)


def _ini_type(parse: Any) -> Any:
    """The ini type of a key whose text form ``parse`` reads: a number where
    it is one (a TOML config gives numbers as numbers), or any text."""
    kind = INI_TYPES.get(parse, "string")
    if kind == "string" or not _INI_UNIONS:
        return kind
    return (int if kind == "int" else float) | str


class ForkserverCudaPytestWarning(pytest.PytestWarning, ForkserverCudaWarning):
    """A test module, conftest or rpc_preload module asked for CUDA at
    import, in the forkserver: it was not preloaded (each rank imports it)."""


class ControlLostPytestWarning(pytest.PytestWarning):
    """A world run under a controlled schedule lost control: a step blocked
    where the scheduler cannot see, and the world ran free from that step
    on, in an order its seed no longer decides. The message names the step,
    what control waited for and every rank's stacks."""


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(args: list[str]) -> None:
    # Before any conftest or test module can ask torch for CUDA: through NVML,
    # which does not initialize it, so this process and every forkserver it
    # starts stay fork-safe (rpc_harness._cuda_fork).
    ask_through_nvml()
    warn_as(ForkserverCudaPytestWarning)
    refuse_parallel_without_xdist(args)


def refuse_parallel_without_xdist(args: Sequence[str]) -> None:
    """``pytest -n 2`` where the ``[xdist]`` extra is not installed: pytest
    itself says only "unrecognized arguments: -n", with its whole usage
    (issue 38). Here, before pytest reads its arguments (``args`` holds the
    ini's addopts too), one line names what ``-n`` needs."""
    from .extras import installed

    for arg in args:
        if arg == "--":
            return
        if (arg.startswith("-n") or arg.split("=", 1)[0] == "--numprocesses") and not installed("xdist"):
            raise pytest.UsageError(f"{arg}: running tests in parallel needs pytest-xdist, which is not "
                                    "installed: pip install 'rpc-harness[xdist]'")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before Hypothesis's own configure, which loads --hypothesis-profile.
    try:
        from .strategies import register_profiles
    except ImportError:  # hypothesis is optional for users of the fixture alone
        pass
    else:
        register_profiles()
    config.addinivalue_line("markers", MARKER_HELP)
    from .interrupts import terminate_as_interrupt

    # A SIGTERMed session unwinds like Ctrl-C: worlds kill their ranks and
    # remove their folders. An xdist controller passes it on to its workers.
    controller = getattr(config, "workerinput", None) is None and bool(getattr(config.option, "numprocesses", None))
    terminate_as_interrupt(forward_to_children=controller)
    config.stash[_session_seed_key] = _session_seed(config)
    config.stash[_session_values_key] = _session_values(config)
    config.stash[_strict_key] = bool(_session_setting(config, STRICT_OPTION)[0])
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistSeedSharing(config), "rpc-harness-xdist")


class _XdistSeedSharing:
    """Hands the controller's session seed to every xdist worker, so that one
    ``--rpc-seed`` replays a whole ``-n auto`` session."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["rpc_harness_seed"] = self.config.stash[_session_seed_key]


def _session_setting(config: pytest.Config, flag: str) -> tuple[Any, str]:
    """A session setting and where it came from: the command line first
    (its text), then the ini file (a number where its key is typed so)."""
    raw = config.getoption(_dest(flag))
    if raw is not None:
        return raw, flag
    where = f"ini {_dest(flag)}"
    try:
        raw = config.getini(_dest(flag))
    except (ValueError, TypeError, pytest.UsageError) as error:  # not a number: pytest's words, not the key
        raw = _toml_list(config, _dest(flag)) if flag == DECLARED["devices"].flag else None
        if raw is None:
            raise pytest.UsageError(f"{where}: {error}") from None
    return (None if raw is None or raw == "" else raw), where


def _toml_list(config: pytest.Config, key: str) -> list[Any] | None:
    """A list given to ini key ``key`` in pytest's native TOML config
    (``[tool.pytest]``, ``pytest.toml``), read from the file: pytest checks
    a key's value against its one type, and rpc_devices is text
    (``cuda:0,cuda:1``) or a list (``["cuda:0", "cuda:1"]``). None: no such list."""
    path = config.inipath
    if path is None or path.suffix != ".toml":
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest reads TOML with tomli
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    table = data.get("tool", {}).get("pytest", {}) if path.name == "pyproject.toml" else data.get("pytest", {})
    value = table.get(key) if isinstance(table, dict) else None
    return value if isinstance(value, list) else None


def _command_line_flags(config: pytest.Config) -> list[tuple[str, str | None]]:
    """The world options given on this session's command line, as typed:
    a replay line without them would run other worlds (a free schedule for
    a controlled one, no fuzz)."""
    # ``-o rpc_fuzz=0.01`` sets an ini key from the command line: the line
    # carries it as its flag, as it would carry --rpc-fuzz=0.01.
    overrides = dict(item.split("=", 1) for item in config.getoption("override_ini", None) or () if "=" in item)
    flags: list[tuple[str, str | None]] = []
    for option in SESSION_OPTIONS.values():
        flag = option.flag or ""
        value = config.getoption(_dest(flag))
        if value is None:
            value = overrides.get(_dest(flag))
        if value is not None:
            flags.append((flag, str(value)))
    if config.getoption(_dest(STRICT_OPTION)):  # a lost control failed the test: so must its replay
        flags.append((STRICT_OPTION, None))
    return flags


def _session_seed(config: pytest.Config) -> int:
    from .errors import WorldSpecError
    from .options import check_seed
    from .seeds import fresh_seed

    workerinput = getattr(config, "workerinput", None)
    if workerinput and "rpc_harness_seed" in workerinput:
        return int(workerinput["rpc_harness_seed"])
    raw, where = _session_setting(config, SEED_OPTION)
    if raw is None:
        return fresh_seed()
    try:
        value: Any = raw if isinstance(raw, int) else int(raw, 0)
    except ValueError:
        value = raw  # not a number at all: the check names it, with the range, as for any seed
    try:
        return check_seed(value, where)
    except WorldSpecError as error:
        raise pytest.UsageError(str(error)) from None


def _session_values(config: pytest.Config) -> dict[str, tuple[Any, str]]:
    """The world options the command line (first) or the ini file set, as
    ``option -> (value, where)``; a bad value is a usage error at start-up,
    checked here once rather than failing every test that starts a world."""
    from .errors import WorldSpecError

    values = {}
    for name, option in SESSION_OPTIONS.items():
        raw, where = _session_setting(config, option.flag)  # type: ignore[arg-type]
        if raw is None:
            continue
        try:
            values[name] = (option.read(raw, where) if isinstance(raw, str) else option.check(raw, where), where)
        except WorldSpecError as error:
            raise pytest.UsageError(str(error)) from None
    # Whether this machine can run what the session asks of every world
    # (--rpc-devices cuda without CUDA, or beside --rpc-fuzz) is known now:
    # one usage error, not the same refusal in every test that starts a world.
    from .errors import Unsupported
    from .options import WorldOptions

    session = WorldOptions.from_values({name: value for name, (value, _) in values.items()}, where="session")
    try:
        session.check_here("session", sources={name: where for name, (_, where) in values.items()})
    except Unsupported as error:
        raise pytest.UsageError(str(error)) from None
    return values


@dataclass(frozen=True)
class Settings:
    """One world's options, each taken from the first of: the call's
    arguments, the test's ``rpc_world`` marker, the command line, the ini
    file; ``sources`` says where each came from (for error messages)."""

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(cls, call: Mapping[str, Any], marker: Mapping[str, Any], config: pytest.Config) -> Settings:
        session = config.stash[_session_values_key]
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for option in (*SHAPE, *DECLARED):  # the marker and the session only hold the ones they may
            if call.get(option) is not None:
                values[option], sources[option] = call[option], "argument"
            elif option in marker:
                values[option], sources[option] = marker[option], f"marker {MARKER}"
            elif option in session:
                values[option], sources[option] = session[option]
            else:
                values[option] = None
        return cls(values, sources)

    def get(self, option: str, default: Any = None) -> Any:
        value = self.values.get(option)
        return default if value is None else value

    def where(self, base: str) -> str:
        """``base``, plus which options came from elsewhere than the call."""
        other = [f"{option} from {source}" for option, source in self.sources.items() if source != "argument"]
        return f"{base} (with {', '.join(other)})" if other else base


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first world starts its forkserver: have it import pytest
    and the test modules whose tests use ``rpc_world`` (and ``rpc_preload``),
    which every rank running one of their entries would import otherwise
    (measured: a 4-rank world ~60 % slower without)."""
    from ._parent.launcher import preload, rewrite_asserts, unimportable
    from ._rank.asserts import session_rewriting

    modules = {item.module.__name__ for item in session.items
               if _runs_worlds(item) and getattr(item, "module", None) is not None}
    listed = []
    for name in session.config.getini(PRELOAD_INI):
        if (problem := unimportable(name)) is not None:
            # Only speed is lost (a rank imports what it needs itself), so a
            # warning, not an error: but a typo must not pass unseen.
            warnings.warn(pytest.PytestConfigWarning(
                f"ini {PRELOAD_INI}: {problem}; worlds start without it (a rank that needs it imports it itself)"),
                stacklevel=1)
        else:
            listed.append(name)
    preload("pytest", *sorted(modules), *listed)
    # Ranks rewrite asserts as this session does (the modules it rewrote
    # are known by now); the session before it (pytester's outer one) gets
    # its own back at the end.
    session.config.stash[_asserts_key] = rewrite_asserts(session_rewriting(session.config))


def pytest_sessionstart(session: pytest.Session) -> None:
    _keep_hypothesis_in_pytests_cache(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _asserts_key in config.stash:
        from ._parent.launcher import rewrite_asserts

        rewrite_asserts(config.stash[_asserts_key])
    global _hypothesis_placed_by
    if _hypothesis_placed_by is config:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(None)  # Hypothesis's own choice again
        _hypothesis_placed_by = None


def _keep_hypothesis_in_pytests_cache(config: pytest.Config) -> None:
    """Hypothesis keeps its example database and caches in ``.hypothesis/``
    of the current folder: the user's project (issue 38). Under the plugin
    they go to pytest's cache folder, as the traces do, unless
    HYPOTHESIS_STORAGE_DIRECTORY chose a place, pytest's cache is off, or a
    session around this one (pytester's outer one) has placed them already:
    Hypothesis's home is one per process."""
    global _hypothesis_placed_by
    if "hypothesis" not in sys.modules or getattr(config, "cache", None) is None:
        return  # imported by the plugin's profiles where it is installed at all
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or _hypothesis_placed_by is not None:
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(config.cache.mkdir(HYPOTHESIS_FOLDER))
    _hypothesis_placed_by = config


def pytest_report_header(config: pytest.Config) -> list[str]:
    seed = config.stash[_session_seed_key]
    return [f"rpc-harness: session seed {seed} (replay with {SEED_OPTION}={seed})", isolation_line()]


def isolation_line() -> str:
    """Once per session: whether worlds get a network namespace of their own,
    and if not why, and what that means."""
    from ._parent import netns as _netns
    from ._parent.launcher import ISOLATION_ENV, isolation_mode

    try:
        mode = isolation_mode()
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    if mode == "off":
        return (f"rpc-harness: worlds share the host's loopback ({ISOLATION_ENV}=off): "
                "other local users can reach their ranks, and RPC runs pickled code")
    ok, how = _netns.isolation_available()
    if ok:
        return f"rpc-harness: every world runs in a network namespace of its own ({how})"
    if mode == "require":
        raise pytest.UsageError(f"{ISOLATION_ENV}=require, but no network namespace can be made here: {how}")
    return (f"rpc-harness: worlds share the host's loopback, no network namespace can be made here ({how}): "
            "other local users can reach their ranks, and RPC runs pickled code")


class RpcWorld:
    """The ``rpc_world`` fixture: runs worlds for one test.

    ``rpc_world.run(entry, world_size=N, ...)`` takes the arguments of
    :func:`rpc_harness.run_world`; anything not given comes from the test's
    ``rpc_world`` marker, then the command line, then the ini file.
    """

    _fixture = "rpc_world"  # the fixture's name, as errors name it
    _reused = False  # whether its worlds are reused ones (their tokens replay in one)

    def __init__(self, request: pytest.FixtureRequest) -> None:
        __tracebackhide__ = True  # a bad marker: its message says what and where
        self._request = request
        self._config = request.config
        self.session_seed: int = request.config.stash[_session_seed_key]
        marker = request.node.get_closest_marker(MARKER)
        self._marker: dict[str, Any] = {}
        if marker is not None:
            if marker.args:
                raise pytest.UsageError(
                    f"{request.node.nodeid}: marker {MARKER} takes keyword arguments only ({', '.join(MARKER_KEYS)})"
                )
            unknown = sorted(set(marker.kwargs) - set(MARKER_KEYS))
            if unknown:
                raise pytest.UsageError(
                    f"{request.node.nodeid}: marker {MARKER} got unknown option(s) {unknown}; "
                    f"allowed: {', '.join(MARKER_KEYS)}"
                )
            self._marker = dict(marker.kwargs)
        # One list per test, whichever world fixtures it uses (rpc_world and a
        # reused one): its report sections, and its worlds' seeds by index.
        self.results: list[WorldResult] = request.node.stash.setdefault(_results_key, [])
        if getattr(request.config, "cache", None) is None and _traces_key not in request.config.stash:
            # No cache folder (-p no:cacheprovider): pytest's own temp folder,
            # which it prunes itself, rather than the user's working tree.
            factory = request.getfixturevalue("tmp_path_factory")
            request.config.stash[_traces_key] = str(factory.getbasetemp() / TRACE_FOLDER)

    @property
    def repro(self) -> str:
        """The pytest command that replays this test with the same seeds."""
        return _replay_line(self._request.config, [self._request.node.nodeid], self.session_seed)

    def seed_for(self, index: int) -> int:
        """The seed of this test's ``index``-th world (0-based)."""
        from .seeds import derive_seed

        return derive_seed(self.session_seed, self._request.node.nodeid, index)

    @takes_world_options
    def run(
        self,
        entry: Callable[..., Any] | str,
        world_size: int | None = None,
        *,
        names: Sequence[str] | str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        check: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        **options: Unpack[WorldArgs],
    ) -> WorldResult:
        """Run ``entry(ctx, *args, **kwargs)`` in a world and return its result;
        see :func:`rpc_harness.run_world`.

        A rank that calls ``pytest.skip()`` skips the test; with ``check=True``
        any unexpected rank failure fails it with every rank's report.
        """
        __tracebackhide__ = True
        return self._world(entry, "run", dict(options, world_size=world_size, names=names), args=args,
                           kwargs=kwargs, check=check, on_progress=on_progress)

    @takes_world_options
    def spawn(
        self,
        fn: Callable[..., Any] | str,
        args: Sequence[Any] = (),
        nprocs: int | None = None,
        *,
        kwargs: Mapping[str, Any] | None = None,
        names: Sequence[str] | None = None,
        check: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        **options: Unpack[WorldArgs],
    ) -> WorldResult:
        """Run ``fn(rank, *args, **kwargs)`` in ``nprocs`` processes, like
        ``torch.multiprocessing.spawn``, for a program that calls
        ``rpc.init_rpc`` and ``rpc.shutdown`` itself; see :func:`rpc_harness.spawn`.
        The guarantees and the report are those of :meth:`run`."""
        __tracebackhide__ = True
        return self._world(fn, "spawn", dict(options, world_size=nprocs, names=names), args=args,
                           kwargs=kwargs, check=check, on_progress=on_progress)

    def _world(self, entry: Any, how: str, call: dict[str, Any], *, args: Sequence[Any],
               kwargs: Mapping[str, Any] | None, check: bool, on_progress: Any) -> WorldResult:
        __tracebackhide__ = True
        from ._parent.launcher import raise_for_failures
        from .entry import import_folder
        from .repro import python_call, replaying, world_token
        from .spec import make_spec

        refuse_unknown({name: value for name, value in call.items() if name not in SHAPE},
                       where=f"{self._fixture}.{how}() in {self._request.node.nodeid}")
        settings = Settings.resolve(call, self._marker, self._config)
        options = {name: settings.get(name) for name in DECLARED}
        if options["seed"] is None:
            options["seed"] = self.seed_for(len(self.results))
        spec = make_spec(
            entry, settings.get("world_size"), names=settings.get("names"), args=args, kwargs=kwargs,
            spawned=how == "spawn", where=settings.where(f"{self._fixture}.{how}() in {self._request.node.nodeid}"),
            **options,
        )
        # What the forkserver imported before this world besides the entry's
        # module: the test module (its import-time setup), the ini's rpc_preload.
        preloaded = [*self._config.getini(PRELOAD_INI), self._request.module.__name__]
        modules = [(name, import_folder(name)) for name in dict.fromkeys(preloaded) if name in sys.modules]

        def replay_lines(spec: Any) -> str:
            ways = [self.repro]
            token = world_token(spec, path=import_folder(spec.entry.module), modules=modules, reused=self._reused)
            if token is not None:
                ways.append(token.command(deadline=spec.options.deadline))
            call = python_call(spec, modules=modules)
            if self._reused and not call.startswith("("):
                call += "  # in a fresh world, where no rule of a reused world is checked"
            ways.append(call)
            return "\n    or: ".join(ways)

        self._refuse(spec, settings.sources)
        spec = dataclasses.replace(spec, repro=replay_lines(spec))
        started = time.monotonic()
        try:
            # A world that a test timeout (pytest-timeout's signal method)
            # ends is reported too: every rank's stacks, the replay line.
            result = self._launch(spec, on_progress=on_progress, on_interrupted=self.results.append)
        except KeyboardInterrupt as interrupt:
            # pytest itself prints a bare KeyboardInterrupt and a frame of
            # the harness's: the session's summary names the world instead.
            self._config.stash.setdefault(_interrupted_key, []).append(interrupted_world(
                interrupt, self._request.node.nodeid, len(self.results), spec, time.monotonic() - started))
            raise
        if result.schedule:  # a controlled world: the token and the Python line take its steps exactly
            result.repro = replay_lines(replaying(spec, result.schedule))
        self.results.append(result)
        lost = self._control_lost(result, len(self.results) - 1)
        strict = self._config.stash[_strict_key]
        if lost and (not strict or not result.ok):  # a failure for other reasons: its report must still say so
            warnings.warn(ControlLostPytestWarning(lost), stacklevel=3)  # the line of the test that ran it
        skipped = result.skipped
        if skipped is not None and not result.failures and not result.timed_out:
            pytest.skip(f"{skipped.label}: {skipped.error}")
        if check:
            raise_for_failures(result)
        if lost and strict:
            from .errors import ControlLost

            raise ControlLost(result, f"{STRICT_OPTION}: {lost}\nReplay: {result.repro}")
        return result

    def _refuse(self, spec: Any, sources: Mapping[str, str]) -> None:
        """Raise for a world this fixture cannot run (``rpc_world`` runs any);
        ``sources`` says where each option came from."""

    def _launch(self, spec: Any, *, on_progress: Any, on_interrupted: Callable[[WorldResult], None]) -> WorldResult:
        """Run one world of this test: a fresh one (``rpc_world``)."""
        from ._parent.launcher import launch

        return launch(spec, on_progress=on_progress, on_interrupted=on_interrupted)

    def _control_lost(self, result: WorldResult, index: int) -> str:
        """What to say of a world that lost control ("" for one that did not):
        it must not pass silently."""
        if result.control_lost_at is None:
            return ""
        return (f"{self._request.node.nodeid}: rpc world {index} (seed {result.seed}, schedule "
                f"{result.schedule_label}) lost control at step {result.control_lost_at} and ran free from "
                f"there: its order of steps is no longer the seed's.\n{result.schedule_note}")


class ReusedRpcWorld(RpcWorld):
    """The ``rpc_world_module`` and ``rpc_world_session`` fixtures: ``run``
    as ``rpc_world``'s, each entry in the live world of its shape (size,
    names, options) that the module or session keeps, checked clean after
    it (see ``rpc_harness._parent.live``), a controlled schedule's too (from the
    entry's start to its return). Worlds these cannot run (fuzzing, message
    faults, ``spawn``) are refused, by name."""

    def __init__(self, request: pytest.FixtureRequest, pool: Any, scope: str) -> None:
        __tracebackhide__ = True
        super().__init__(request)
        self._pool = pool
        self._fixture = f"rpc_world_{scope}"
        self._reused = True

    def _refuse(self, spec: Any, sources: Mapping[str, str]) -> None:
        __tracebackhide__ = True
        from ._parent.live import refusal
        from .errors import WorldSpecError

        refused = refusal(spec)
        if refused is None:
            return
        option, reason = refused
        where = sources.get(option, "argument")
        # A session's flag or ini key applies to every world, reused ones
        # too: the error names it, or it reads as the test's own doing.
        given = "" if where == "argument" else f" (set by {where})"
        instead = f", or run it without {where}" if where.startswith(("--", "ini ")) else ""
        raise WorldSpecError(f"{self._fixture} in {self._request.node.nodeid}: {reason}{given}: it cannot run in a "
                             f"reused world; use the rpc_world fixture for this test{instead}")

    def _launch(self, spec: Any, *, on_progress: Any, on_interrupted: Callable[[WorldResult], None]) -> WorldResult:
        before = self._pool.history(spec)
        if before:
            # What a failure that needs an earlier entry's leftovers (beyond
            # the rules checked) replays with: the same entries, in order.
            shown = before[-_REPLAY_ENTRIES:]
            which = ("the entry" if len(before) == 1 else f"the {len(before)} entries" if len(shown) == len(before)
                     else f"the last {len(shown)} of the {len(before)} entries")
            line = _replay_line(self._config, [*shown, self._request.node.nodeid], self.session_seed)
            spec = dataclasses.replace(spec, repro=f"{spec.repro}\n    or, after {which} its world ran before it: {line}")
        return self._pool.run(spec, self._request.node.nodeid, on_progress=on_progress,
                              on_interrupted=on_interrupted)


_REPLAY_ENTRIES = 10  # earlier entries a reused world's replay line names at most


@pytest.fixture
def rpc_world(request: pytest.FixtureRequest) -> RpcWorld:
    """Bring up real multi-process torch.distributed.rpc worlds in this test."""
    __tracebackhide__ = True
    return RpcWorld(request)


def _pool() -> Iterator[Any]:
    """A pool of live worlds, every one closed when its scope ends (an
    interrupted session too: pytest tears fixtures down on Ctrl-C, which a
    SIGTERM becomes; ranks die with this process whatever happens)."""
    from ._parent.live import WorldPool

    pool = WorldPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def _rpc_world_pool_module() -> Iterator[Any]:
    yield from _pool()


@pytest.fixture(scope="session")
def _rpc_world_pool_session() -> Iterator[Any]:
    yield from _pool()


@pytest.fixture
def rpc_world_module(request: pytest.FixtureRequest, _rpc_world_pool_module: Any) -> RpcWorld:
    """``rpc_world``'s ``run``, each entry in a live world this test module
    keeps per world shape, checked clean between entries."""
    __tracebackhide__ = True
    return ReusedRpcWorld(request, _rpc_world_pool_module, "module")


@pytest.fixture
def rpc_world_session(request: pytest.FixtureRequest, _rpc_world_pool_session: Any) -> RpcWorld:
    """``rpc_world``'s ``run``, each entry in a live world this session (or
    xdist worker) keeps per world shape, checked clean between entries."""
    __tracebackhide__ = True
    return ReusedRpcWorld(request, _rpc_world_pool_session, "session")


# The fixtures that run worlds in a test.
WORLD_FIXTURES = ("rpc_world", "rpc_world_module", "rpc_world_session")


def _runs_worlds(item: Any) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in WORLD_FIXTURES)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    results = item.stash.get(_results_key, None)
    if results and call.when == "call" and not report.failed:
        # A test that passed in a reused world brought up anew says why (-rP shows it).
        rebuilt = [result.reuse for result in results if "the one before ended" in result.reuse]
        if rebuilt:
            report.sections.append(("rpc-harness reused world", "\n".join(rebuilt)))
    if not results or not report.failed or call.when != "call":
        return
    # Only failed worlds, and only the last few: a Hypothesis test runs many,
    # and the final, shrunk example is the one that matters.
    failed = [(index, result) for index, result in enumerate(results) if not result.ok]
    raised = getattr(call.excinfo.value, "result", None) if call.excinfo is not None else None
    for index, result in failed[-_MAX_WORLD_SECTIONS:]:
        prefix = f"rpc world {index} " if len(results) > 1 else "rpc "
        for rank in result.ranks:
            text = rank.output.rstrip()
            # The failure's own message (WorldFailed: the world's report)
            # holds its stacks already: a section repeats only its output.
            if rank.stacks and result is not raised:
                from ._parent.stacks import readable_stacks, show_harness_frames

                when = "at the deadline" if result.timed_out else "when the world was stopped"
                stacks = readable_stacks(rank.stacks, harness_frames=show_harness_frames())[0]
                text += f"\n--- stacks {when}\n{stacks.rstrip()}"
            if text.strip():
                report.sections.append((f"{prefix}{rank.label} [{rank.status}]", text))
        written = _write_trace(item, index, result)
        if isinstance(written, str):
            report.sections.append((f"{prefix}trace", written))
        else:
            trace, timeline = written
            report.sections.append((f"{prefix}trace", f"Chrome trace (open in Perfetto): {trace}\n"
                                                      f"Timeline picture: {timeline}"))
    report.sections.append(("rpc-harness replay", _pytest_line_of(item) + _hypothesis_note(item)))


def interrupted_world(interrupt: KeyboardInterrupt, nodeid: str, index: int, spec: Any, elapsed: float) -> str:
    """What the session's summary says of a world that Ctrl-C (or SIGTERM)
    stopped: its test, ranks and age, and its replay lines."""
    names = list(spec.names)
    ranks = ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, ..., {names[-1]}"
    what = "SIGTERM" if str(interrupt) == "SIGTERM" else "Ctrl-C"
    return (f"{what} stopped rpc world {index} of {nodeid} after {elapsed:.1f} s: {len(names)} ranks ({ranks}), "
            f"seed {spec.seed}\nReplay: {spec.repro}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    interrupted = config.stash.get(_interrupted_key, [])
    if interrupted:
        terminalreporter.write_sep("!", "rpc-harness: interrupted")
        for text in interrupted:
            terminalreporter.write_line(text)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workerinput = getattr(session.config, "workerinput", None)
    interrupted = session.config.stash.get(_interrupted_key, [])
    if workerinput is not None and interrupted:
        # An xdist worker has no terminal summary, and its controller,
        # interrupted too, does not wait for its reports: its stderr is the
        # terminal's.
        worker = workerinput.get("workerid", "worker")
        sys.stderr.write("".join(f"\n[{worker}] rpc-harness: {text}\n" for text in interrupted))
        sys.stderr.flush()


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's thread method ends the process (``os._exit``) with
    the stacks of pytest's own threads: a test with worlds gets its ranks'
    stacks and replay lines printed first. The timer is pytest-timeout's
    own otherwise (its signal method is reported through the fixture)."""
    if settings.method != "thread" or not _runs_worlds(item):
        return None
    import threading

    timer = threading.Timer(settings.timeout, _thread_timeout, (item, settings))
    timer.name = f"rpc-harness timeout {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined] - pytest-timeout's cancel hook calls it
    timer.start()
    return True


def _thread_timeout(item: pytest.Item, settings: Any) -> None:
    from pytest_timeout import timeout_timer

    from ._parent.launcher import stacks_of_running_worlds

    terminal = item.config.get_terminal_writer()
    try:
        capman = item.config.pluginmanager.getplugin("capturemanager")
        if capman:
            capman.suspend_global_capture(item)
        worlds = stacks_of_running_worlds()
        for text in worlds:  # each ends with its replay lines
            terminal.sep("+", title="Timeout: rpc world")
            terminal.write(text + "\n")
        if not worlds:  # between worlds: the test's own line
            terminal.write(f"rpc-harness replay: {_pytest_line_of(item)}\n")
    except Exception:  # noqa: BLE001 - pytest-timeout's own report and exit must still come
        import traceback

        traceback.print_exc()
    finally:
        terminal.flush()
        timeout_timer(item, settings)  # its stacks of this process, then os._exit(1)


def _hypothesis_note(item: pytest.Item) -> str:
    """For a Hypothesis test, how its failing example comes back: the seed
    replays the worlds, but which examples Hypothesis draws is its own
    (fresh each run, unless derandomized). It replays a failure it found from
    its database (in pytest's cache folder) first, on this machine; elsewhere the
    world's token, or Hypothesis's own ``@reproduce_failure`` line, does."""
    hypothesis = sys.modules.get("hypothesis")  # a test that is one has imported it
    if hypothesis is None or not hypothesis.is_hypothesis_test(getattr(item, "obj", None)):
        return ""
    return ("\n(a Hypothesis test: this line finds the failing example again where Hypothesis's database "
            "(in pytest's cache folder) holds it, as on this machine; elsewhere, replay the failed world's token "
            "above, or add the @reproduce_failure Hypothesis printed)")


def _pytest_line_of(item: pytest.Item) -> str:
    return _replay_line(item.config, [item.nodeid], item.config.stash[_session_seed_key])


def _replay_line(config: pytest.Config, nodeids: list[str], seed: int) -> str:
    """The pytest line that replays ``nodeids`` in order, typed where this
    session was started: node ids are relative to the rootdir, which may be
    above that folder (pytest run from a project's subfolder, or from a
    monorepo's root with the project's path)."""
    from .repro import pytest_line

    # Both fixed for the session, and asked for by every world (an entry of
    # a reused world takes milliseconds: its lines are part of its cost).
    typed, flags = config.stash.get(_typed_key, None), config.stash.get(_flags_key, None)
    if typed is None:
        typed = config.stash[_typed_key] = {}
    if flags is None:
        flags = config.stash[_flags_key] = _command_line_flags(config)
    for nodeid in nodeids:
        if nodeid not in typed:
            typed[nodeid] = _from_invocation(config, nodeid)
    return pytest_line([typed[nodeid] for nodeid in nodeids], seed, flags)


def _from_invocation(config: pytest.Config, nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    typed = os.path.relpath(config.rootpath / path, config.invocation_params.dir)
    return typed.replace(os.sep, "/") + sep + rest


def _default_trace_folder(config: pytest.Config) -> str:
    """Where traces go unless ``--rpc-trace-dir`` says: pytest's cache
    folder, as pytest keeps its own files (``.pytest_cache``, which ignores
    itself in git), not a folder of ours in the user's repository."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return str(cache.mkdir(TRACE_FOLDER))
    return config.stash[_traces_key]


def _write_trace(item: pytest.Item, index: int, result: WorldResult) -> tuple[str, str] | str:
    """Write the failing world's Chrome trace and its SVG picture: their
    paths, or why they could not be written (the report has everything else)."""
    import re

    from .timeline import write_timeline
    from .trace import write_trace

    folder = _session_setting(item.config, TRACE_OPTION)[0] or ""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")[:150]
    try:
        folder = folder or _default_trace_folder(item.config)  # pytest's cache folder is made here
        path = os.path.join(folder, f"{name}.world{index}")
        trace = write_trace(result, path + ".trace.json")
        timeline = write_timeline(trace, path + ".timeline.svg", title=item.nodeid)
    except OSError as error:
        return (f"no trace or timeline picture: {error.strerror or error} ({error.filename or folder}); "
                f"choose a writable folder with {TRACE_OPTION} or the ini's rpc_trace_dir")
    return trace, timeline
