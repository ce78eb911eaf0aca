"""Where the daemon is and which token to send, the way the Go SDK and the
CLI find them: an explicit argument, else AGENTBOX_URL / AGENTBOX_TOKEN, else
for a daemon on this machine the token it wrote to its data directory."""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The daemon address when neither an argument nor AGENTBOX_URL names one.
DEFAULT_URL = "http://127.0.0.1:7777"
ENV_URL = "AGENTBOX_URL"
ENV_TOKEN = "AGENTBOX_TOKEN"
#: The file, in its data directory, where a daemon started without a token
#: keeps the one it made.
TOKEN_FILE_NAME = "token"


class ConfigError(Exception):
    """The address or the local token cannot be used."""


@dataclass(frozen=True)
class Endpoint:
    #: scheme://host[:port][/prefix] without a trailing slash; for a unix
    #: socket, http://agentbox.
    base_url: str
    #: The unix socket's path, or None for TCP.
    uds: str | None
    token: str | None
    #: The token was read from the daemon's data directory.
    token_from_file: bool = False


def data_dir(env: Mapping[str, str]) -> str | None:
    """The data directory of a daemon started with no --data-dir."""
    if env.get("AGENTBOX_DATA_DIR"):
        return env["AGENTBOX_DATA_DIR"]
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "agentbox")
    if env.get("HOME"):
        return os.path.join(env["HOME"], ".local", "share", "agentbox")
    return None


def read_token_file(path: str) -> str:
    """Reads a daemon's token file, refusing a symbolic link, a file that is
    not regular, and one other users can read or write or that another user
    owns: a token others can read is no secret."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"token file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise ConfigError(f"token file {path} can be read or written by other users "
                              f"(mode {stat.S_IMODE(st.st_mode):04o}); run chmod 600 {path}")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise ConfigError(f"token file {path} belongs to user {st.st_uid}, not to you")
        raw = os.read(fd, 1024)
    finally:
        os.close(fd)
    tok = raw.decode("ascii", "replace").strip()
    if not tok or any(c < "!" or c > "~" for c in tok):
        raise ConfigError(f"token file {path} does not hold a token")
    return tok


def is_local(url: str) -> bool:
    """Whether url names this machine: a unix socket, a loopback or
    unspecified address, or localhost."""
    u = urlsplit(url)
    if u.scheme == "unix":
        return True
    if u.scheme not in ("http", "https"):
        return False
    host = (u.hostname or "").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def resolve(url: str | None, token: str | None, env: Mapping[str, str] | None = None,
            local_token: bool = True) -> Endpoint:
    """Resolves the daemon's address and token (see the module doc)."""
    env = os.environ if env is None else env
    url = url or env.get(ENV_URL) or DEFAULT_URL
    token = token or env.get(ENV_TOKEN) or None
    u = urlsplit(url)
    if u.query or u.fragment or u.username or u.password:
        raise ConfigError(f"base URL {url!r}: no query, fragment or credentials allowed")
    uds: str | None = None
    if u.scheme in ("http", "https"):
        if not u.netloc:
            raise ConfigError(f"base URL {url!r} has no host")
        base = f"{u.scheme}://{u.netloc}{u.path.rstrip('/')}"
    elif u.scheme == "unix":
        if u.netloc or not u.path:
            raise ConfigError(f"base URL {url!r}: want unix:///absolute/path.sock")
        uds, base = u.path, "http://agentbox"
    else:
        raise ConfigError(f"base URL {url!r}: scheme must be http, https or unix")
    if token is None and local_token and is_local(url):
        d = data_dir(env)
        if d is not None:
            try:
                token = read_token_file(os.path.join(d, TOKEN_FILE_NAME))
            except FileNotFoundError:
                token = None
            if token is not None:
                _check_owner(u, uds)
                return Endpoint(base_url=base, uds=uds, token=token, token_from_file=True)
    return Endpoint(base_url=base, uds=uds, token=token)


def _check_owner(u: SplitResult, uds: str | None) -> None:
    """Refuses to send the data directory's token to a daemon that belongs
    to another user (one who took the port or socket while ours is down).
    Linux only, checked once when the client is made: the Go SDK checks
    every connection."""
    if not sys.platform.startswith("linux"):
        return
    me = os.geteuid()
    if uds is not None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(uds)
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        except OSError:
            return  # nothing listens: the request fails on its own, with no token sent anywhere
        finally:
            s.close()
        uid = int.from_bytes(cred[4:8], sys.byteorder)
    else:
        host = (u.hostname or "").rstrip(".").lower()
        port = u.port or (443 if u.scheme == "https" else 80)
        addrs = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")} if host == "localhost" \
            else {ipaddress.ip_address(host)}
        owner = _listener_owner(addrs, port)
        if owner is None:
            return  # nothing listens yet
        uid = owner
    if uid not in (me, 0):
        raise ConfigError(f"the token in the data directory is not sent to the daemon at {u.geturl()}: "
                          f"it belongs to user {uid}, not to you or root (pass a token to send one anyway)")


def _listener_owner(addrs: set[IPAddress], port: int) -> int | None:
    """The owner of the listening sockets that can take a connection to
    addrs:port, from /proc/net/tcp{,6}; two owners are a doubt, refused."""
    owner = None
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                lines = fh.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            col = line.split()
            if len(col) < 8 or col[3] != "0A":
                continue
            la, _, lp = col[1].partition(":")
            if int(lp, 16) != port:
                continue
            raw = bytes.fromhex(la)
            raw = b"".join(raw[i:i + 4][::-1] if sys.byteorder == "little" else raw[i:i + 4]
                           for i in range(0, len(raw), 4))
            l_ip = ipaddress.ip_address(raw)
            if isinstance(l_ip, ipaddress.IPv6Address) and l_ip.ipv4_mapped:
                l_ip = l_ip.ipv4_mapped
            if not any(_takes(l_ip, a) for a in addrs):
                continue
            uid = int(col[7])
            if owner is not None and uid != owner:
                raise ConfigError(f"users {owner} and {uid} both listen on port {port}")
            owner = uid
    return owner


def _takes(listen: IPAddress, dst: IPAddress) -> bool:
    if isinstance(dst, ipaddress.IPv6Address) and dst.ipv4_mapped:
        dst = dst.ipv4_mapped
    if listen == dst:
        return True
    if listen.is_unspecified:
        return listen.version == 6 or dst.version == 4
    return False
