"""Check DataHub records the way a DataHub server (GMS) checks a proposal before it stores it, with the
model of the installed acryl-datahub: the aspect is one the model knows, the entity type its URN names
has that aspect, and every URN field names an entity type its schema allows (`UrnValidation`).
`datahub check metadata-file` and DataHub Lite check none of the last two; a GMS refuses such a record,
and ordered delivery then holds back everything behind it.
"""

from __future__ import annotations

import copy
import functools


def _proposals(record: dict) -> list:
    """The proposals a record of DataHub's file format makes: itself, or each aspect of a snapshot."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.emitter.mcp_builder import mcps_from_mce
    from datahub.metadata.schema_classes import MetadataChangeEventClass

    record = copy.deepcopy(record)  # DataHub's from_obj changes what it is given
    if "proposedSnapshot" in record:
        return list(mcps_from_mce(MetadataChangeEventClass.from_obj(record)))
    return [MetadataChangeProposalWrapper.from_obj(record)]


def record_errors(record: dict) -> list[str]:
    """Every way ``record`` (a dict of DataHub's file format) breaks what a GMS checks; empty when none."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.emitter.mcp_builder import entity_supports_aspect
    from datahub.metadata.schema_classes import KEY_ASPECTS
    from datahub.utilities.urns.error import InvalidUrnError
    from datahub.utilities.urns.urn import Urn

    try:
        proposals = _proposals(record)
    except Exception as error:  # not a proposal or a snapshot event at all
        return [f"not a DataHub record: {type(error).__name__}: {error}"[:300]]
    errors: list[str] = []
    for proposal in proposals:
        where = f"{proposal.entityUrn} {proposal.aspectName}"
        if not isinstance(proposal, MetadataChangeProposalWrapper):
            errors.append(f"{where}: an aspect DataHub's model does not know")
            continue
        try:
            kind = Urn.from_string(proposal.entityUrn).entity_type
            _check_urns(proposal.aspect, where, errors)
        except InvalidUrnError as error:
            errors.append(f"{where}: {error}")
            continue
        if kind not in KEY_ASPECTS:
            errors.append(f"{where}: {kind} is not an entity type of DataHub's model")
            continue
        if not entity_supports_aspect(kind, type(proposal.aspect)) and proposal.aspectName != _key_aspect(kind):
            errors.append(f"{where}: a {kind} has no aspect {proposal.aspectName}")
        if not proposal.validate():
            errors.append(f"{where}: the aspect does not match its schema")
    return errors


def _key_aspect(kind: str) -> str:
    from datahub.metadata.schema_classes import KEY_ASPECTS

    return KEY_ASPECTS[kind].ASPECT_NAME


@functools.cache
def _urn_types() -> dict[str, str]:
    """The entity type of each typed URN a field may be declared as (``DatasetUrn``: dataset), by the
    name lowercased: the schema spells some differently from the class (``CorpuserUrn``)."""
    from datahub.metadata import urns

    return {
        name.lower(): cls.ENTITY_TYPE
        for name, cls in vars(urns).items()
        if name.endswith("Urn") and isinstance(getattr(cls, "ENTITY_TYPE", None), str)
    }


def _allowed(field) -> list[str] | None:
    """The entity types a URN field may name: its `UrnValidation`'s, else its declared type's (a field
    typed ``DatasetUrn`` holds a dataset's); None when any (plain ``Urn``, or a type the model has no
    class for, such as ``DatasetFieldUrn``)."""
    if validation := field.props.get("UrnValidation"):
        return validation["entityTypes"]
    typed = _urn_types().get(field.props.get("Urn", "Urn").lower())  # a type without a class: any
    return [typed] if typed else None


def _check_urns(value, where: str, errors: list[str]) -> None:
    """``errors`` += each URN field of ``value`` (an aspect or a record in it, at any depth) that names
    an entity type its field does not allow."""
    from avrogen.dict_wrapper import DictWrapper
    from datahub.utilities.urns.urn import Urn

    for field in value.RECORD_SCHEMA.fields:
        inner = value._inner_dict.get(field.name)
        if inner is None:
            continue
        allowed = _allowed(field)
        if allowed:
            for urn in inner if isinstance(inner, list) else [inner]:
                kind = Urn.from_string(urn).entity_type
                if kind not in allowed:
                    errors.append(f"{where}: {field.name} is a {kind} ({urn}), not {' or '.join(allowed)}")
        items = inner if isinstance(inner, list) else inner.values() if isinstance(inner, dict) else [inner]
        for item in items:
            if isinstance(item, DictWrapper):
                _check_urns(item, f"{where}.{field.name}", errors)
