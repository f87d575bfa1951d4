"""Logging an agent in outside training: credentials, the server's login, its throttles.

Credentials come from the environment (``MAPLE_SHOWDOWN_USERNAME``,
``MAPLE_SHOWDOWN_PASSWORD``) or from a file given on the command line, never from the
YAML config; they are never printed, saved in a checkpoint or written to metrics. A
loopback server (the managed one runs ``--no-security``) needs no password; any other
server gets the normal login through its login server, and our messages are spaced so its
chat throttle never drops an order.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from ..errors import UserError

USERNAME_ENV = "MAPLE_SHOWDOWN_USERNAME"
PASSWORD_ENV = "MAPLE_SHOWDOWN_PASSWORD"
# play.pokemonshowdown.com's login server, which the public servers trust.
DEFAULT_LOGIN_URL = "https://play.pokemonshowdown.com/action.php?"
# Showdown lets an ordinary user send a message every 600 ms before it queues and then drops them.
REMOTE_SEND_INTERVAL_S = 0.65


@dataclass
class Credentials:
    username: str
    password: Optional[str] = field(default=None, repr=False)  # repr: never shown


def is_loopback(url: str) -> bool:
    host = urlsplit(url if "://" in url else "http://" + url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


def read_credentials_file(path: str) -> Credentials:
    """``username: NAME`` and ``password: SECRET`` lines (``#`` comments allowed)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UserError(f"cannot read credentials file {path}: {e.strerror}") from None
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        cut = min((i for i in (line.find(":"), line.find("=")) if i >= 0), default=-1)
        key, sep, value = (line[:cut], line[cut], line[cut + 1:]) if cut >= 0 else (line, "", "")
        if sep and key.strip().lower() in ("username", "password"):
            values[key.strip().lower()] = value.strip()
    if not values.get("username"):
        raise UserError(f"credentials file {path} has no 'username: NAME' line")
    return Credentials(values["username"], values.get("password") or None)


def credentials_for(server_url: str, credentials_file: Optional[str], default_username: str) -> Credentials:
    """The account to log in with: the file, else the environment, else (loopback only) a
    fresh guest name. A non-loopback server needs a username and a password."""
    if credentials_file:
        creds = read_credentials_file(credentials_file)
    elif os.environ.get(USERNAME_ENV):
        creds = Credentials(os.environ[USERNAME_ENV], os.environ.get(PASSWORD_ENV) or None)
    else:
        creds = Credentials(default_username)
    if not is_loopback(server_url) and creds.password is None:  # (the default name has none)
        raise UserError(f"{server_url} is not a loopback server: log in with a registered account "
                        f"({USERNAME_ENV} and {PASSWORD_ENV} in the environment, or --credentials FILE "
                        f"with 'username:' and 'password:' lines)")
    if len(creds.username) > 18:
        raise UserError("a Showdown user name has at most 18 characters")
    return creds


def throttle_sends(ps_client, interval_s: float = REMOTE_SEND_INTERVAL_S) -> None:
    """Space this client's messages ``interval_s`` apart, in order (a remote server's chat
    throttle would otherwise drop orders sent in a burst)."""
    send = ps_client.send_message
    lock = asyncio.Lock()
    last = [0.0]

    async def spaced(message: str, room: str = "", message_2: Optional[str] = None):
        async with lock:
            wait = last[0] + interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            last[0] = time.monotonic()
            return await send(message, room, message_2)

    ps_client.send_message = spaced
