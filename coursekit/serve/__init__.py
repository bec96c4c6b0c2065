"""For the course server: the grading service that grades each submission as it lands."""
