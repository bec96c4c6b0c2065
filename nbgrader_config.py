"""nbgrader configuration for the course.

The course root is the folder of this file, so the same file works in a clone,
in a temporary grading workspace and on a JupyterHub. The gradebook is
nbgrader's SQLite file unless COURSE_DB_URL names another SQLAlchemy URL
(for example postgresql://user@host/course).
"""
import os

c = get_config()  # noqa: F821 (provided by traitlets)

c.CourseDirectory.course_id = "transformer"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
if os.environ.get("COURSE_DB_URL"):
    c.CourseDirectory.db_url = os.environ["COURSE_DB_URL"]

# Students see these stubs where the solutions were.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A runaway cell must not hold up a whole class.
c.Execute.timeout = int(os.environ.get("COURSE_CELL_TIMEOUT", "120"))
c.Execute.interrupt_on_timeout = True
c.Execute.raise_on_iopub_timeout = False

# Feedback never shows hidden test code (nbgrader #917, #1363): the hidden
# block is removed from each test cell before the HTML is written, and an error
# in a graded cell keeps only its name and message (a traceback would quote the
# failing hidden line).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "coursekit.feedback.HideHiddenTestTracebacks",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
