"""The scenario's data: seeded, learnable MNIST-shaped digits, or real MNIST
through torchvision when it imports and ``Config.mnist_root`` points at local
files (nothing is downloaded). Every stream derives from the world seed."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import rpc_harness

from .config import NAME, Config


def _torchvision_datasets() -> tuple[Any, str]:
    """torchvision.datasets, or None and why not. The CPU torch wheel here
    makes ``import torchvision`` (a CUDA build) raise all sorts of errors."""
    try:
        from torchvision import datasets
    except Exception as error:  # noqa: BLE001 - any failure means "not available"
        return None, f"torchvision unavailable ({type(error).__name__}: {str(error)[:120]})"
    return datasets, "torchvision"


def _gaussian_kernel(size: int, sigma: float) -> torch.Tensor:
    axis = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(axis**2) / (2 * sigma**2))
    k = torch.outer(g, g)
    return (k / k.sum()).view(1, 1, size, size)


def digit_prototypes(world_seed: int) -> torch.Tensor:
    """Ten 28x28 class prototypes: seeded noise, smoothed, thresholded into
    sparse blobby strokes (so that classes differ more than their shared
    background), confined to the central 20x20 box like MNIST digits,
    normalised to zero mean and unit std."""
    gen = torch.Generator().manual_seed(rpc_harness.derive_seed(world_seed, NAME, "prototypes") % 2**62)
    raw = torch.rand(10, 1, 28, 28, generator=gen)
    smooth = F.conv2d(raw, _gaussian_kernel(9, 1.5), padding=4)
    smooth = (smooth - smooth.mean(dim=(2, 3), keepdim=True)) / smooth.std(dim=(2, 3), keepdim=True)
    ink = (smooth - 0.5).clamp(min=0.0)
    window = torch.zeros(1, 1, 28, 28)
    window[..., 4:24, 4:24] = 1.0
    protos = (ink * window).squeeze(1)
    return (protos - protos.mean(dim=(1, 2), keepdim=True)) / protos.std(dim=(1, 2), keepdim=True)


def synthetic_digits(
    n: int, world_seed: int, label: str, noise: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` seeded digits ``(x [n,1,28,28], y [n])``: each a class prototype
    rolled by up to 2 pixels each way, scaled by 0.7..1.3, plus pixel noise.
    ``label`` names the stream (a trainer's shard, the held-out set)."""
    protos = digit_prototypes(world_seed)
    gen = torch.Generator().manual_seed(
        rpc_harness.derive_seed(world_seed, NAME, "digits", label) % 2**62
    )
    y = torch.randint(0, 10, (n,), generator=gen)
    shifts = torch.randint(-2, 3, (n, 2), generator=gen).tolist()
    scale = 0.7 + 0.6 * torch.rand(n, 1, 1, generator=gen)
    pixels = noise * torch.randn(n, 28, 28, generator=gen)
    x = torch.stack(
        [
            torch.roll(protos[c], shifts=(dy, dx), dims=(0, 1))
            for c, (dy, dx) in zip(y.tolist(), shifts, strict=True)
        ]
    )
    return (x * scale + pixels).unsqueeze(1), y


def _mnist(
    root: str, train: bool, n: int, world_seed: int, label: str, datasets: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    # No download and no transform objects: read the tensors and normalise
    # with MNIST's usual mean/std, so this needs torchvision.datasets only.
    ds = datasets.MNIST(root, train=train, download=False)
    data = ds.data if isinstance(ds.data, torch.Tensor) else torch.as_tensor(ds.data)
    targets = ds.targets if isinstance(ds.targets, torch.Tensor) else torch.as_tensor(ds.targets)
    gen = torch.Generator().manual_seed(
        rpc_harness.derive_seed(world_seed, NAME, "mnist", label) % 2**62
    )
    index = torch.randperm(len(data), generator=gen)[:n]
    x = (data[index].float() / 255.0 - 0.1307) / 0.3081
    return x.unsqueeze(1), targets[index].long()


def data_source(config: Config) -> str:
    """Where this config's data comes from: ``mnist:<root>`` or ``synthetic (...)``."""
    if config.mnist_root is None:
        return "synthetic"
    datasets, why = _torchvision_datasets()
    if datasets is None:
        return f"synthetic ({why}; mnist_root={config.mnist_root!r} ignored)"
    return f"mnist:{config.mnist_root}"


def _samples(
    config: Config, world_seed: int, label: str, n: int, train: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    if config.mnist_root is not None:
        datasets, _ = _torchvision_datasets()
        if datasets is not None:
            return _mnist(config.mnist_root, train, n, world_seed, label, datasets)
    return synthetic_digits(n, world_seed, label, config.noise)


def trainer_batches(
    config: Config, world_seed: int, trainer: str
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``trainer``'s own shard, as ``config.batches`` batches (from the world seed)."""
    x, y = _samples(
        config, world_seed, f"train:{trainer}", config.batches * config.batch_size, train=True
    )
    return list(zip(x.split(config.batch_size), y.split(config.batch_size), strict=True))


def held_out_set(config: Config, world_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out set the accuracy is measured on."""
    return _samples(config, world_seed, "test", config.test_size, train=False)


EVAL_BATCH = 128


def eval_batches(config: Config, world_seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The held-out set in the batches every evaluation uses (trainers through
    RPC, the server locally, the baseline), so that all three compute alike."""
    x, y = held_out_set(config, world_seed)
    return list(zip(x.split(EVAL_BATCH), y.split(EVAL_BATCH), strict=True))


def get_accuracy(test_loader: list[tuple[torch.Tensor, torch.Tensor]], model: Any) -> float:
    """Fraction of the samples that ``model`` (a Net or a TrainerNet)
    classifies right, without dropout: the tutorial's ``get_accuracy``,
    calling ``model(data)`` -- not its ``model(data, -1)``."""
    correct = total = 0
    with torch.no_grad():
        for data, target in test_loader:
            pred = model(data).argmax(dim=1)
            correct += int((pred == target).sum())
            total += len(target)
    return correct / total

