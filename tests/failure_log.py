"""Failures written down as they happen. With ``RPC_HARNESS_FAILURE_LOG`` set
to a path, each failed test's id and report are appended to that file the
moment pytest receives them (in the xdist controller, not in its workers).

``tools/gpu_check.sh`` sets it: a GPU machine is lent for minutes, a suite
stopped at its time limit prints no failure sections, and there may be no
time to run it again. (On an H200, a whole suite stopped at 99 % named 13
failures and said nothing of why.)"""

from __future__ import annotations

import os

ENV = "RPC_HARNESS_FAILURE_LOG"


def pytest_runtest_logreport(report):
    path = os.environ.get(ENV)
    if not path or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(path, "a") as file:
        file.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
