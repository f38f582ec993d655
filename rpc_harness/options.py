"""World options, each declared once.

A world option (its seed, deadline, fault plan, fuzz, ...) reaches a world
through several doors: an argument of ``run_world``/``spawn`` and of the
fixture's ``run``/``spawn``, the ``rpc_world`` marker, a pytest flag and ini
key, an ``rpc-harness run`` flag, a replay token. Each option is one field
of :class:`WorldOptions`; its metadata says which doors it has, how its text
form is read, how its value is checked (one check, whatever the door, with
the door named in the error) and how it is written back into a replay line.
Everything else reads this declaration: ``spec.make_spec``, the plugin's
options, markers and settings, ``repro``'s tokens and Python lines, and the
CLI. Adding an option is one field here plus its use in the rank; the public
signatures name it too, and a unit test keeps them equal to the fields.

Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from .durations import EXAMPLES, parse_seconds
from .entry import EntryRef
from .errors import WorldSpecError, clip
from .faults import FaultPlan
from .seeds import MAX_SEED, fresh_seed

if TYPE_CHECKING:
    from .schedule import ScheduleSpec

DEFAULT_DEADLINE = 60.0  # seconds the entries may run, counted from when every rank has joined
# rpc-harness run and the torchrun runner: whole training runs, minutes long.
COMMAND_LINE_DEADLINE = 300.0
DEFAULT_RPC_TIMEOUT = 60.0  # seconds an RPC waits for its answer (torch's own default)
# The longest budget any option takes: a week. Larger values mean "never"
# to a user and overflow torch's millisecond timeouts; inf and nan pass no check.
MAX_SECONDS = 7 * 24 * 3600.0
MAX_FUZZ = 1.0  # seconds: the largest seeded delay of schedule fuzzing
# Measured here (2 cores, 24 GB): 512 ranks up and down in 20 s and 7.5 GB
# (the bench's median; 31 s for one world under a soft limit of 1,024 open
# files), through the store's rendezvous (_rendezvous) and with that limit
# raised (_limits).
MAX_WORLD_SIZE = 512
# Worlds with message faults or fuzzing run torch's faulty agent, which cannot
# leave TensorPipe's shared-memory transport: its AF_UNIX backlog of 128 takes
# 4 connections a rank when every rank reaches one at once (graceful
# shutdown's all-gather), so 34 ranks and more fail.
MAX_FAULTY_WORLD_SIZE = 33


def default_bringup(world_size: int) -> float:
    """Seconds a world of ``world_size`` ranks may take to come up (every rank
    forked and through init_rpc) before it fails as a bring-up failure:
    60 s, and more for large worlds (0.5 s a rank: 256 s at 512 ranks, which
    came up in well under a minute here)."""
    return max(60.0, 0.5 * world_size)


# -- the checks, one per kind of value -------------------------------------------------


def _as_seconds(value: Any) -> Any:
    """A duration's text form read as seconds (any door may give one:
    a marker's ``deadline="10s"`` as much as a flag's); other values as
    they are, for the check to judge, and text that is no duration too."""
    if isinstance(value, str):
        try:
            return parse_seconds(value)
        except ValueError:
            return value
    return value


def check_seconds(what: str) -> Callable[[Any, str], float]:
    """A check for a number of seconds (or its text form, like ``10s``):
    finite, > 0, at most a week."""

    def check(given: Any, where: str) -> float:
        value = _as_seconds(given)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not (
            0 < value <= MAX_SECONDS
        ):
            raise WorldSpecError(f"{where}: invalid {what} {clip(given)}; use seconds > 0 (at most "
                                 f"{MAX_SECONDS:g}), like {EXAMPLES}")
        return float(value)

    return check


def check_seed(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise WorldSpecError(f"{where}: invalid seed {clip(value)}; use a whole number 0..2**63-1")
    return value


def check_fuzz(given: Any, where: str) -> float:
    value = _as_seconds(given)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_FUZZ:
        raise WorldSpecError(f"{where}: invalid fuzz {clip(given)}; use the largest delay in seconds, "
                             f"0..{MAX_FUZZ:g}, like 0.01 or 10ms")
    return float(value)


def check_faults(value: Any, where: str) -> FaultPlan:
    return FaultPlan.coerce(value, where=f"{where}: faults")


def check_failpoints(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(p, str) for p in value):
        raise WorldSpecError(f"{where}: failpoints must be a list of failpoint names, got {clip(value)}")
    return tuple(value)


def check_env(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, tuple) and all(isinstance(pair, tuple) and len(pair) == 2 for pair in value):
        value = dict(value)  # the checked form itself
    if not isinstance(value, Mapping):
        raise WorldSpecError(f"{where}: env must map str to str, got {type(value).__name__}")
    for key, text in value.items():
        if not isinstance(key, str) or not isinstance(text, str):
            raise WorldSpecError(f"{where}: env must map str to str, got {clip(key)}: {clip(text)}")
    threads = value.get("OMP_NUM_THREADS")
    if threads is not None and not (threads.isascii() and threads.isdigit() and int(threads) >= 1):
        raise WorldSpecError(f"{where}: env OMP_NUM_THREADS={clip(threads)} is not a positive whole number")
    return tuple(sorted(value.items()))


def check_isolate(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise WorldSpecError(f"{where}: isolate must be True, False or None, got {clip(value)}")
    return value


# How a world's ranks meet in init_rpc (rpc_harness.rpc.rendezvous): through the
# world's store, or through the Gloo group torch builds for it.
RENDEZVOUS = {
    "store": "the default: the world's store does what torch's Gloo group does in init_rpc",
    "gloo": "torch's own: a Gloo group over every pair of ranks",
}


def _one_of(what: str, choices: dict[str, str], value: Any, where: str) -> str:
    """``value`` if it is one of ``choices`` (name -> what it means), which
    the error lists otherwise."""
    if value not in choices:
        raise WorldSpecError(f"{where}: invalid {what} {clip(value)}; use one of: "
                             + "; ".join(f"{name!r} ({meaning})" for name, meaning in choices.items()))
    return value


def check_rendezvous(value: Any, where: str) -> str:
    return _one_of("rendezvous", RENDEZVOUS, value, where)


# The default process group a world's ranks bring up on the world's store
# before the RPC agent (rpc_harness.c10d.group), if any.
PROCESS_GROUPS = {
    "gloo": "on the CPU (and CUDA tensors)",
    "nccl": "one GPU a rank",
}


def check_process_group(value: Any, where: str) -> str:
    return _one_of("process_group", PROCESS_GROUPS, value, where)


def check_rpc(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise WorldSpecError(f"{where}: rpc must be True or False (yes or no in a flag or an ini key), "
                             f"got {clip(value)}")
    return value


_YES, _NO = ("yes", "true", "on", "1"), ("no", "false", "off", "0")


def parse_yes_no(text: str) -> bool | str:
    """A yes/no of the text doors; anything else is left for the check to refuse."""
    word = text.strip().lower()
    return True if word in _YES else False if word in _NO else text


def check_setup(value: Any, where: str) -> EntryRef:
    """A function every rank calls with no arguments before its entry."""
    if isinstance(value, EntryRef):
        return value
    ref = EntryRef.of(value, where=f"{where}: setup")
    function = value if callable(value) else ref.load(where=f"{where}: setup") if ref.main_file is None else None
    try:
        inspect.signature(function).bind() if function is not None else None
    except TypeError:
        raise WorldSpecError(f"{where}: setup {ref} must be callable with no arguments") from None
    except ValueError:  # a builtin without a signature: nothing to check
        pass
    return ref


_CUDA_INDEX = re.compile(r"cuda:(0|[1-9][0-9]{0,3})")


def check_devices(value: Any, where: str) -> tuple[str, ...]:
    """The world's devices: ``cpu`` (the default, as ``()``), ``cuda`` (rank
    r gets ``cuda:(r mod device_count)``), or a list of ``cuda:N`` that the
    ranks take round-robin. Text forms: ``cpu``, ``cuda``, ``cuda:0,cuda:1``.
    No devices at all (``()``, ``[]``, an empty text) is the CPU too: it is
    what this check makes of ``cpu`` and what a token holds for it, and every
    check reads back its own values (the ini file's ``cpu`` is checked at
    start-up and again in each world)."""
    if isinstance(value, Sequence) and len(value.strip() if isinstance(value, str) else value) == 0:
        return ()
    items = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if isinstance(items, str) or not isinstance(items, Sequence) or not all(
            isinstance(item, str) for item in items):
        raise WorldSpecError(f"{where}: invalid devices {clip(value)}; use cpu, cuda, or a list of cuda:N")
    if list(items) == ["cpu"]:
        return ()
    if list(items) == ["cuda"]:
        return ("cuda",)
    bad = [item for item in items if not _CUDA_INDEX.fullmatch(item)]
    if bad:
        raise WorldSpecError(f"{where}: invalid devices {clip(', '.join(bad))}; use cpu, cuda, "
                             "or a list of cuda:N (cpu and cuda stand alone)")
    return tuple(items)


def devices_here(devices: tuple[str, ...], options: WorldOptions, where: str) -> None:
    """Whether this machine can give a world ``devices``: CUDA there, the
    indices there, and no faulty agent (message faults, fuzz), whose options
    take no device maps (``_devices.require_world_devices``). Asked through
    NVML: the process stays fork-safe."""
    from . import _devices
    from .faults import uses_faulty_agent

    _devices.require_world_devices(devices, where=where, faulty_agent=uses_faulty_agent(options.faults, options.fuzz))


def process_group_here(backend: str, options: WorldOptions, where: str) -> None:
    """Whether this machine can bring up ``backend``: nccl needs CUDA (one
    GPU a rank, which the world's size decides: ``spec.make_spec`` checks it)."""
    if backend == "nccl":
        from . import _devices

        _devices.require_nccl_devices(options.devices, None, where=where)


def check_schedule(value: Any, where: str) -> str:
    from .schedule import parse

    parsed = parse(value, where=where)  # refused here, naming where, before anything else reads it
    text = value.strip()
    _remember(text, parsed)
    return text


# What a test may say it expects of a world beyond the defaults (``expect=``).
EXPECTATIONS = {
    "unfinished": "a planned kill may end a spawned program: no surviving rank need run its own part past it",
    # None is "not given" at every door, so a call's expect=None leaves the
    # marker's in force: this is how a call takes it back.
    "nothing": "nothing beyond the defaults, whatever the test's rpc_world marker expects",
}


def check_expect(value: Any, where: str) -> str | None:
    expected = _one_of("expect", EXPECTATIONS, value, where)
    return None if expected == "nothing" else expected


def parse_whole(text: str) -> int:
    return int(text, 0)


def whole_number(text: str) -> int:
    """``int(text)`` with a message fit to show: the text cut, and the true
    reason when the digits are more than Python reads (its int max str
    digits, 4300 by default): ``int()`` itself calls a 5,000-digit number
    "not a valid int"."""
    try:
        return int(text)
    except ValueError:
        digits = text.strip().lstrip("+-").replace("_", "")
        limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
        if digits.isascii() and digits.isdigit() and limit and len(digits) > limit:
            raise ValueError(f"a whole number of {len(digits):,} digits, past the {limit} digits Python reads "
                             "as an int (sys.set_int_max_str_digits)") from None
        raise ValueError(f"{clip(text)} is not a valid int") from None


# pytest's ini types of the text forms that are numbers (pytest >= 8.4): a
# TOML config then gives the number itself.
INI_TYPES: dict[Callable[[str], Any], str] = {parse_seconds: "float", parse_whole: "int"}


# -- the declaration -------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """How one world option is read, checked and written back.

    ``check(value, where)`` returns the value to use (normalised: a plan from
    its text, a tuple from a list) or raises :class:`WorldSpecError` naming
    ``where``; it is given None never (None means "the default").
    ``parse`` reads the text form (a command line, an ini file) before the
    check. ``plain`` turns a value into the plain data a token and a Python
    replay line hold, which ``check`` reads back. ``here(value, options,
    where)`` is whether this machine can run a world with the (checked, not
    default) value, among the world's other ``options``: it raises
    :class:`~rpc_harness.errors.Unsupported` saying why not, naming ``where``.
    It is not part of ``check``: a token made on a GPU machine decodes on any
    machine, and is refused only when it is run where it cannot be. Every
    door calls it through :meth:`WorldOptions.check_here`, before any
    process starts.
    """

    help: str
    check: Callable[[Any, str], Any]
    parse: Callable[[str], Any] | None = None
    flag: str | None = None  # the pytest flag; its ini key is the flag's name with underscores
    marker: bool = False  # a key of the rpc_world marker
    token: str | None = None  # the field of replay tokens that carries it
    command_line: str | None = None  # the rpc-harness run flag
    plain: Callable[[Any], Any] = lambda value: value
    here: Callable[[Any, WorldOptions, str], None] | None = None

    @property
    def ini(self) -> str | None:
        return self.flag.removeprefix("--").replace("-", "_") if self.flag else None

    @property
    def ini_type(self) -> str:
        """The type of its ini key for pytest's ``addini``: what its text
        form is (a TOML config then takes the number itself)."""
        return INI_TYPES.get(self.parse, "string")  # type: ignore[arg-type]

    def read(self, text: str, where: str) -> Any:
        """The checked value of the text form (command line, ini file); an
        error shows the text as it was typed."""
        assert self.parse is not None
        try:
            return self.check(self.parse(text.strip()), where)
        except (ValueError, WorldSpecError):
            return self.check(text, where)  # refused again, naming what was typed


# Each schedule text's parsed value, made once (by its check) and read by
# every part of the world: the launcher, the supervisor, live worlds.
_SCHEDULES: dict[str, ScheduleSpec] = {}


def _remember(text: str, parsed: ScheduleSpec) -> None:
    if len(_SCHEDULES) >= 256:  # an exploration's replays and guides are many, each used by one world
        _SCHEDULES.clear()
    _SCHEDULES[text] = parsed


def _parsed_schedule(text: str) -> ScheduleSpec:
    if text not in _SCHEDULES:  # options made without their checks, or forgotten
        from .schedule import parse

        _remember(text, parse(text))
    return _SCHEDULES[text]


def option(default: Any, **declaration: Any) -> Any:
    return field(default=default, metadata={"option": Option(**declaration)})


@dataclass(frozen=True)
class WorldOptions:
    """Every world option, checked. Built by :meth:`from_values`."""

    seed: int | None = option(
        None, check=check_seed, parse=parse_whole, marker=True, token="seed", command_line="--seed",
        help="root seed of the world: data, model, sampling and fault schedules derive from it (default: random)")
    deadline: float = option(
        DEFAULT_DEADLINE, check=check_seconds("deadline"), parse=parse_seconds, flag="--rpc-deadline", marker=True,
        command_line="--deadline",
        help="deadline in seconds of each RPC world, counted from when every rank has joined; a world still "
             f"running then fails with every rank's stacks (default: {DEFAULT_DEADLINE:g})")
    bringup: float | None = option(
        None, check=check_seconds("bring-up budget"), parse=parse_seconds, flag="--rpc-bringup", marker=True,
        help="bring-up budget in seconds of each RPC world: every rank forked and through init_rpc "
             "(default: 60, or 0.5 s a rank for larger worlds); the deadline counts from its end")
    rpc_timeout: float | None = option(
        None, check=check_seconds("rpc_timeout"), parse=parse_seconds, flag="--rpc-call-timeout", marker=True,
        token="t",
        help=f"seconds an RPC waits for its answer in the worlds' ranks (default: {DEFAULT_RPC_TIMEOUT:g}, "
             "torch's own, or a spawned program's own)")
    faults: FaultPlan = option(
        FaultPlan(), check=check_faults, parse=str, marker=True, token="f", command_line="--faults", plain=str,
        help="fault plan, e.g. kill:trainer2@trainer.step#3")
    failpoints: tuple[str, ...] | None = option(
        None, check=check_failpoints, token="fp", plain=list,
        help="the failpoints a fault plan may name (checked before any process starts)")
    fuzz: float = option(
        0.0, check=check_fuzz, parse=parse_seconds, flag="--rpc-fuzz", marker=True, token="z", command_line="--fuzz",
        help="schedule fuzzing: largest seeded random delay in seconds at failpoints and message sends "
             "(default: 0, off)")
    env: tuple[tuple[str, str], ...] = option(
        (), check=check_env, token="env", plain=dict,
        help="environment variables set in every rank before its program runs")
    isolate: bool | None = option(
        None, check=check_isolate,
        help="a network namespace of the world's own: None where possible, True or error, False never")
    rendezvous: str = option(
        "store", check=check_rendezvous, parse=str, flag="--rpc-rendezvous", marker=True, token="rv",
        help="how the ranks meet in init_rpc: store (the default: the world's store gathers the device maps and "
             "is the barrier, for which torch builds a Gloo group over every pair of ranks) or gloo (torch's own "
             "group); the agent and every RPC are torch's either way")
    schedule: str = option(
        "free", check=check_schedule, parse=str, flag="--rpc-schedule", marker=True, token="sch",
        command_line="--schedule",
        help="the order of the world's steps: free (the operating system's), controlled or random (the seed "
             "chooses each step uniformly), pct or pct:DEPTH (PCT), or replay:... (a recorded schedule)")
    devices: tuple[str, ...] = option(
        (), check=check_devices, parse=str, flag="--rpc-devices", marker=True, token="dev", plain=",".join,
        command_line="--device", here=devices_here,
        help="the ranks' devices: cpu (the default), cuda (rank r gets cuda:(r mod device_count), set as its "
             "current device and ctx.device; a run world's ranks get device maps to every peer), or a list "
             "cuda:0,cuda:1 taken round-robin; refused before any process starts where CUDA is not available")
    setup: EntryRef | None = option(
        None, check=check_setup, token="su", plain=str,
        help="a module-level function (or 'package.module:function') that every rank calls with no arguments "
             "before its entry or program: setup that must reach the ranks, which are forked from a forkserver "
             "and see no patch made in the test process")
    process_group: str | None = option(
        None, check=check_process_group, parse=str, flag="--rpc-process-group", marker=True, token="pg",
        command_line="--process-group", here=process_group_here,
        help="a default process group every rank brings up on the world's store before its RPC agent and its "
             "entry (ctx.group): gloo (CPU, and CUDA tensors) or nccl (one GPU a rank; refused before any process "
             "starts where the GPUs are fewer than the ranks); default: none")
    rpc: bool = option(
        True, check=check_rpc, parse=parse_yes_no, flag="--rpc-agent", marker=True, token="rpc",
        command_line="--rpc", plain=bool,
        help="whether every rank joins the RPC world (init_rpc) before its entry: yes (the default) or no, for a "
             "world of collectives only (process_group given)")
    expect: str | None = option(
        None, check=check_expect, parse=str, marker=True, token="ex",
        help="what the world may do that would otherwise fail it: 'unfinished' (a planned kill may end a spawned "
             "program, so that no surviving rank runs its own part of it past the kill), or 'nothing' (the "
             "default; a call's expect='nothing' takes back its rpc_world marker's, which expect=None leaves)")

    @property
    def placed_devices(self) -> tuple[str, ...]:
        """Where the ranks live: the option ``devices``, or one GPU a rank
        (``cuda``) for an nccl group, which needs it."""
        return self.devices or (("cuda",) if self.process_group == "nccl" else ())

    @property
    def schedule_spec(self) -> ScheduleSpec:
        """The ``schedule`` option as the one typed value every part of the
        world reads (checked already, so it parses; parsed once per text)."""
        return _parsed_schedule(self.schedule)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], *, where: str) -> WorldOptions:
        """Check every value given (None: the default) and fill in the rest.
        A seed left to chance is drawn here, once."""
        refuse_unknown(values, where=where)
        checked = {}
        for name, value in values.items():
            if value is not None:
                checked[name] = DECLARED[name].check(value, where)
        if checked.get("seed") is None:
            checked["seed"] = fresh_seed()
        return cls(**checked)

    def check_here(self, where: str, *, sources: Mapping[str, str] | None = None) -> None:
        """Refuse (:class:`~rpc_harness.errors.Unsupported`) what this machine
        cannot run: each option's ``here`` check, for every option not left
        at its default, naming ``sources[name]`` (where the value came from)
        or ``where``."""
        for name, value in self.given():
            here = DECLARED[name].here
            if here is not None:
                here(value, self, (sources or {}).get(name, where))

    def given(self) -> Iterator[tuple[str, Any]]:
        """``(name, value)`` of every option that is not its default, in declaration order."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                yield f.name, value


DECLARED: dict[str, Option] = {f.name: f.metadata["option"] for f in dataclasses.fields(WorldOptions)}
NAMES: tuple[str, ...] = tuple(DECLARED)
# The world's shape: not options, but the marker and the doors take them too.
SHAPE = ("world_size", "names")
MARKER_KEYS: tuple[str, ...] = SHAPE + tuple(name for name, option in DECLARED.items() if option.marker)


class WorldArgs(TypedDict, total=False):
    """The world options as the doors take them (``run_world``, ``spawn``,
    ``run_scenario``, the fixture's ``run`` and ``spawn``), each None or
    left out for its default: ``**options: Unpack[WorldArgs]`` (PEP 692), so
    that an editor and a type checker see every option and its type. One
    key per field of :class:`WorldOptions`, in its order (a unit test keeps
    them equal); :func:`takes_world_options` writes them into the door's
    runtime signature for ``help()`` and the API docs."""

    seed: int | None
    deadline: float | str | None  # a duration: seconds, or text like "10s" or "200ms"
    bringup: float | str | None
    rpc_timeout: float | str | None
    faults: FaultPlan | str | None
    failpoints: Sequence[str] | None
    fuzz: float | str | None
    env: Mapping[str, str] | None
    isolate: bool | None
    rendezvous: str | None
    schedule: str | None
    devices: Sequence[str] | str | None
    setup: Callable[[], Any] | str | None
    process_group: str | None
    rpc: bool | None
    expect: str | None


Door = TypeVar("Door", bound=Callable[..., Any])  # the door itself, its typed signature kept for type checkers


def refuse_unknown(values: Mapping[str, Any], *, where: str) -> None:
    """A keyword that is no world option (a door's ``**options`` takes any
    name: ``deadlin=5`` is refused here, not dropped)."""
    unknown = sorted(set(values) - set(NAMES))
    if unknown:
        raise WorldSpecError(f"{where}: unknown world option(s) {unknown}; world options: {', '.join(NAMES)}")


def takes_world_options(door: Door) -> Door:
    """Mark ``door``, whose last parameter is ``**options:
    Unpack[WorldArgs]``: its signature as ``inspect`` (``help()``, the API
    docs, IPython) reads it names every world option as a keyword with
    default None, in the declaration's order, where ``**options`` was."""
    signature = inspect.signature(door)
    *parameters, rest = signature.parameters.values()
    assert rest.kind is inspect.Parameter.VAR_KEYWORD, f"{door.__qualname__} takes no **options"
    keywords = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                  annotation=getattr(annotation, "__forward_arg__", annotation))
                for name, annotation in WorldArgs.__annotations__.items()]
    door.__signature__ = signature.replace(parameters=[*parameters, *keywords])  # type: ignore[attr-defined]
    return door


def add_option(parser: argparse.ArgumentParser, name: str, *, default: Any = None, help: str = "",
               required: bool = False) -> None:
    """World option ``name`` as a flag of a command (``rpc-harness run``, the
    torchrun runner): read and checked as every door reads and checks it; a
    bad value exits 2 naming the flag."""
    option = DECLARED[name]
    flag = option.command_line
    assert flag is not None, f"world option {name} has no command-line flag"

    def read(text: str) -> Any:
        try:
            return option.read(text, flag)
        except ValueError as error:  # WorldSpecError, FaultPlanError
            message = str(error).removeprefix(f"{flag}: ").removeprefix(f"{name}: ")
            raise argparse.ArgumentTypeError(message) from None

    parser.add_argument(flag, type=read, default=default, required=required, help=help or option.help)


def whole_argument(text: str) -> int:
    """A whole-number flag of a command (``-n``, ``--steps``, ``--repeat``):
    argparse's own ``type=int`` echoes a bad value in full."""
    try:
        return whole_number(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
