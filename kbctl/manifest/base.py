"""The manifest models' common ground: the base model (strict keys, camelCase, frozen, storable text), the API
version, `Metadata` (name and labels), the strict field types, reading a model back from the store, and the helpers
the models' validators and serializers share. The KnowledgeBase models (kbctl.manifest.models) and the Sync
(kbctl.manifest.sync) build on it."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails

from kbctl.errors import StoreError
from kbctl.manifest._field_checks import (
    DNS_LABEL,
    NAME_MAX,
    check_dns_label,
    check_label_key,
    check_label_value,
    check_text,
)

ApiVersion = Literal["kbctl.dev/v1alpha1"]
API_VERSION: Final[ApiVersion] = "kbctl.dev/v1alpha1"  # mypy checks these two stay in step with the types

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

_StrictInt = Annotated[int, Strict()]
_StrictFloat = Annotated[float, Strict()]  # strict still takes ints; it refuses strings and booleans
_LabelKey = Annotated[str, AfterValidator(check_label_key)]
_LabelValue = Annotated[str, AfterValidator(check_label_value)]


_Stored = TypeVar("_Stored", bound=BaseModel)


def read_stored(model: type[_Stored], data: Any, what: str) -> _Stored:
    """A model read back from what the store holds (a manifest, a version's spec.retrieval or spec.answer). Data this
    kbctl cannot read (written by another version of it, or edited by hand) is a StoreError naming `what`, never
    pydantic's ValidationError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StoreError(
            f"{what} in the store is not readable by this kbctl ({where}: {first['msg']}): apply its manifest again"
        ) from None


class _Model(BaseModel):
    """Shared configuration: strict keys, snake_case in Python, camelCase in YAML, immutable; strings without
    NUL or lone surrogates."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _valid_characters(cls, value: Any) -> Any:
        # Every string field, and the keys and values of string mappings (labels), hold only storable text.
        if isinstance(value, str):
            check_text(value)
        elif isinstance(value, dict):
            for item in (*value.keys(), *value.values()):
                if isinstance(item, str):
                    check_text(item)
        return value


class Metadata(_Model):
    """Identity of an object (a knowledge base, a Sync): its name and labels."""

    name: str = Field(
        description="DNS-1123 label: lowercase letters, digits and '-', at most 63 characters.",
        json_schema_extra={"pattern": DNS_LABEL, "maxLength": NAME_MAX},
    )
    labels: dict[_LabelKey, _LabelValue] = Field(
        default_factory=dict, description="Kubernetes-style labels (string keys and values)."
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_dns_label(value)


def _field_error(field: str, message: str) -> InitErrorDetails:
    """An error located at `field` of the model being validated (raised together from a model validator)."""
    return InitErrorDetails(type="value_error", loc=(field,), input=None, ctx={"error": ValueError(message)})


def _without_unset(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A dump without an optional field left unset: a field added later must not change the dump (and so every
    spec hash and stored manifest) of the manifests that do not use it, or every knowledge base would get a new
    version."""
    for key in keys:
        if data.get(key, ...) is None:
            del data[key]
    return data
