"""dlock_client: locks, read-write locks and semaphores on Redis with the dlock module.

```python
import dlock_client as dl

client = dl.Client.from_url("redis://127.0.0.1:6379/0")
with client.lock("invoice:7", fence=True) as held:
    write(held.token)
```

The asyncio API has the same names under :mod:`dlock_client.asyncio`.
"""

from . import asyncio, errors
from ._client import Backend
from ._protocol import Holder, LockInfo, Waiter
from ._sync import Acquirable, Bounded, Client, Held, Lock, Lost, ReadWriteLock, Semaphore
from .errors import *  # noqa: F403 (the exceptions, listed once in errors.__all__)

__version__ = "0.1.0"

__all__ = [
    "Acquirable",
    "Backend",
    "Bounded",
    "Client",
    "Held",
    "Holder",
    "Lock",
    "LockInfo",
    "Lost",
    "ReadWriteLock",
    "Semaphore",
    "Waiter",
    "asyncio",
]
__all__ += errors.__all__
