"""Applications built on abcast: `abcast demo bank` (the replicated bank account)."""
