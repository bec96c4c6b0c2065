import os
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")  # tests draw figures without a screen
# a grading run keeps its kernel factory for the next run of its folder (coursekit.grade.kept): the
# suite's hundreds of course folders would each leave one; the tests of keeping ask for it
os.environ["COURSE_KEEP_WARM"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent / "notebooks" / "given"))   # a chapter's own files


def pytest_configure(config):
    """Under pytest-xdist each worker takes its share of the cores for PyTorch's own
    threads: two workers each spinning two threads on two cores made the in-process
    checks four to five times slower (tests/test_grading_inprocess.py on two workers: 532 s,
    and 112 s with one thread each)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if os.environ.get("PYTEST_XDIST_WORKER") and workers > 1:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))   # the kernels and commands a test starts, too
        import torch
        torch.set_num_threads(share)


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium under Playwright, one per test module (tests/browser.py)."""
    import browser
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = browser.launch_chromium(pw)
        yield b
        b.close()


@pytest.fixture(autouse=True)
def _course_language_zh():
    """Every test starts and ends with the default language (zh)."""
    from helpers import set_language
    set_language("zh")
    yield
    set_language("zh")



@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """Say loudly, as the last thing before the totals, when the browser tests
    did not run (no Chromium here): a green run without them has not looked at
    a single page."""
    yield
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "test_browser.py::" in r.nodeid]
    if skipped:
        why = skipped[0].longrepr[2] if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
        terminalreporter.write_sep("!", f"{len(skipped)} {why.removeprefix('Skipped: ')}", yellow=True, bold=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep `--dist loadgroup` grouping by `xdist_group` on pytest 9.2.

    pytest-xdist 3.8 groups tests by appending "@<group>" to `item._nodeid`,
    but pytest 9.2 keeps node ids in `item._id`, so the suffix is lost and
    grouped tests are spread over all workers (pytest-xdist issue #1386).
    Append it where xdist could not; a no-op once xdist does it itself."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own suffix works
        return
    for item in items:
        groups = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                  for m in item.iter_markers("xdist_group")}
        if groups and "@" not in item.nodeid.rpartition("]")[2] and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(groups))}")
