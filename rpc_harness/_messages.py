"""What a rank and its supervisor say to each other over their pipe.

Small frozen dataclasses, pickled by the pipe and taken apart with ``match``
on the other end: a field added to one is a field, not a new position in a
tuple that three modules unpack. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# -- rank -> supervisor -------------------------------------------------------------


@dataclass(frozen=True)
class Joined:
    """The rank is in its world: through ``init_rpc``, or its default
    process group, or both. ``names`` are every worker's names (a spawned
    program gives them in its own ``init_rpc``; empty until it has);
    ``group``: the rank has a default process group (a collective world)."""

    names: tuple[str, ...]
    group: bool = False


@dataclass(frozen=True)
class ProgressReported:
    """What the rank's code reported through ``progress()`` (the supervisor
    hands it on as a :class:`rpc_harness.Progress`, which names the rank)."""

    done: int
    total: int
    unit: str
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EntryDone:
    """The entry (or program) is done; the rank waits for :class:`Shutdown`.
    ``value`` is its pickled return value, when already known. A reused
    world's rank that checks at once (``RunEntry.check``) sends its
    :class:`Checked` with it: one message, one wake-up of the supervisor."""

    value: bytes | None = None
    checked: Checked | None = None


@dataclass(frozen=True)
class Value:
    """The pickled return value of a program that shut RPC down itself."""

    value: bytes


@dataclass(frozen=True)
class ShutdownDone:
    """The rank's RPC shutdown finished; it waits for :class:`Exit`."""


@dataclass(frozen=True)
class Frozen:
    """A freeze fault is about to SIGSTOP the rank."""


@dataclass(frozen=True)
class Failed:
    """The rank's code raised (``skipped``: it called ``pytest.skip()``).
    ``phase`` is where: starting, entry, result or shutdown; ``pickled`` the
    exception itself, when it pickles."""

    phase: str
    error: str  # one line
    traceback: str
    pickled: bytes | None = None
    skipped: bool = False


# -- supervisor -> rank ---------------------------------------------------------------


@dataclass(frozen=True)
class Shutdown:
    """Every live rank is done: shut RPC down, gracefully only if ``graceful``
    (a graceful shutdown waits for every peer, so never after a death)."""

    graceful: bool


@dataclass(frozen=True)
class Exit:
    """Every rank has shut down: the process may end. (A rank that ended at
    once could take with it what a slower peer's shutdown still talks to: a
    program's own store, hosted by rank 0.)"""


@dataclass(frozen=True)
class Checked:
    """A reused world's rank after an entry: what it found left of it
    (``rpc_harness._rank.clean``), one line per broken rule; empty: clean.
    ``group``: in a world with a default group, what the rank says of it
    (a ``c10d.sequence.GroupWord``: the supervisor compares the ranks')."""

    problems: tuple[str, ...] = ()
    group: object = None


ToSupervisor = Joined | ProgressReported | EntryDone | Value | ShutdownDone | Frozen | Failed | Checked


@dataclass(frozen=True)
class RunEntry:
    """A reused world (``rpc_harness._parent.live``): run this entry now, with its
    own seed, fault plan, deadline and schedule, then say :class:`EntryDone`
    (or :class:`Failed`) and wait for the next word. Under a controlled
    ``schedule`` the rank's gate opens for the entry alone: its tasks wait
    for their turns from the entry's start until the scheduler's
    :class:`Release`."""

    entry: object  # an EntryRef
    payload: bytes  # the pickled (args, kwargs)
    seed: int
    faults: object  # a FaultPlan
    deadline: float
    controlled: bool = False  # under a controlled schedule (the supervisor holds the schedule itself)
    # Then, done or failed, take the quick look of :class:`Check` at once
    # and answer :class:`Checked` unasked: in a world of collectives only,
    # uncontrolled, where no rank's look waits for anything of its peers'
    # (one round trip less an entry).
    check: bool = False


@dataclass(frozen=True)
class Check:
    """A reused world, every rank done with its entry: check that nothing
    of it is left and answer :class:`Checked` (``thorough``: collect all
    garbage, wait longer, name the RRefs this rank holds: a slower look)."""

    thorough: bool = False


@dataclass(frozen=True)
class TryGroup:
    """A reused collective world, every rank clean but the default group
    not shown usable by the entry's own collectives on some rank: run an
    all_reduce of the check's own over it, every rank together, and answer
    :class:`Checked` with what it showed wrong."""


# -- a controlled schedule: rank (its tasks) -> scheduler, over a pipe of its own -------------
# A task is a thread the scheduler runs one step at a time: a rank's entry
# (or program) and every RPC handler a peer's call starts. It says where it
# stands; the scheduler answers with Go when it may run on.


@dataclass(frozen=True)
class Begin:
    """A task starts (a served call: ``call`` is the caller's id for it) and waits for Go."""

    task: str
    label: str
    point: str
    call: str | None = None


@dataclass(frozen=True)
class At:
    """The running task reached a scheduling point and waits for Go."""

    task: str
    point: str


@dataclass(frozen=True)
class Block:
    """The running task waits for ``on`` (``("call", id)``, ``("future", n)``,
    ``("rref", id)``, ``("cond", n)``, ``("timer",)``) and for Go after it;
    ``timeout``: seconds of the schedule's own clock after which it may go on anyway."""

    task: str
    point: str
    on: tuple
    timeout: float | None = None


@dataclass(frozen=True)
class End:
    """The task ended (its served call answered later, once ``responds_later``'s
    future completes; ``failed``: an entry that raised, which ends the world).
    ``after``: the call issued under control whose answer (and callbacks)
    complete that future, when it is one of those calls' or a ``then()`` of
    one: torch's thread completes it, and the answer is due at once."""

    task: str
    responds_later: bool = False
    failed: bool = False
    after: str | None = None


@dataclass(frozen=True)
class Issued:
    """The running task issued call ``call`` to ``to`` (a rank): a Python
    function (``python``: a task will start there) or one torch runs in C++;
    ``rref``: the id of the RRef a ``remote()`` creates. It waits for Go.
    ``by``: the program's callback on an answer that issued it instead (its
    id, ``driver/2+cb1``), which runs between steps and waits for nothing.
    ``timeout``: seconds of the schedule's clock after which the call ends
    in torch's timeout error, unanswered (None: it never does)."""

    call: str
    to: int
    python: bool
    rref: str | None = None
    by: str | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Completed:
    """Call ``call``'s future completed; ``followers`` callbacks of the
    program's run after this, each ending with :class:`Followed`."""

    call: str
    followers: int = 0


@dataclass(frozen=True)
class Following:
    """``follower``, one of the program's callbacks on call ``call``'s
    answer, is about to run, and waits for Go (its turn)."""

    follower: str
    call: str


@dataclass(frozen=True)
class Followed:
    """One of the program's callbacks on call ``call``'s future returned."""

    call: str


@dataclass(frozen=True)
class Due:
    """Served call ``call``'s answer is on its way (its @async_execution future completed)."""

    call: str


@dataclass(frozen=True)
class Resolved:
    """A future of the program's (``n``: its serial in this rank) was completed."""

    n: int


@dataclass(frozen=True)
class Notified:
    """A condition's notify woke ``task``, waiting on it."""

    task: str


@dataclass(frozen=True)
class Unscheduled:
    """Something the schedule cannot order happened (``why``: what, and
    where): an RPC issued by a thread that is neither a task nor a callback
    on an answer, or a callback's wait for a task. Control is given up."""

    why: str


@dataclass(frozen=True)
class ProgramThread:
    """A thread the program started (from a task or a callback on an
    answer) is ``alive`` (told before it starts), or no longer (told as it
    ends): it runs free, on the real clock."""

    name: str
    alive: bool


@dataclass(frozen=True)
class Released:
    """The rank's gate heard :class:`Release`: the last thing it says. A
    reused world's supervisor reads up to it before the next entry's
    schedule uses the same pipe, so that nothing of this schedule's is
    heard by the next one's scheduler."""


ToScheduler = (Begin | At | Block | End | Issued | Completed | Following | Followed | Due | Resolved | Notified
               | Unscheduled | ProgramThread | Released)


@dataclass(frozen=True)
class Looked:
    """Where the thread of ``task`` (the running task, asked by :class:`Look`)
    stands: its stack, outermost frame first, each frame as ``(frame id,
    file, function)`` (``()`` when the task has no live thread), the line it
    is at (``file:line in function``), and the seconds of CPU its thread
    has used (negative when unknown). For the supervisor's stall watch,
    not the scheduler."""

    task: str
    frames: tuple = ()
    where: str = ""
    cpu: float = -1.0


# -- scheduler -> rank ----------------------------------------------------------------------


@dataclass(frozen=True)
class Go:
    """``task`` may run on (``notified``: a condition wait ended by a notify, not its timeout)."""

    task: str
    notified: bool = True


@dataclass(frozen=True)
class TimedOut:
    """Call ``call`` was not answered by the end of its timeout on the
    schedule's clock: its caller's rank ends it in torch's timeout error."""

    call: str


@dataclass(frozen=True)
class Look:
    """Say where ``task``'s thread stands now (answered by :class:`Looked`)."""

    task: str


@dataclass(frozen=True)
class Release:
    """The schedule is no longer controlled: every task runs free from now on."""
