"""Protocol buffer messages, generated from the top-level proto/ sources at install time."""
