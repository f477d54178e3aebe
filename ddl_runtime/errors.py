"""The one error type ddl_runtime raises for user mistakes and job faults.

Every message is one line and names what it is about (the tensor, the ranks, the variable).
"""


class DDLError(RuntimeError):
    """A ddl_runtime failure: bad input, a bad job environment, or a collective that went wrong."""


class DDLInputError(DDLError, ValueError):
    """Bad input to a ddl_runtime call, detected locally before any communication."""


class DDLMismatchError(DDLError):
    """Ranks disagree about a collective (tensor names, shapes, dtypes or the operation)."""
