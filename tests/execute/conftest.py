"""Local Ray with 2 CPUs, started once for the Ray tests; skipped with a reason when
ray is missing or cannot start here."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(scope="package")
def ray_local():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'tttembed[ray]')")
    import ray

    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - any start-up failure is a skip here
        pytest.skip(f"local Ray cannot start here: {exc}")
    yield ray
    ray.shutdown()
