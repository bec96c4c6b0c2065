"""ch05_block: the chapter's demos and widgets (public; they give no answer away)."""
