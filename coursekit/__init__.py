"""The course's tooling, in rooms by who uses them: author, student, grade, serve, lms, report, base."""
