"""A pytest plugin for scripts/s3_tests.py: deselects ceph/s3-tests tests by exact name.

pytest's -k matches substrings, so `test_object_raw_get` cannot be left out without
leaving out every `test_object_raw_get_*` too. scripts/s3_tests.py names the tests in
TALON_S3_TESTS_DESELECT (comma-separated) and loads this with `-p`.
"""

from __future__ import annotations

import os


def pytest_collection_modifyitems(config, items):
    names = {n for n in os.environ.get("TALON_S3_TESTS_DESELECT", "").split(",") if n}
    if not names:
        return
    keep = [item for item in items if item.name not in names]
    dropped = [item for item in items if item.name in names]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
