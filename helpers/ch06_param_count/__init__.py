"""ch06_param_count: the chapter's demos and widgets (public; they give no answer away)."""
