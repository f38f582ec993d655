"""The three scenarios of PyTorch's RPC tutorials, distributed and as a
single-process baseline, checked gradient for gradient.

``rl`` (an agent and its CartPole observers), ``rnn`` (the distributed RNN)
and ``parameter_server`` (the MNIST parameter server) are packages of the
shape :class:`rpc_harness.scenario.Scenario` describes, registered through the
``rpc_harness.scenarios`` entry-point group like anyone else's. What they
share is in ``_rpc`` (call helpers, the liveness rule, error text) and
``_threads`` (thread pinning).
"""
