"""ch02_causal_mask: the chapter's demos and widgets (public; they give no answer away)."""
