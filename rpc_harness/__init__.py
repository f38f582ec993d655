"""rpc-harness's applications: the ``rpc-harness`` command (``cli``), its
benchmarks (``bench``) and the torchrun runner (``torchrun``).

They sit above both the library (``harness``) and the scenarios, which they
find only through the scenario registry. The library itself is ``harness``.
"""
