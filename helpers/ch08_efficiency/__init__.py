"""ch08_efficiency: the chapter's demos and widgets (public; they give no answer away)."""
