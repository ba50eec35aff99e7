"""Whether the current test failed, for fixtures that print logs only then.
A conftest.py imports both names: pytest registers the hook it finds there.
"""

import pytest


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):  # pylint: disable=unused-argument
    """Keep each phase's report on the item (item.rep_setup, .rep_call)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def call_failed(request):
    """The test of this fixture request failed (or never ran its body)."""
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed
