"""For the grader: the grading pipeline, its kernels and sandbox, and the feedback pages."""
