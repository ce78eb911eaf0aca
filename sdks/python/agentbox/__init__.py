"""agentbox: a Python client of the agentbox daemon's HTTP/SSE API.

    import agentbox

    with agentbox.Client() as ab:  # AGENTBOX_URL / AGENTBOX_TOKEN, or the local daemon
        s = ab.create_session("mock")
        ...

Client is synchronous, AsyncClient the same calls as coroutines. Answers are
plain dicts typed by agentbox.types (the API's schemas) and agentbox.events
(the universal events), both generated from the daemon's own documents.
"""

from ._config import DEFAULT_URL, ConfigError, read_token_file
from ._core import end_of_turn
from .aclient import AsyncClient, AsyncEventStream
from .client import Client, EventStream, PermissionDecision
from .errors import PROBLEM_TYPE_BASE, AgentboxError, APIError, SessionEndedError, StreamError
from .events import EVENT_TYPES, AnyEvent, Event

__all__ = [
    "DEFAULT_URL",
    "EVENT_TYPES",
    "PROBLEM_TYPE_BASE",
    "APIError",
    "AgentboxError",
    "AnyEvent",
    "AsyncClient",
    "AsyncEventStream",
    "Client",
    "ConfigError",
    "Event",
    "EventStream",
    "PermissionDecision",
    "SessionEndedError",
    "StreamError",
    "end_of_turn",
    "read_token_file",
]
