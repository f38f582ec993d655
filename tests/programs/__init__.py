"""RPC programs written the tutorials' way, as users have them: each has a
``run_worker(rank, world_size, ...)`` that calls ``rpc.init_rpc`` and
``rpc.shutdown`` itself, hard-codes ``MASTER_PORT``, and never imports the
harness. The tests run them under ``rpc_world.spawn`` unchanged."""
