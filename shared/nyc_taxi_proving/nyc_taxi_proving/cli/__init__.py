"""Entry points of `bash run` for the proving tools: demo, fixtures, team, chaos, clean, upgrade-check."""
