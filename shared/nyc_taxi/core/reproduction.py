"""What reproducing a run answers (`bash run lineage --reproduce`): each output computed again from the input
versions the lineage recorded, compared with what the run wrote; or why that cannot be done."""

from __future__ import annotations

from dataclasses import dataclass, field


class Unreproducible(Exception):
    """An input of the run can no longer be read (an expired snapshot, a landed version not retained, a record
    missing): the answer to give, not a failure of the tool."""


@dataclass
class Comparison:
    """One output of a run against its recomputation."""

    dataset: str
    version: str  # the version the run wrote
    compared: int  # rows recomputed
    differences: int = 0
    differing: list[tuple] = field(default_factory=list)  # the first ones: (key or side, as written, as recomputed)

    @property
    def equal(self) -> bool:
        return self.differences == 0

    @classmethod
    def of(cls, dataset: str, version, written: dict, recomputed: dict, limit: int = 20) -> Comparison:
        """Rows keyed alike: every key either side has, compared by value."""
        keys = sorted(set(written) | set(recomputed), key=str)
        differing = [(k, written.get(k), recomputed.get(k)) for k in keys if written.get(k) != recomputed.get(k)]
        return cls(dataset, str(version), len(recomputed), len(differing), differing[:limit])

    def line(self) -> str:
        if self.equal:
            return f"{self.dataset} @ {self.version}: reproduced: {self.compared} rows equal"
        lines = [f"{self.dataset}: {self.differences} of {self.compared} rows differ (@ {self.version})"]
        lines += [f"    {key}: written {written!r}, recomputed {again!r}" for key, written, again in self.differing]
        return "\n".join(lines)
