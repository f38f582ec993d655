"""Scenarios: a typed protocol, one registry, one run-and-check path.

A scenario is a distributed training program with a single-process
baseline: the ranks train, the baseline trains the same model on the same
data in one process, and every gradient is compared. What every scenario
does the same way is written here once: validating the world size, the
config and the fault plan before any process starts; the repro token and
the Python replay line; running the world; judging it; the report; the
mismatch message. A scenario supplies only what is its own (its
:class:`Scenario` attributes): worker names, the rank entry, and the
judge's four jobs -- the fault contract, the baseline replay, the
comparison, the outcome.

Scenarios are found through one registry, fed by the entry-point group
``rpc_harness.scenarios`` (as pytest finds plugins through ``pytest11``).
The built-in three register themselves there like any other package does::

    [project.entry-points."rpc_harness.scenarios"]
    chess = "my_package.chess:SCENARIO"

Nothing in this library imports a scenario by name: the CLI, the bench,
torchrun's runner and the Hypothesis strategies ask the registry.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import json
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from .errors import GradientMismatch, ScenarioError, WorldSpecError, clip
from .gradcheck import Mismatch
from .options import (
    DECLARED,
    MAX_WORLD_SIZE,
    WorldArgs,
    WorldOptions,
    takes_world_options,
    whole_number,
)
from .progress import Progress
from .repro import Repro, scenario_call
from .result import WorldResult
from .schedule import replay_schedule
from .spec import check_world_size, resolve_names
from .strict_json import finite

if TYPE_CHECKING:
    from typing_extensions import Unpack

ENTRY_POINT_GROUP = "rpc_harness.scenarios"
MISMATCHES_SHOWN = 10

ConfigT = TypeVar("ConfigT")  # a scenario's Config dataclass
RecordsT = TypeVar("RecordsT")  # what its ranks returned, as its judge reads it
ExpectedT = TypeVar("ExpectedT")  # what its baseline computed


# -- what a scenario supplies ----------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A judgement and the sentence that explains it."""

    ok: bool
    note: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """The distributed run against its baseline, tensor for tensor."""

    max_diff: float = 0.0  # the largest absolute gradient difference seen
    checked: int = 0  # gradient tensors compared (present in the run and in the baseline)
    # Gradient tensors the baseline has: a comparison covers every one, so a
    # run is not ok with fewer compared (tensors missing from the run, or a
    # judge that skipped some).
    expected: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """Did training do what training does (reward rises, loss falls, accuracy)?"""

    ok: bool
    note: str
    metric: float
    steps: int
    history: list[float] = field(default_factory=list)
    baseline_history: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Scenario(Protocol, Generic[ConfigT, RecordsT, ExpectedT]):
    """What one scenario supplies; :func:`run_scenario` does the rest.

    ``config_type`` is a frozen dataclass whose every field has a default,
    with ``rtol`` and ``atol`` fields (the gradient check's tolerances); its
    ``__post_init__`` raises ``ValueError`` naming a bad field.
    ``steps_field`` is the config field of the training budget (what
    ``rpc-harness run --steps`` sets), ``min_steps`` the smallest budget on
    which its judge can pass the outcome check (the RNN's compares the
    first epoch's mean loss with the last's: 2 epochs); the command refuses
    a smaller ``--steps`` before any process starts.
    ``entry(ctx, config)`` is a module-level function run in every rank.
    Before any process starts, ``validate(config, world_size, seed)`` raises
    ``ValueError`` for a config that cannot work at that size, and
    ``fault_checks(world_size, config)`` names the fault plans whose
    contracts ``rpc-harness run`` checks besides the clean world (by label:
    ``{"kill": "kill:trainer2@trainer.step#3"}``). The judge's jobs, in the
    order they run:

    - ``records(world)``: what the ranks returned that the judge reads, or
      None when there is nothing to compare (a killed server, a failed world);
    - ``contract(world, records, config)``: did the world behave as the
      fault plan allows (who died, who finished, who was blamed)?
    - ``baseline(config, world_size, seed, records)``: the single-process run,
      replaying the schedule the records show (drops, the order of steps);
    - ``compare(records, expected, config, seed)``: tensor for tensor;
    - ``outcome(records, expected, config)``: did it learn?
    """

    name: str
    summary: str
    min_world_size: int
    default_world_size: int
    failpoints: tuple[str, ...]
    steps_field: str
    min_steps: int
    metric_name: str
    config_type: type
    entry: Callable[..., Any]

    def names(self, world_size: int) -> tuple[str, ...]: ...

    def validate(self, config: ConfigT, world_size: int, seed: int) -> None: ...

    def fault_checks(self, world_size: int, config: ConfigT) -> Mapping[str, str]: ...

    def records(self, world: WorldResult) -> RecordsT | None: ...

    def contract(self, world: WorldResult, records: RecordsT | None, config: ConfigT) -> Verdict: ...

    def baseline(self, config: ConfigT, world_size: int, seed: int, records: RecordsT) -> ExpectedT: ...

    def compare(self, records: RecordsT, expected: ExpectedT, config: ConfigT, seed: int) -> Comparison: ...

    def outcome(self, records: RecordsT, expected: ExpectedT, config: ConfigT) -> Outcome: ...


class PackageScenario:
    """A :class:`Scenario` made of a package split by concern, as the built-in
    three are: the ``config`` module gives the name, the sizes, the
    failpoints, the budget (``NAME``, ``MIN_WORLD_SIZE``,
    ``DEFAULT_WORLD_SIZE``, ``FAILPOINTS``, ``STEPS_FIELD``, ``MIN_STEPS``),
    ``Config`` and ``names``; the ``judge`` module gives ``records``,
    ``contract``, ``compare`` and ``outcome``. What is the package's own
    besides (its summary, metric, rank entry, baseline replay, fault checks,
    and a ``validate`` or ``outcome`` of its own, if any) is passed by
    keyword. Only the values are kept, not the modules: the object pickles
    wherever its functions do.
    """

    def __init__(
        self,
        config: ModuleType,
        judge: ModuleType,
        *,
        summary: str,
        metric_name: str,
        entry: Callable[..., Any],
        baseline: Callable[..., Any],
        fault_checks: Callable[[int, Any], Mapping[str, str]],
        validate: Callable[[Any, int, int], None] | None = None,
        outcome: Callable[..., Outcome] | None = None,
        needs: Sequence[str] = (),
        world: Mapping[str, Any] | None = None,
        cpu_only: bool = False,
    ) -> None:
        self.name: str = config.NAME
        self.summary = summary
        # The optional packages (of an extra: rpc_harness.extras) its ranks
        # import where used: `rpc-harness list` names them, and the extra.
        self.needs: tuple[str, ...] = tuple(needs)
        # The world options its worlds take unless the caller gives them:
        # a collective scenario's process group, and whether it needs RPC.
        self.world: dict[str, Any] = dict(world or {})
        # Whether its models stay on the CPU whatever ``devices`` says:
        # such a scenario refuses the option rather than ignore it.
        self.cpu_only = cpu_only
        self.min_world_size: int = config.MIN_WORLD_SIZE
        self.default_world_size: int = config.DEFAULT_WORLD_SIZE
        self.failpoints: tuple[str, ...] = config.FAILPOINTS
        self.steps_field: str = config.STEPS_FIELD
        self.min_steps: int = config.MIN_STEPS
        self.metric_name = metric_name
        self.config_type: type = config.Config
        self.entry = entry
        self.names = config.names
        self.validate = validate or _valid_at_every_size
        self.fault_checks = fault_checks
        self.records = judge.records
        self.contract = judge.contract
        self.baseline = baseline
        self.compare = judge.compare
        self.outcome = outcome or judge.outcome

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _valid_at_every_size(config: Any, world_size: int, seed: int) -> None:
    """Every config that constructs runs at every size from the least: nothing more to check."""


def _protocol_shape() -> tuple[dict[str, type], tuple[str, ...]]:
    """The protocol's attributes (with the type a value must have) and
    methods, read from :class:`Scenario` itself: the shape check cannot
    drift from the protocol."""
    attributes: dict[str, type] = {}
    for attr, hint in typing.get_type_hints(Scenario).items():
        origin = typing.get_origin(hint) or hint
        attributes[attr] = collections.abc.Callable if origin is collections.abc.Callable else origin
    methods = tuple(attr for attr, value in vars(Scenario).items()
                    if callable(value) and not attr.startswith("_") and attr not in attributes)
    return attributes, methods


_ATTRIBUTES, _METHODS = _protocol_shape()


def check_shape(obj: object, *, where: str) -> Scenario:
    """``obj`` if it has the scenario shape; :class:`ScenarioError` naming
    every missing or ill-typed attribute otherwise."""
    problems = []
    for attr, kind in _ATTRIBUTES.items():
        value = getattr(obj, attr, None)
        if kind is collections.abc.Callable:
            if not callable(value):
                problems.append(f"{attr}()")
        elif not isinstance(value, kind) or isinstance(value, bool):
            problems.append(f"{attr} ({kind.__name__})")
    problems += [f"{attr}()" for attr in _METHODS if not callable(getattr(obj, attr, None))]
    if problems:
        raise ScenarioError(f"{where}: {obj!r} is not a scenario: it lacks {', '.join(problems)}")
    assert isinstance(obj, Scenario)
    config_type = obj.config_type
    if not dataclasses.is_dataclass(config_type):
        raise ScenarioError(f"{where}: {obj.name}'s config_type {config_type.__name__} is not a dataclass")
    fields = {f.name for f in dataclasses.fields(config_type)}
    missing = sorted({"rtol", "atol", obj.steps_field} - fields)
    if missing:
        raise ScenarioError(f"{where}: {obj.name}'s config has no field {', '.join(map(repr, missing))}")
    if obj.min_steps < 1:
        raise ScenarioError(f"{where}: {obj.name} needs min_steps >= 1, got {obj.min_steps}")
    if not 1 <= obj.min_world_size <= obj.default_world_size <= MAX_WORLD_SIZE:
        raise ScenarioError(
            f"{where}: {obj.name} needs 1 <= min_world_size <= default_world_size <= {MAX_WORLD_SIZE}, "
            f"got {obj.min_world_size} and {obj.default_world_size}"
        )
    return obj


# -- the registry ------------------------------------------------------------------------


def registry() -> dict[str, metadata.EntryPoint]:
    """Every registered scenario by name, not yet imported."""
    found: dict[str, metadata.EntryPoint] = {}
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name in found and found[point.name].value != point.value:
            raise ScenarioError(
                f"two packages register the scenario {point.name!r}: "
                f"{found[point.name].value} and {point.value}; uninstall one"
            )
        found[point.name] = point
    return found


def available() -> tuple[str, ...]:
    """The names of every registered scenario, sorted."""
    return tuple(sorted(registry()))


def load(name: str) -> Scenario:
    """The registered scenario ``name``, imported and checked."""
    points = registry()
    if name not in points:
        known = ", ".join(sorted(points)) or "none: is rpc-harness installed (pip install -e .)?"
        raise ScenarioError(f"unknown scenario {clip(name)}; registered scenarios: {known}")
    try:
        obj = points[name].load()
    except Exception as error:  # noqa: BLE001 - whatever importing a plugin raises
        raise ScenarioError(
            f"scenario {name!r} ({points[name].value}) failed to load: {type(error).__name__}: {error}"
        ) from error
    scenario = check_shape(obj, where=f"scenario {name!r} ({points[name].value})")
    if scenario.name != name:
        raise ScenarioError(f"the entry point {name!r} names a scenario called {scenario.name!r}")
    return scenario


def resolve(scenario: Scenario | str) -> Scenario:
    """A scenario object from itself, a registered name or ``"module:attribute"``."""
    if not isinstance(scenario, str):
        return check_shape(scenario, where="scenario")
    if ":" not in scenario:
        return load(scenario)
    module, _, attribute = scenario.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ScenarioError(f"cannot load scenario {scenario!r}: {type(error).__name__}: {error}") from None
    return check_shape(obj, where=f"scenario {scenario!r}")


# -- inputs, validated before any process starts ---------------------------------------------


def require_world_size(scenario: str, world_size: object, minimum: int, roles: str) -> int:
    """``world_size`` if it is a whole number in ``minimum..MAX_WORLD_SIZE``:
    :func:`rpc_harness.spec.check_world_size` in a scenario's words
    (``roles`` says what the smallest world holds, e.g. "an agent and an
    observer")."""
    return check_world_size(world_size, where=scenario, minimum=minimum,
                            needs=f"the scenario needs >= {minimum} ranks ({roles})")


def world_names(scenario: Scenario, world_size: object, *, where: str = "") -> tuple[str, ...]:
    """The scenario's worker names for ``world_size``, size checked first."""
    size = require_world_size(scenario.name, world_size, scenario.min_world_size, "see its docs")
    names = tuple(scenario.names(size))
    return resolve_names(size, names, where=where or f"{scenario.name}.names({size})")


def needs_rpc(scenario: Scenario) -> bool:
    """Whether the scenario's ranks talk by RPC: every scenario's do unless
    its own world options say ``rpc=False`` (the collectives-only ones)."""
    return bool(getattr(scenario, "world", {}).get("rpc", True))


def check_rpc_option(scenario: Scenario, rpc: object, *, where: str) -> None:
    """Refuse a world without an RPC agent (``rpc`` False, from ``where``)
    for a scenario whose ranks need one: its entry would fail at its first
    RPC, after every rank had started."""
    if rpc is False and needs_rpc(scenario):
        raise WorldSpecError(f"{where}: the {scenario.name} scenario's ranks talk by RPC, so its worlds need the RPC "
                             "agent; leave the option out (RPC is the default)")


def runs_on_devices(scenario: Scenario) -> bool:
    """Whether the scenario puts its models where ``devices`` says: every
    scenario does unless it is ``cpu_only``."""
    return not getattr(scenario, "cpu_only", False)


def check_devices_option(scenario: Scenario, devices: object, *, where: str) -> None:
    """Refuse ``devices`` (from ``where``) for a scenario that trains on the
    CPU only: ignored, its report would say a GPU run when none was."""
    if devices and not runs_on_devices(scenario):
        raise WorldSpecError(f"{where}: the {scenario.name} scenario trains on the CPU only (nothing of it is "
                             "placed on a device); leave the option out")


def make_config(scenario: Scenario, config: Any = None, *, where: str = "") -> Any:
    """The scenario's config from None (defaults), an instance, or a mapping
    of field overrides; bad fields raise :class:`WorldSpecError` naming them."""
    where = where or f"{scenario.name} config"
    if isinstance(config, scenario.config_type):
        return config
    overrides = {} if config is None else config
    if not isinstance(overrides, Mapping):
        raise WorldSpecError(
            f"{where}: expected a {scenario.config_type.__name__} or a mapping of its fields, "
            f"got {type(config).__name__}"
        )
    fields = [f.name for f in dataclasses.fields(scenario.config_type)]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise WorldSpecError(f"{where}: no field {', '.join(map(repr, unknown))}; fields: {', '.join(fields)}")
    try:
        return scenario.config_type(**overrides)
    except (TypeError, ValueError) as error:
        raise WorldSpecError(f"{where}: {error}") from None


def config_overrides(scenario: Scenario, config: Any) -> dict[str, Any]:
    """The fields of ``config`` that differ from the defaults (what a repro keeps)."""
    defaults = scenario.config_type()
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(defaults, f.name)
    }


def parse_overrides(
    scenario: Scenario, pairs: Sequence[str], steps: int | None = None, *, where: str = "--set"
) -> dict[str, Any]:
    """Config overrides from ``KEY=VALUE`` texts, typed by each field's
    default (or annotation), and ``steps`` for the scenario's budget field.
    Validated as a whole, so a bad value is refused before any world starts;
    so is a budget below what the scenario's judge needs (``min_steps``):
    the whole world would run, then fail for want of steps."""
    fields = {f.name: f for f in dataclasses.fields(scenario.config_type)}
    out: dict[str, Any] = {}
    budget_from = ""  # the door that set the budget, for the message
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
            raise WorldSpecError(f"--steps {clip(steps)}: the training budget ({scenario.name}'s "
                                 f"{scenario.steps_field}) must be a whole number 1..{MAX_STEPS:,}")
        out[scenario.steps_field] = steps
        budget_from = f"--steps {steps}"
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise WorldSpecError(f"{where} {clip(pair)}: use KEY=VALUE")
        if key not in fields:
            raise WorldSpecError(
                f"{where} {clip(pair)}: {scenario.name} config has no field {clip(key)}; fields: {', '.join(fields)}"
            )
        out[key] = _typed(text, fields[key], f"{where} {clip(pair)}")
        if key == scenario.steps_field:
            budget_from = f"{where} {clip(pair)}"
    make_config(scenario, out, where=f"{where}: {scenario.name} config")
    budget = out.get(scenario.steps_field)
    if budget_from and isinstance(budget, int) and budget > MAX_STEPS:
        raise WorldSpecError(f"{budget_from}: {scenario.name}'s {scenario.steps_field} must be at most {MAX_STEPS:,}")
    if budget_from and isinstance(budget, int) and budget < scenario.min_steps:
        raise WorldSpecError(
            f"{budget_from}: {scenario.name}'s judge needs {scenario.steps_field} >= {scenario.min_steps} to tell "
            f"whether training worked; use --steps {scenario.min_steps} or more (`rpc-harness list` shows each "
            "scenario's budget)"
        )
    return out


# The largest training budget taken: far past any run a test or a CI job makes,
# and well short of the sizes that overflow torch's shapes inside the ranks
# (a budget of 10**20 reached them: "Overflow when unpacking long long").
MAX_STEPS = 1_000_000


def _typed(text: str, declared: dataclasses.Field, where: str) -> Any:
    default = declared.default
    annotation = declared.type if isinstance(declared.type, str) else getattr(declared.type, "__name__",
                                                                              str(declared.type))
    optional = default is None or "None" in annotation
    if optional and text.lower() == "none":
        return None
    kind = type(default) if default is not None else next(
        (k for k in (bool, int, float, str) if k.__name__ in annotation), None
    )
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if kind is int:
            return whole_number(text)
        if kind is float:
            return float(text)
        if kind is str:
            return text
    except ValueError as error:
        # whole_number says why (the text, cut, or too many digits for Python); the others only fail.
        problem = str(error) if kind is int else f"{clip(text)} is not a valid {kind.__name__}"
        raise WorldSpecError(f"{where}: {problem}") from None
    raise WorldSpecError(f"{where}: fields of type {annotation} cannot be set from text")


# -- run and judge ---------------------------------------------------------------------------


@dataclass
class ScenarioReport:
    """One scenario run: the world, its baseline, and how they compare.

    ``ok`` is true only when the world met the scenario's contract (under the
    fault plan, if any), every gradient tensor the baseline has was compared
    and matched, and the outcome check passed. ``replay`` is the command that runs it again,
    ``python_replay`` the same as a Python call.
    """

    scenario: str
    world_size: int
    seed: int
    metric_name: str
    # Optimizer steps actually run, as the judge counts them (RL: one per
    # episode; RNN: the longest trainer's; PS: every update the server
    # applied), not the budget --steps sets (epochs, episodes, batches).
    steps: int = 0
    metric: float = float("nan")  # the final outcome metric
    history: list[float] = field(default_factory=list)  # metric per step, distributed run
    baseline_history: list[float] = field(default_factory=list)  # the same, baseline
    max_grad_diff: float = 0.0
    grads_checked: int = 0  # how many gradient tensors were compared
    grads_expected: int = 0  # how many the baseline has (every one must be compared)
    mismatches: list[Mismatch] = field(default_factory=list)
    outcome_ok: bool = True
    outcome_note: str = ""
    contract_ok: bool = True
    contract_note: str = ""
    duration: float = 0.0
    world: WorldResult | None = None
    replay: str = ""
    python_replay: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.contract_ok and self.outcome_ok and not self.mismatches and self.grads_covered

    @property
    def grads_covered(self) -> bool:
        """Whether every gradient tensor the baseline has was compared."""
        return self.grads_checked >= self.grads_expected

    def problems(self) -> list[str]:
        """Why this run is not ok, one line each (mismatches cut off after ten)."""
        out = []
        if not self.contract_ok:
            out.append(f"contract: {self.contract_note}")
        if not self.outcome_ok:
            out.append(f"outcome: {self.outcome_note}")
        if not self.grads_covered:
            out.append(f"gradients: compared {self.grads_checked} of the {self.grads_expected} tensors the "
                       "baseline has")
        out += [str(m) for m in self.mismatches[:MISMATCHES_SHOWN]]
        if len(self.mismatches) > MISMATCHES_SHOWN:
            out.append(f"... and {len(self.mismatches) - MISMATCHES_SHOWN} more mismatches")
        return out


@takes_world_options
def run_scenario(
    scenario: Scenario | str,
    config: Any = None,
    *,
    world_size: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    **options: Unpack[WorldArgs],
) -> ScenarioReport:
    """Run ``scenario`` in a real world, run its baseline, compare, judge.

    ``config`` is the scenario's config, a mapping of overrides or None.
    The world options are those of :func:`~rpc_harness.run_world`, with
    its defaults (a seed left out is drawn, and the report says it); the
    scenario's own failpoints are always declared, ``failpoints`` adds
    more. ``devices="cuda"`` puts each rank's model on its GPU; the
    baseline stays on the CPU, and the judge widens its tolerances as
    ``rpc_harness.scenarios._device`` says; where CUDA is not available it
    is refused before any process starts (:class:`Unsupported`).
    Bad input (world size, config, fault plan) raises before any process
    starts; a failed world never raises: the report says what happened, and
    :func:`check_report` raises on it.
    """
    import time

    from ._parent.launcher import run_world

    started = time.monotonic()
    sc = resolve(scenario)
    size = sc.default_world_size if world_size is None else world_size
    names = world_names(sc, size, where=f"{sc.name}: names")
    cfg = make_config(sc, config)
    # The scenario's own world options (a collective one's process group)
    # unless the caller gives them; its token carries only the caller's, as
    # the scenario gives its own again when the token replays.
    own = {name: value for name, value in getattr(sc, "world", {}).items() if name not in options}
    checked = WorldOptions.from_values({**own, **options}, where=sc.name)
    check_rpc_option(sc, checked.rpc, where=f"{sc.name}: rpc=False")
    check_devices_option(sc, checked.devices, where=f"{sc.name}: devices")
    # The token carries what was given (failpoints: only the caller's own).
    carried = {name: value for name, value in checked.given()
               if DECLARED[name].token and name != "seed" and name not in own}
    failpoints = tuple(dict.fromkeys((*sc.failpoints, *(checked.failpoints or ()))))
    checked = dataclasses.replace(checked, failpoints=failpoints)
    seed: int = checked.seed  # type: ignore[assignment]  # drawn by from_values when not given
    validate_config(sc, cfg, len(names), seed, where=f"{sc.name} config at world_size {len(names)}")
    checked.faults.validate(names, failpoints=failpoints, where=f"{sc.name}: faults")
    # Refused here, naming the scenario, where run_world would name itself.
    checked.check_here(sc.name)
    repro = Repro(world_size=len(names), seed=seed, scenario=sc.name, names=names,
                  config=config_overrides(sc, cfg), options=carried)
    python = scenario_call(repro)
    deadline = checked.deadline
    world = run_world(
        sc.entry, names=names, args=(cfg,), repro=f"{repro.command(deadline)}\n    or: {python}", check=False,
        on_progress=on_progress, **dict(checked.given()),  # type: ignore[arg-type]  # checked values, read back
    )
    report = judge(sc, world, cfg)
    if world.schedule:  # a controlled world: its replay lines take its steps exactly
        repro = dataclasses.replace(repro, options=dict(repro.options, schedule=replay_schedule(world.schedule)))
        python = scenario_call(repro)
        world.repro = f"{repro.command(deadline)}\n    or: {python}"
    report.replay, report.python_replay = repro.command(deadline), python
    report.duration = time.monotonic() - started
    return report


def validate_config(scenario: Scenario, config: Any, world_size: int, seed: int, *, where: str) -> None:
    """The scenario's own check of a config at a size and seed, before any
    process starts: its ``ValueError`` becomes a :class:`WorldSpecError`
    naming ``where``."""
    try:
        scenario.validate(config, world_size, seed)
    except ValueError as error:
        raise WorldSpecError(f"{where}: {error}") from None


def judge(scenario: Scenario, world: WorldResult, config: Any) -> ScenarioReport:
    """The judge's four jobs, in order, on a finished world."""
    report = ScenarioReport(scenario=scenario.name, world_size=world.world_size, seed=world.seed,
                            metric_name=scenario.metric_name, world=world)
    records = scenario.records(world)
    contract = scenario.contract(world, records, config)
    report.contract_ok, report.contract_note = contract.ok, contract.note
    if world.problems:
        # The plan did not do what it says (a fault never fired, a message
        # was lost): whatever a scenario's contract makes of such a world, it
        # was not the world the plan described. The scenario's own note is
        # kept where a rank failed besides.
        own = f"; {contract.note}" if not contract.ok and (world.failures or world.timed_out) else ""
        report.contract_ok, report.contract_note = False, "; ".join(world.problems) + own
    report.details.update(contract.details)
    if records is None:
        report.outcome_note = "not checked: the world left no records to compare (see the contract)"
        return report
    expected = scenario.baseline(config, world.world_size, world.seed, records)
    comparison = scenario.compare(records, expected, config, world.seed)
    report.max_grad_diff, report.grads_checked = comparison.max_diff, comparison.checked
    report.grads_expected = comparison.expected
    report.mismatches = comparison.mismatches
    report.details.update(comparison.details)
    outcome = scenario.outcome(records, expected, config)
    report.outcome_ok, report.outcome_note = outcome.ok, outcome.note
    report.metric, report.steps = outcome.metric, outcome.steps
    report.history, report.baseline_history = outcome.history, outcome.baseline_history
    report.details.update(outcome.details)
    return report


def check_report(report: ScenarioReport) -> None:
    """Raise if ``report`` is not ok: :class:`GradientMismatch` when only
    tensors differ from the baseline, ``AssertionError`` otherwise. The
    message lists every problem and ends with the line that replays it."""
    __tracebackhide__ = True
    if report.ok:
        return
    lines = [f"{report.scenario} scenario (world_size={report.world_size}, seed={report.seed}) failed:"]
    lines += [f"  {problem}" for problem in report.problems()]
    if report.world is not None and not report.world.ok:
        lines.append(report.world.report())
    elif report.replay:
        lines.append(f"Replay: {report.replay}")
        if report.python_replay:
            lines.append(f"    or: {report.python_replay}")
    if report.mismatches and report.contract_ok and report.outcome_ok:
        raise GradientMismatch("\n".join(lines))
    raise AssertionError("\n".join(lines))


def summary(report: ScenarioReport) -> dict[str, Any]:
    """A JSON-ready summary of a report (what ``rpc-harness run --out`` writes)."""
    out = {
        "scenario": report.scenario, "world_size": report.world_size, "seed": report.seed,
        "steps": report.steps, "metric_name": report.metric_name, "metric": report.metric,
        "max_grad_diff": report.max_grad_diff, "grads_checked": report.grads_checked,
        "grads_expected": report.grads_expected,
        "duration": report.duration, "ok": report.ok, "contract_ok": report.contract_ok,
        "contract_note": report.contract_note, "outcome_ok": report.outcome_ok,
        "outcome_note": report.outcome_note, "problems": report.problems(),
        "history": list(report.history), "baseline_history": list(report.baseline_history),
        "replay": report.replay,
    }
    out = finite(out)
    json.dumps(out, default=float, allow_nan=False)  # fail here, not half-way through a file
    return out
