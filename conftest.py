"""Repository-wide pytest setup: keep every ROS test on loopback and on its own domain.

Set before anything imports rclpy, so every test process (and the subprocesses it starts,
which inherit the environment) talks only to 127.0.0.1 and only to this run.
"""

import os
import random

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
# A per-run domain (1..101 are valid everywhere); an explicit CROSSSPEC_TEST_DOMAIN_ID wins.
# Under pytest-xdist each worker gets its own (the run's base, inherited from the controller,
# plus the worker's number), so two workers' graphs never hear each other.
_base = int(os.environ.setdefault("CROSSSPEC_TEST_DOMAIN_BASE",
                                  str(random.SystemRandom().randint(1, 101))))
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_index = int(_worker[2:]) if _worker[2:].isdigit() else 0
os.environ["ROS_DOMAIN_ID"] = os.environ.get(
    "CROSSSPEC_TEST_DOMAIN_ID", str(1 + (_base - 1 + _index) % 101))
os.environ.setdefault("RCUTILS_LOGGING_BUFFERED_STREAM", "1")
# Nodes and commands step their models eager (the static runtime uncompiled): compiling costs
# seconds per shape; the tests of compiled steps lift this themselves.
os.environ.setdefault("CROSSSPEC_NO_COMPILE", "1")
