"""sluice's errors: every one is a SluiceError; callers branch on the subclasses."""

from __future__ import annotations


class SluiceError(Exception):
    """Any error of sluice's clients."""


class InvalidArgumentError(SluiceError, ValueError):
    """Bad input, refused before anything was consumed; field names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"sluice: invalid {field}: {reason}")
        self.field = field
        self.reason = reason


class PolicyNotFoundError(SluiceError, LookupError):
    """The policy named is not one the service holds."""


class OperationNotSupportedError(SluiceError):
    """The door or the store cannot do this for the policy's strategy."""


class ServiceUnavailableError(SluiceError):
    """The service or store could not answer, and the fail mode is closed (or the call is not a check)."""


class UnauthenticatedError(SluiceError):
    """The service refused the token (or its absence), or the token lacks the scope the call needs."""
