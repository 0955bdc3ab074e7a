"""Factories for DSL semantic tests: an app with one topology function, and its driver."""
from __future__ import annotations

from typing import Any, Callable, Iterator, List

import pytest

import streamkit as sk
from streamkit.testing import TestRecord, TopologyTestDriver

BuildFn = Callable[[sk.StreamsBuilder], None]


@pytest.fixture
def app_factory() -> Callable[..., sk.App]:
    """``app_factory(build=None, app_id="app", **settings)``: an App, optionally with a topology."""
    def make(build: BuildFn | None = None, app_id: str = "app", **settings: Any) -> sk.App:
        app = sk.App(app_id, **settings)
        if build is not None:
            app.topology(build)
        return app
    return make


@pytest.fixture
def driver_factory() -> Iterator[Callable[..., TopologyTestDriver]]:
    """``driver_factory(app)``: a TopologyTestDriver, closed after the test."""
    drivers: List[TopologyTestDriver] = []

    def make(app: sk.App, **kwargs: Any) -> TopologyTestDriver:
        driver = TopologyTestDriver(app, **kwargs)
        drivers.append(driver)
        return driver
    yield make
    for driver in drivers:
        driver.close()


@pytest.fixture
def drive(app_factory: Callable[..., sk.App],
          driver_factory: Callable[..., TopologyTestDriver]) -> Callable[..., TopologyTestDriver]:
    """``drive(build, app_id="app", **settings)``: the driver of a one-function app."""
    def make(build: BuildFn, app_id: str = "app", **settings: Any) -> TopologyTestDriver:
        return driver_factory(app_factory(build, app_id, **settings))
    return make


def rec(key: Any, value: Any, timestamp: int, headers: Any = None) -> TestRecord:
    """Shorthand for an expected output record."""
    return TestRecord(key, value, timestamp, headers)
