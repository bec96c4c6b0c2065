"""nbgrader configuration for the course.

The course root is the folder of this file, so the same file works in a clone,
in a temporary grading workspace and on a JupyterHub. The gradebook is
nbgrader's SQLite file unless COURSE_DB_URL names another SQLAlchemy URL
(for example postgresql://user@host/course). The course id, the gradebook's
address and the cell time limit come from grading/protocol.py, which the
grader and the grading kernels share; a copy of the course without grading/
(a student's) keeps nbgrader's defaults for them.
"""
import os

try:
    from grading import protocol
except ImportError:
    protocol = None

c = get_config()  # noqa: F821 (provided by traitlets)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
if protocol is not None:
    c.CourseDirectory.course_id = protocol.COURSE_ID
    if os.environ.get(protocol.DB_URL_ENV):
        c.CourseDirectory.db_url = os.environ[protocol.DB_URL_ENV]
    # A runaway cell must not hold up a whole class.
    c.Execute.timeout = protocol.limit(protocol.ENV_CELL_TIMEOUT, protocol.CELL_TIMEOUT_S)
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# Students see these stubs where the solutions were.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# nbgrader's autograde steps, in its order, with two of ours in place of its own:
# - the lecture cells a chapter marks `replay` (output independent of the student,
#   nothing later reads what they define) are not run: their recorded output is put
#   in their place (coursekit.grade.replay). Validate runs every cell.
# - a notebook's grades go to the gradebook in one commit, not one per cell
#   (coursekit.grade.batched).
c.Autograde.autograde_preprocessors = [
    "coursekit.grade.replay.Execute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "coursekit.grade.batched.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

c.Execute.interrupt_on_timeout = True
c.Execute.raise_on_iopub_timeout = False

# The feedback page speaks the chapter's language and shows the one score
# (coursekit.grade.feedback.CourseFrame); it never shows hidden test code (nbgrader
# #917, #1363): the hidden block is removed from each test cell, and an error in
# a graded cell keeps only its message (a traceback would quote the failing
# hidden line); no internal token reaches the student (StudentOutputs).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "coursekit.grade.feedback.CourseFrame",
    "coursekit.grade.feedback.StudentOutputs",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
