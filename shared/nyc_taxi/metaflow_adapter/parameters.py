"""A declared run parameter (``nyc_taxi.core.jobs``) as a flow's Metaflow Parameter: the same name,
default and help as the DAG's Param made from the same declaration. What a value must be is checked
where the command line is read (``nyc_taxi.metaflow_adapter.__main__``) and again by the flow's first
step, for runs started any other way."""

from __future__ import annotations

from metaflow import Parameter

from nyc_taxi.core.jobs import Parameter as Declared


def parameter(declared: Declared, required: bool = False) -> Parameter:
    kwargs = {"type": declared.kind, "help": declared.description, "required": required}
    if declared.default is not None:
        kwargs["default"] = declared.default
    return Parameter(declared.name, **kwargs)
