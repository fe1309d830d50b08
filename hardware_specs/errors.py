"""The one exception type for bad input, defined in the lowest layer so every layer raises it."""


class InputError(ValueError):
    """Bad input: the message is one line that names the bad value and what is accepted."""
