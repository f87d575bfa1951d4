"""User errors: what the user asked for cannot be done. The CLI prints them as one line
``maple-async: error: ...`` and exits with status 2, without a traceback."""


class UserError(Exception):
    """An error in what the user asked for (config, server, checkpoint, ...)."""


class ConfigError(UserError, ValueError):
    """A user error in the configuration (bad key, type or value)."""
