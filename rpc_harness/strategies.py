"""Hypothesis strategies for worlds: sizes, fault plans, seeds; collective
worlds with faults at their collectives.

Shaped so that shrinking moves towards the smallest failing world: fewer
ranks, fewer faults, earlier hits, the first-listed (mildest) fault kinds
and the first worker names. Profiles for multi-process tests are registered
as ``rpc-ci`` (quick, the default under the plugin) and ``rpc-thorough``;
pick one with Hypothesis's own ``--hypothesis-profile``.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any

from .extras import require

# One line naming the extra to install, where Hypothesis is missing.
require("hypothesis", "rpc_harness.strategies")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from .c10d.ops import POINTS as C10D_OPS  # noqa: E402
from .c10d.ops import PREFIX as C10D_PREFIX  # noqa: E402
from .faults import FAILPOINT_KINDS, Fault, FaultPlan  # noqa: E402
from .repro import Repro  # noqa: E402

# Mildest first: Hypothesis shrinks sampled_from towards the first element.
DEFAULT_KINDS = ("delay", "raise", "kill")

CI_PROFILE = "rpc-ci"
THOROUGH_PROFILE = "rpc-thorough"


def register_profiles() -> None:
    """Register the multi-process profiles: no per-example deadline (a world
    takes a fraction of a second to seconds), bounded example counts, and no
    health check for the function-scoped ``rpc_world`` fixture, which holds no
    state between examples."""
    common = dict(
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        print_blob=True,
    )
    settings.register_profile(CI_PROFILE, max_examples=6, **common)
    settings.register_profile(THOROUGH_PROFILE, max_examples=60, **common)


def world_sizes(min_size: int = 1, max_size: int = 8) -> st.SearchStrategy[int]:
    """World sizes in ``[min_size, max_size]``, shrinking towards ``min_size``."""
    return st.integers(min_value=min_size, max_value=max_size)


def seeds() -> st.SearchStrategy[int]:
    """Root seeds, shrinking towards 0."""
    return st.integers(min_value=0, max_value=2**32 - 1)


def faults(
    names: Sequence[str],
    failpoints: Sequence[str],
    *,
    kinds: Sequence[str] = DEFAULT_KINDS,
    max_hit: int = 5,
    delays: Sequence[float] = (0.001, 0.01, 0.05),
    optional: bool = False,
) -> st.SearchStrategy[Fault]:
    """One failpoint fault aimed at one of ``names``. ``optional`` marks it so
    (``?``): a fault drawn at a point its rank never reaches, or past the end
    of a run, then does not fail the world."""
    for kind in kinds:
        if kind not in FAILPOINT_KINDS:
            raise ValueError(f"strategy kinds must be failpoint kinds {FAILPOINT_KINDS}, got {kind!r}")

    @st.composite
    def one(draw: Callable) -> Fault:
        kind = draw(st.sampled_from(list(kinds)))
        target = draw(st.sampled_from(list(names)))
        point = draw(st.sampled_from(list(failpoints)))
        hit = draw(st.integers(min_value=1, max_value=max_hit))
        if kind == "delay":
            return Fault(kind, target, point, hit, repeat=True, arg=draw(st.sampled_from(list(delays))),
                         optional=optional)
        return Fault(kind, target, point, hit, optional=optional)

    return one()


def fault_plans(
    names: Sequence[str],
    failpoints: Sequence[str],
    *,
    max_faults: int = 2,
    max_kills: int | None = None,
    **fault_options: object,
) -> st.SearchStrategy[FaultPlan]:
    """Plans of up to ``max_faults`` faults (at most one per target and
    point, at most ``max_kills`` kills), shrinking towards the empty plan."""
    plans = st.lists(
        faults(names, failpoints, **fault_options),  # type: ignore[arg-type]
        max_size=max_faults,
        unique_by=lambda f: (f.target, f.point),
    )
    if max_kills is not None:
        plans = plans.filter(lambda fs: sum(f.kind == "kill" for f in fs) <= max_kills)
    return plans.map(lambda fs: FaultPlan(tuple(fs)))


def schedules(*, depths: Sequence[int] = (1, 2, 3), random_walk: bool = True) -> st.SearchStrategy[str]:
    """Controlled schedules (the ``schedule`` world option): PCT at each of
    ``depths`` and, with ``random_walk``, the uniformly random one. Shrinks
    towards the first: PCT of depth 1, which never preempts a task that can
    go on (the fewest preemptions)."""
    for depth in depths:
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 20:
            raise ValueError(f"PCT depths are whole numbers 1..20, got {depth!r}")
    choices = [f"pct:{depth}" for depth in sorted(depths)] + (["random"] if random_walk else [])
    if not choices:
        raise ValueError("schedules(): no depth and no random walk leaves nothing to draw")
    return st.sampled_from(choices)


@dataclass(frozen=True)
class WorldCase:
    """One world Hypothesis chose: its size, names, fault plan, seed and
    schedule (``free`` unless :func:`worlds` was asked to draw one)."""

    world_size: int
    names: tuple[str, ...]
    faults: FaultPlan
    seed: int
    schedule: str = "free"

    def repro(self, *, scenario: str | None = None, entry: str | None = None, **config: object) -> Repro:
        return Repro(world_size=self.world_size, seed=self.seed, scenario=scenario, entry=entry,
                     names=self.names, config=dict(config),
                     options={"faults": self.faults, "schedule": self.schedule})


def worlds(
    names: Callable[[int], Sequence[str]] | None = None,
    failpoints: Sequence[str] = (),
    *,
    min_size: int = 1,
    max_size: int = 8,
    max_faults: int = 2,
    targets: Callable[[str], bool] | Container[str] | None = None,
    schedule: st.SearchStrategy[str] | None = None,
    **fault_options: object,
) -> st.SearchStrategy[WorldCase]:
    """Whole worlds: size first (so it shrinks first), then names, plan, seed,
    and a schedule drawn from ``schedule`` (e.g. :func:`schedules`; default: free).

    ``names(world_size)`` gives the worker names (default ``worker{rank}``);
    faults are aimed at the workers ``targets`` accepts (a predicate or a
    collection of names; default: every worker); with no ``failpoints`` the
    plans are empty.
    """
    name_fn = names or (lambda n: tuple(f"worker{r}" for r in range(n)))
    accept = _acceptor(targets)

    @st.composite
    def build(draw: Callable) -> WorldCase:
        size = draw(world_sizes(min_size, max_size))
        worker_names = tuple(name_fn(size))
        aimed = [name for name in worker_names if accept(name)]
        plan = (
            draw(fault_plans(aimed, failpoints, max_faults=max_faults, **fault_options))
            if failpoints and max_faults and aimed
            else FaultPlan()
        )
        return WorldCase(size, worker_names, plan, draw(seeds()), draw(schedule) if schedule is not None else "free")

    return build()


def _acceptor(targets: Callable[[str], bool] | Container[str] | None) -> Callable[[str], bool]:
    if targets is None:
        return lambda name: True
    if callable(targets):
        return targets
    return lambda name: name in targets


def scenario_worlds(
    scenario: Any,
    *,
    min_size: int | None = None,
    max_size: int = 4,
    points: Sequence[str] | None = None,
    **options: object,
) -> st.SearchStrategy[WorldCase]:
    """Worlds for a scenario (a registered name or a scenario object): its
    names, its failpoints (or the ``points`` given, a subset of them) and its
    sizes from ``min_size`` (default: its ``min_world_size``) to ``max_size``.
    Other options go to :func:`worlds` (``targets``, ``kinds``,
    ``max_faults``, ``max_kills``...)."""
    from .scenario import resolve

    sc = resolve(scenario)
    smallest = sc.min_world_size if min_size is None else min_size
    if smallest < sc.min_world_size:
        raise ValueError(f"{sc.name} needs worlds of {sc.min_world_size} ranks or more, not {smallest}")
    chosen = tuple(points) if points is not None else sc.failpoints
    unknown = sorted(set(chosen) - set(sc.failpoints))
    if unknown:
        raise ValueError(f"{sc.name} has no failpoint {', '.join(unknown)}; its failpoints: {', '.join(sc.failpoints)}")
    return worlds(sc.names, chosen, min_size=smallest, max_size=max_size, **options)  # type: ignore[arg-type]


# Kinds drawn at collectives by default: a raise or hang in one rank leaves
# its peers waiting in the collective until the deadline, which a property
# about a program's results rarely wants; ask for them with kinds=.
COLLECTIVE_KINDS = ("delay", "kill")


def collective_points(ops: Sequence[str] = ("all_reduce",), *, group: str | None = None) -> tuple[str, ...]:
    """The failpoints of collective ``ops`` (``all_reduce``, ``broadcast``,
    ``isend`` ...: see ``rpc_harness.c10d.ops``), in every process group or
    in ``group`` only (torch's name for it or its description)."""
    unknown = [op for op in ops if op not in C10D_OPS]
    if unknown or not ops:
        raise ValueError(f"collective_points(): no op {', '.join(map(repr, unknown))}; the ops are "
                         f"{', '.join(C10D_OPS)}" if unknown else "collective_points(): no op given")
    suffix = "" if group is None else f":{group}"
    points = tuple(f"{C10D_PREFIX}{op}{suffix}" for op in ops)
    FaultPlan(tuple(Fault("delay", "w", point, arg=0.0) for point in points))  # a bad group is refused here
    return points


def collective_worlds(
    ops: Sequence[str] = ("all_reduce",),
    *,
    group: str | None = None,
    min_size: int = 2,
    max_size: int = 4,
    kinds: Sequence[str] = COLLECTIVE_KINDS,
    **options: object,
) -> st.SearchStrategy[WorldCase]:
    """Worlds of ``min_size`` to ``max_size`` ranks whose fault plans strike
    at the collectives ``ops`` (every rank enters them, from Python or from
    C++ as DDP and FSDP do), shrinking towards two ranks and no fault.
    Other options go to :func:`worlds` (``names``, ``targets``,
    ``max_faults``, ``max_kills``, ``max_hit``, ``delays``, ``optional``...)."""
    if min_size < 1:
        raise ValueError(f"collective_worlds(): min_size must be >= 1, got {min_size}")
    return worlds(failpoints=collective_points(ops, group=group), min_size=min_size, max_size=max_size,
                  kinds=kinds, **options)  # type: ignore[arg-type]


def world_settings(**overrides: object) -> settings:
    """Settings for a property test of worlds: the ``rpc-ci`` profile unless
    the command line loaded ``rpc-thorough`` (``--hypothesis-profile``). A
    loaded profile that derandomizes (a CI that wants the same examples every
    run) derandomizes these too."""
    register_profiles()
    loaded = getattr(settings, "_current_profile", None)
    name = THOROUGH_PROFILE if loaded == THOROUGH_PROFILE else CI_PROFILE
    overrides.setdefault("derandomize", settings.default.derandomize)
    return settings(settings.get_profile(name), **overrides)  # type: ignore[arg-type]
