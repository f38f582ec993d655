"""rpc-harness's applications: the ``rpc-harness`` command (``cli``), its
benchmarks (``bench``) and the torchrun runner (``torchrun``).

They sit above both the library (the modules directly under ``rpc_harness``)
and the scenarios (``rpc_harness.scenarios``), which they find only through
the scenario registry.
"""
