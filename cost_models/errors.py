"""The one exception type that carries a user-facing message about bad input (see
`paraplan.hardware_specs.errors`, where it is defined so the lowest layer can raise it too)."""

from paraplan.hardware_specs.errors import InputError

__all__ = ["InputError"]
