"""The red team's fixture: the cascades of one test file, closed when the file is done."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redteam.harness import Cascades


@pytest.fixture(scope="module")
def cascades() -> Iterator[Cascades]:
    pool = Cascades()
    yield pool
    pool.close()
