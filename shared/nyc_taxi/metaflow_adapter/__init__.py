"""Metaflow's room: its configuration from the project settings, and lineage as a flow decorator."""
