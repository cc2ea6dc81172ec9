"""jobq/web/auth.py -- the dashboard's sessions, CSRF tokens and login throttle.

A session is a random cookie; its CSRF token is an HMAC of it under a key
of this process.  Only a login (when a password is set) or a message
waiting to be shown stores anything for a session, so anonymous traffic
cannot fill the memory nor evict logged-in sessions.  Wrong passwords are
counted per client address and make it wait.
"""

import hmac
import re
import secrets
import threading
import time

SESSION_IDLE = 12 * 3600      # seconds a logged-in session lasts unused
SESSIONS_MAX = 10000          # logged-in sessions kept (only a login makes one)
FLASHES_MAX = 10000           # sessions with a message waiting to be shown
LOGIN_FAILS = 5               # wrong passwords a client may try ...
LOGIN_WINDOW = 300            # ... in this many seconds, then it waits
CLIENTS_MAX = 10000           # clients whose wrong passwords are remembered
SID_RE = re.compile(r"[A-Za-z0-9_-]{43}")


class Sessions:
    """Sessions that anonymous traffic cannot evict.

    A session id is a random cookie; its CSRF token is an HMAC of the id
    under a key of this process, so a visitor without a cookie costs no
    memory: nothing is stored for a session until it logs in (then it is
    kept, among the logged-in ones only, until SESSION_IDLE unused) or has a
    message to show after an action (kept among the messages, which are
    the only thing a flood of clients can push out).
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.key = secrets.token_bytes(32)
        self.authed = {}      # sid -> time.monotonic() of its last use
        self.flashes = {}     # sid -> [(kind, message)], oldest first

    def new(self):
        return secrets.token_urlsafe(32)

    def valid(self, sid):
        """Is sid the shape of an id this process hands out?"""
        return bool(sid) and SID_RE.fullmatch(sid) is not None

    def csrf(self, sid):
        return hmac.new(self.key, sid.encode(), "sha256").hexdigest()

    def is_authed(self, sid):
        with self.lock:
            seen = self.authed.get(sid)
            now = time.monotonic()
            if seen is None or now - seen > SESSION_IDLE:
                self.authed.pop(sid, None)
                return False
            self.authed[sid] = now
            return True

    def login(self):
        """A new logged-in session id."""
        sid = self.new()
        now = time.monotonic()
        with self.lock:
            for k in [k for k, t in self.authed.items() if now - t > SESSION_IDLE]:
                del self.authed[k]
            if len(self.authed) >= SESSIONS_MAX:
                del self.authed[min(self.authed, key=self.authed.get)]
            self.authed[sid] = now
        return sid

    def drop(self, sid):
        with self.lock:
            self.authed.pop(sid, None)
            self.flashes.pop(sid, None)

    def flash(self, sid, kind, msg):
        with self.lock:
            if sid not in self.flashes and len(self.flashes) >= FLASHES_MAX:
                del self.flashes[next(iter(self.flashes))]
            self.flashes.setdefault(sid, []).append((kind, msg))

    def pop_flash(self, sid):
        with self.lock:
            return self.flashes.pop(sid, [])


class Throttle:
    """Wrong passwords per client: LOGIN_FAILS in LOGIN_WINDOW seconds, then a wait.

    An attempt counts as wrong from the moment it starts (so parallel
    attempts cannot all slip in before the first is judged), and is taken
    back when the password was right.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.fails = {}       # client -> [time.monotonic() of each attempt]

    def attempt(self, client):
        """None: go ahead (then right() or nothing); else seconds to wait."""
        now = time.monotonic()
        with self.lock:
            recent = [t for t in self.fails.get(client, []) if now - t < LOGIN_WINDOW]
            if len(recent) >= LOGIN_FAILS:
                self.fails[client] = recent
                return int(recent[0] + LOGIN_WINDOW - now) + 1
            if client not in self.fails and len(self.fails) >= CLIENTS_MAX:
                for k in [k for k, v in self.fails.items() if not v or now - v[-1] >= LOGIN_WINDOW]:
                    del self.fails[k]
                if len(self.fails) >= CLIENTS_MAX:
                    del self.fails[min(self.fails, key=lambda k: self.fails[k][-1])]
            recent.append(now)
            self.fails[client] = recent
            return None

    def right(self, client):
        with self.lock:
            self.fails.pop(client, None)


class SessionView:
    """The current request's session."""

    def __init__(self, sessions, sid):
        self.sessions, self.sid = sessions, sid
        self.csrf = sessions.csrf(sid)
        self._authed = None

    @property
    def authed(self):
        if self._authed is None:
            self._authed = self.sessions.is_authed(self.sid)
        return self._authed

    def flash(self, kind, msg):
        self.sessions.flash(self.sid, kind, msg)

    def pop_flash(self):
        return self.sessions.pop_flash(self.sid)
