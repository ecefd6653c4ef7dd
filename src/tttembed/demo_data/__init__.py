"""Shipped demo questions and graded labels over Python standard-library docstrings."""
