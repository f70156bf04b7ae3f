"""Chaos runs on the team deployment: its mission, clean and under faults (SIGKILL of any component at
seeded moments), and checks of the tables, files, lineage and delivery that do not trust the code
under test."""
