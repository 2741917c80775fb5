"""Test helpers that live in the package (an independent instruction oracle)."""
