"""Entry points of `bash run`."""
