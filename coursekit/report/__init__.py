"""For the instructor: the scores, grades files, LMS files and class report taken home."""
