"""CUDA tensors between ranks: a spawned program's ``device_maps`` and
``devices``.

Every world runs TensorPipe over its TCP transport (``uv``) with its
``basic`` channel (``rank_setup.tensorpipe_options`` says why), and that
channel moves CPU tensors only. A program written the tutorials' way that
sends CUDA tensors names the devices in its own options
(``TensorPipeRpcBackendOptions(device_maps={"worker1": {0: 0}})``, or
``set_device_map``/``set_devices``), which the harness keeps
(``_lifecycle.Lifecycle._merged_backend``). Then:

- where CUDA is available, the world's TensorPipe also gets TensorPipe's
  CUDA channels (:data:`CUDA_CHANNELS`: ``cuda_ipc`` between processes on
  one machine, ``cuda_basic`` through host memory), and the program's maps
  stay as it wrote them; every rank of a spawned world offers them, since a
  peer may map devices in its own code (a pipe needs them on both ends).
  Written without a CUDA machine to run it on: the
  suite tests the channel list it asks for, not a world moving CUDA tensors;
- where CUDA is not available, the program is refused with
  :class:`~rpc_harness.errors.Unsupported` saying so and what to do, as it
  builds those options (before torch's own error, which on a CPU build says
  only "Cannot access accelerator device when none is available") and again
  in its ``init_rpc``; and also where CUDA is, in a world that runs torch's
  faulty agent (message faults, fuzz), whose options take no device maps.

:func:`install` wraps the options' constructor and setters once per
process, in the forkserver (``_rank``), like the other hooks: inert outside a
rank for maps that name no device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _cuda_fork
from .errors import Unsupported

BASIC_CHANNELS = ("basic",)
# TensorPipe's channels for CUDA tensors between processes on one host:
# cuda_ipc (device to device through CUDA IPC handles; ranks that see the
# same GPUs) and cuda_basic (staged through host memory, always possible).
# cuda_xth works within one process only and cuda_gdr needs InfiniBand.
CUDA_CHANNELS = ("cuda_ipc", "cuda_basic")
_MARK = "_rpc_harness_devices"


def names_devices(device_maps: Mapping[str, Mapping[Any, Any]] | None, devices: Sequence[Any] | None) -> bool:
    """Whether options ask for devices: a non-empty device map, or devices."""
    return any(bool(mapping) for mapping in (device_maps or {}).values()) or bool(devices)


def channels(device_maps: Mapping[str, Mapping[Any, Any]] | None = None, devices: Sequence[Any] | None = None,
             *, cuda: bool | None = None, world: bool = False) -> list[str]:
    """TensorPipe's channels for a rank: the basic one, and the CUDA ones
    where CUDA is available (``cuda``: whether it is, asked of torch when
    None) and either this rank's options name devices or ``world``: some
    rank of its world may move CUDA tensors. TensorPipe picks each pipe's
    channel from what both ends offer, so a rank without CUDA channels
    cannot receive a CUDA tensor even when only its peer maps devices (the
    TensorPipe CUDA RPC tutorial's one-sided map): "Could not find suitable
    channel", and both ranks abort (seen on an H200)."""
    if (world or names_devices(device_maps, devices)) and (_cuda_fork.cuda_available() if cuda is None else cuda):
        return [*CUDA_CHANNELS, *BASIC_CHANNELS]
    return list(BASIC_CHANNELS)


def check(what: str, device_maps: Mapping[str, Mapping[Any, Any]] | None = None,
          devices: Sequence[Any] | None = None) -> None:
    """Refuse options that name devices where the world cannot move CUDA
    tensors; ``what`` is the call that asked, for the message."""
    if not names_devices(device_maps, devices):
        return
    import torch

    if not _cuda_fork.cuda_available():
        raise Unsupported(
            f"{what} asks for CUDA tensors between workers, but CUDA is not available here (torch "
            f"{torch.__version__}, torch.cuda.is_available() is False). The harness runs TensorPipe over its TCP "
            f"transport with its basic channel, which moves CPU tensors only; where CUDA is available it adds "
            f"TensorPipe's CUDA channels ({', '.join(CUDA_CHANNELS)}) and keeps the program's device maps. To test "
            f"this program here, build its options without device_maps/devices (and keep its tensors on the CPU) "
            f"when torch.cuda.is_available() is False, as the tutorials choose their device."
        )
    from .context import current_context
    from .faults import uses_faulty_agent

    ctx = current_context()
    if ctx is not None and uses_faulty_agent(ctx.faults, ctx.fuzz):
        raise Unsupported(
            f"{what} asks for CUDA tensors between workers, but this world runs torch's faulty TensorPipe agent "
            f"(for its message faults or schedule fuzzing), whose options take no device maps: run it without "
            f"msgfail/msgdelay faults and fuzz, or without device maps"
        )


def _describe(call: str, **arguments: Any) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in arguments.items() if value is not None)
    return f"{call}({shown})"


def install() -> None:
    """Check the devices a program's ``TensorPipeRpcBackendOptions`` names,
    in its constructor, ``set_device_map`` and ``set_devices`` (idempotent)."""
    from torch.distributed.rpc import options as rpc_options

    cls = rpc_options.TensorPipeRpcBackendOptions
    if getattr(cls.__init__, _MARK, False):
        return
    init, set_device_map, set_devices = cls.__init__, cls.set_device_map, cls.set_devices

    @functools.wraps(init)
    def checked_init(self: Any, *, device_maps: Any = None, devices: Any = None, **kwargs: Any) -> None:
        check(_describe("TensorPipeRpcBackendOptions", device_maps=device_maps, devices=devices), device_maps,
              devices)
        init(self, device_maps=device_maps, devices=devices, **kwargs)

    @functools.wraps(set_device_map)
    def checked_set_device_map(self: Any, to: str, device_map: Any) -> Any:
        check(f"TensorPipeRpcBackendOptions.set_device_map({to!r}, {device_map!r})", {to: device_map})
        return set_device_map(self, to, device_map)

    @functools.wraps(set_devices)
    def checked_set_devices(self: Any, devices: Any) -> Any:
        check(f"TensorPipeRpcBackendOptions.set_devices({devices!r})", None, devices)
        return set_devices(self, devices)

    replaced: dict[str, Callable[..., Any]] = {"__init__": checked_init, "set_device_map": checked_set_device_map,
                                               "set_devices": checked_set_devices}
    for name, wrapper in replaced.items():
        setattr(wrapper, _MARK, True)
        setattr(cls, name, wrapper)


# -- the world option ``devices`` ------------------------------------------------------------


def rank_device(devices: Sequence[str], rank: int, device_count: int) -> str:
    """Rank ``rank``'s device under the world option ``devices`` (checked:
    ``()`` for the CPU, ``("cuda",)``, or ``cuda:N``s): ``cuda`` gives rank r
    ``cuda:(r mod device_count)``, a list is taken round-robin."""
    if not devices:
        return "cpu"
    if tuple(devices) == ("cuda",):
        return f"cuda:{rank % max(device_count, 1)}"
    return devices[rank % len(devices)]


def world_device_maps(devices: Sequence[str], names: Sequence[str], rank: int,
                      device_count: int) -> dict[str, dict[str, str]]:
    """The device maps a run world's rank ``rank`` gets: its device to each
    peer's, so that an entry can ``rpc_sync`` CUDA tensors to any rank.
    Every pair maps both ways alike, as TensorPipe requires."""
    mine = rank_device(devices, rank, device_count)
    return {name: {mine: rank_device(devices, peer, device_count)}
            for peer, name in enumerate(names) if peer != rank}


def sharing_note(devices: Sequence[str], world_size: int, device_count: int) -> str:
    """For a world's report: its devices, and whether ranks share them."""
    if not devices:
        return ""
    used = {rank_device(devices, rank, device_count) for rank in range(world_size)}
    label = ",".join(devices)
    if len(used) < world_size:
        return f"{label} ({world_size} ranks on {len(used)} GPU(s), shared round-robin)"
    return label


def require_world_devices(devices: Sequence[str], *, where: str, faulty_agent: bool) -> int:
    """Before any process starts: the number of CUDA devices a world that
    asks for ``devices`` can use, or :class:`Unsupported` saying why it
    cannot run here (no CUDA, an index past the devices there are, or torch's
    faulty agent, whose options take no device maps). Asked through NVML,
    which leaves this process fork-safe (``_cuda_fork``)."""
    if not devices:
        return 0
    import torch

    asked = ",".join(devices)
    if not _cuda_fork.cuda_available():
        raise Unsupported(f"{where}: devices={asked!r} asks for CUDA, but CUDA is not available here (torch "
                          f"{torch.__version__}); run it on a machine with a GPU, or without devices")
    count = torch.cuda.device_count()
    past = [device for device in devices if device != "cuda" and int(device.split(":")[1]) >= count]
    if past:
        raise Unsupported(f"{where}: devices={asked!r} names {', '.join(past)}, but this machine has {count} "
                          f"CUDA device(s) (cuda:0..cuda:{count - 1})")
    if faulty_agent:
        raise Unsupported(f"{where}: devices={asked!r} with message faults or schedule fuzzing: torch's faulty "
                          "agent, which those need, takes no device maps")
    return count


def require_nccl_devices(devices: Sequence[str], world_size: int | None, *, where: str) -> int:
    """Before any process starts: the number of CUDA devices an nccl group
    of ``world_size`` ranks can use, or :class:`Unsupported` saying why it
    cannot run here. NCCL needs one GPU a rank: two ranks on one device are
    refused by NCCL itself ("Duplicate GPU detected") once every rank is up.
    ``world_size`` None (the option alone, before a world has a size): CUDA
    only."""
    import torch

    if not _cuda_fork.cuda_available():
        gpus = "a GPU for each rank" if world_size is None else f"{world_size} GPUs"
        raise Unsupported(f"{where}: process_group='nccl' needs one GPU a rank, but CUDA is not available here "
                          f"(torch {torch.__version__}); use process_group='gloo', or run it on a machine with "
                          f"{gpus}")
    count = torch.cuda.device_count()
    if world_size is None:
        return count
    placed = devices or ("cuda",)
    gpus = {rank_device(placed, rank, count) for rank in range(world_size)}
    if len(gpus) < world_size:
        has = f"{count} GPU(s)" if tuple(placed) == ("cuda",) else f"devices={','.join(placed)!r}"
        raise Unsupported(f"{where}: process_group='nccl' needs one GPU a rank: {world_size} ranks, but {has}; "
                          "use fewer ranks, or process_group='gloo'")
    return count
