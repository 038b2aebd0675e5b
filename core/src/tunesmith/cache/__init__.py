"""Cache layers (memory aside), entries and keys."""
