"""Shared package."""
