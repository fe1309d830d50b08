"""The one exception type that carries a user-facing message about bad input."""


class InputError(ValueError):
    """Bad input: the message is one line that names the bad value and what is accepted."""
