"""The visible tests' probes, declared beside the hidden checks they mirror.

A chapter's grading module lists them in ``probes()``: fixed inputs, the reference that
computes the expected output, and the known bugs whose outputs the visible
test may recognise. ``coursekit/author/probes.py`` evaluates them once, at
build time, into ``helpers/probes/<chapter>.json`` (outputs and words only),
which the student's notebook reads (helpers.probes). ``ERRORS`` lists the
``(Raises(...), Bug)`` signs of known mistakes in an error message, shared the
same way (a dict from the name of the function under test to such a list keeps
each sign to its own exercise's test).

    def probes():
        return [Probe("calculator", args=calculator_inputs(), reference=ref_attention,
                      bugs=ATTENTION_BUGS, parts=("out", "weights"))]

(a function, so that the graded kernel, which imports the module, builds nothing.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from helpers.evidence import Tol

from .core import Bug

VISIBLE = Tol(1e-4, 1e-5, 1.0)      # what the visible tests accept: float32 rounding, with room


@dataclass(frozen=True)
class Probe:
    """One call of the student's function on fixed inputs, for a visible test.

    name      -- what the visible test asks for (``probes["calculator"]``)
    args      -- positional inputs (tensors, numbers, tuples of them)
    reference -- ``reference(*args, **kwargs)``: the expected output
    bugs      -- known bugs whose impl takes the same inputs; each is shown to
                 the student's test only when its output differs from the expected
    parts     -- names of a tuple output's parts (``("out", "weights")``)
    state     -- parameters (name -> tensor) the test loads into a student's module
    run_bug   -- how to get a bug's output when its impl is not ``impl(*args, **kwargs)``
    """
    name: str
    args: tuple = ()
    reference: Callable | None = None
    bugs: Sequence[Bug] = ()
    kwargs: dict = field(default_factory=dict)
    parts: tuple | None = None
    tol: Tol = VISIBLE
    state: dict | None = None
    run_bug: Callable[[Bug], Any] | None = None
    expected: Any = None

    def expected_output(self):
        if self.expected is not None:
            return self.expected
        return self.reference(*self.args, **self.kwargs)

    def bug_output(self, bug: Bug):
        if self.run_bug is not None:
            return self.run_bug(bug)
        return bug.impl(*self.args, **self.kwargs)
