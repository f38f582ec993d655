import time

import pytest


def wait_gone(pids, within=10.0):
    """Pids still alive (not zombies) after up to ``within`` seconds."""
    until = time.monotonic() + within
    alive = list(pids)
    while alive and time.monotonic() < until:
        alive = [pid for pid in alive if is_alive(pid)]
        if alive:
            time.sleep(0.05)
    return alive


def is_alive(pid):
    try:
        with open(f"/proc/{pid}/status") as file:
            return "State:\tZ" not in file.read()
    except OSError:
        return False


@pytest.fixture
def assert_gone():
    def check(pids, within=10.0):
        __tracebackhide__ = True
        left = wait_gone(pids, within)
        assert not left, f"rank processes outlived their world: {left}"

    return check
