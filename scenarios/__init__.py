"""The three scenarios of PyTorch's RPC tutorials, distributed and as a
single-process baseline, checked gradient for gradient.

Each module (``rl``, ``rnn``, ``parameter_server``) exposes the same shape:
``NAME``, ``FAILPOINTS``, ``MIN_WORLD_SIZE``, ``Config``, ``names(world_size)``,
``entry(ctx, config)``, ``baseline(config, world_size, seed)`` and
``run(config, world_size, seed, ...) -> ScenarioReport``.
"""

SCENARIOS = {
    "rl": "scenarios.rl",
    "rnn": "scenarios.rnn",
    "ps": "scenarios.parameter_server",
}


def load(name: str):
    """The scenario module for ``rl``, ``rnn`` or ``ps``."""
    import importlib

    try:
        return importlib.import_module(SCENARIOS[name])
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}") from None
