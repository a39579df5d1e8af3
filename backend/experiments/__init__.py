"""Saved experiment configs."""
