"""For the instructor and the LMS: filing what an LMS gave into submitted/, and handing feedback back."""
