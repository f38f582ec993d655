"""A network namespace of its own for each world: nobody else gets in.

A rank's TensorPipe agent and Gloo listen on 127.0.0.1 (and, in worlds with
message faults, on abstract unix sockets), and RPC runs pickled code from any
peer without authentication: on a shared host, any local user could connect
and run code in a test's processes. Loopback is no boundary between users; a
network namespace is. Each world's ranks share one that holds only ``lo``,
up: TCP ports and abstract unix sockets are per namespace, so nothing outside
can reach them, and every world has a port space of its own (two worlds can
both listen on 127.0.0.1:29500, as the tutorials' programs do). Files (the
FileStore), pipes and the supervisor's connections are not affected.

Who can make one (measured here, kernel 6.18):

- ``"net"``: a caller with CAP_SYS_ADMIN (root). ``unshare(CLONE_NEWNET)``
  moves only the calling thread, so it is done in a throw-away thread that
  opens an fd on the namespace: no process, about a millisecond.
- ``"user+net"``: an unprivileged caller where user namespaces are allowed.
  Making a user namespace needs a single-threaded process, which a pytest
  process is not, so a tiny helper process (this file, ``--serve``; one per
  supervisor process) makes one user namespace (ids mapped to themselves) and
  then a network namespace in it per world, sent back as an fd.
- neither (Docker's default seccomp profile, user namespaces turned off):
  :func:`create` raises :class:`IsolationUnavailable` saying why, and worlds
  run on the host's loopback, as they always did.

The supervisor passes the namespace to each rank in its process arguments
(multiprocessing sends the fds along, as it does a pipe's); the rank calls
:meth:`Namespace.enter` first thing, while it has one thread.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CAP_SYS_ADMIN = 21
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PR_SET_PDEATHSIG = 1

_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class IsolationUnavailable(OSError):
    """No network namespace can be made here; the message says why."""


# -- syscalls ---------------------------------------------------------------------
def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({_flag_names(flags)}): {os.strerror(err)}")


def _setns(fd: int, nstype: int) -> None:
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({_flag_names(nstype)}): {os.strerror(err)}")


def _drop_capabilities() -> None:
    """capset(2) to nothing: effective, permitted and inheritable (ambient
    follows permitted). Joining a user namespace gives every capability in it;
    a rank needs none, and with CAP_DAC_OVERRIDE/CAP_FOWNER over its own files
    user code would see different permission behaviour (a 0400 file of its own
    becomes writable)."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def _flag_names(flags: int) -> str:
    names = [n for n, v in (("CLONE_NEWUSER", CLONE_NEWUSER), ("CLONE_NEWNET", CLONE_NEWNET)) if flags & v]
    return "|".join(names) or hex(flags)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _has_cap(cap: int) -> bool:
    """Whether this thread has ``cap`` in its effective set (in its own user ns)."""
    try:
        with open("/proc/thread-self/status") as file:
            for line in file:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except OSError:
        pass
    return False


# -- inside a fresh namespace -----------------------------------------------------
def bring_up_loopback() -> None:
    """Set IFF_UP on ``lo`` in this thread's network namespace (what
    ``ip link set lo up`` does), with no iproute2: SIOCGIFFLAGS/SIOCSIFFLAGS on
    any AF_INET socket. A new namespace's ``lo`` already has 127.0.0.1/8 but is
    down; once up, 127.0.0.1 (and ::1) work. Needs CAP_NET_ADMIN over the
    namespace, which its creator has (as the owner of its user namespace when
    unprivileged)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sH22x", b"lo", 0)  # struct ifreq: name[16], short flags, pad to 40
        flags = struct.unpack_from("16xH", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, ifreq))[0]
        if not flags & IFF_UP:
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _configure_new_netns() -> int:
    """In a thread that just entered a new network namespace: lo up, and an
    fd on the namespace."""
    bring_up_loopback()
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


# -- the namespace handle -----------------------------------------------------------
class Namespace:
    """Open fds on one world's network namespace (and, unprivileged, the user
    namespace that owns it). Made by :func:`create` in the supervisor; pickled
    into a rank's process arguments it travels as fds (multiprocessing's
    ``DupFd``, the way a ``Pipe`` end travels), and the rank calls
    :meth:`enter`."""

    def __init__(self, net_fd: int, user_fd: int | None = None, kind: str = "net") -> None:
        self.net_fd: int | None = net_fd
        self.user_fd = user_fd
        self.kind = kind

    @property
    def id(self) -> str:
        """``net:[inode]``, as /proc/PID/ns/net of a process inside reads."""
        assert self.net_fd is not None, "closed"
        return os.readlink(f"/proc/self/fd/{self.net_fd}")

    def enter(self, close: bool = True, keep_capabilities: bool = False) -> None:
        """Move the calling process into the namespace (its *thread*, strictly:
        call it while the process has one thread). Sockets opened before stay
        where they were made (the supervisor's pipe is a socketpair: unaffected).
        After joining a user namespace every capability is dropped again unless
        ``keep_capabilities``; a root rank ("net") keeps what it had."""
        assert self.net_fd is not None, "closed"
        if self.user_fd is not None:
            threads = len(os.listdir("/proc/self/task"))
            if threads != 1:
                raise OSError(errno.EINVAL, f"joining a user namespace needs a single-threaded "
                                            f"process; this one has {threads} threads: enter "
                                            f"the namespace before starting any")
            # Full capabilities inside the user namespace from here on (only
            # over objects it owns: its network namespace, and files of our uid).
            _setns(self.user_fd, CLONE_NEWUSER)
        _setns(self.net_fd, CLONE_NEWNET)
        if self.user_fd is not None and not keep_capabilities:
            _drop_capabilities()
        if close:
            self.close()

    def close(self) -> None:
        for fd in (self.net_fd, self.user_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.net_fd = self.user_fd = None

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.id if self.net_fd is not None else "closed"
        return f"<Namespace {self.kind} {where}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Only as part of starting a child process: multiprocessing then sends
        # the fds with it (fork, spawn and forkserver alike).
        from multiprocessing import context, reduction

        if context.get_spawning_popen() is None:
            raise TypeError("a Namespace can only be pickled as an argument of a starting Process")
        assert self.net_fd is not None, "closed"
        user = reduction.DupFd(self.user_fd) if self.user_fd is not None else None
        return (_rebuild, (reduction.DupFd(self.net_fd), user, self.kind))


def _rebuild(net: Any, user: Any, kind: str) -> Namespace:
    return Namespace(net.detach(), user.detach() if user is not None else None, kind)


# -- making one ---------------------------------------------------------------------------
def create() -> Namespace:
    """A new network namespace with only ``lo``, up. Raises
    IsolationUnavailable, saying why."""
    reasons = []
    if _has_cap(CAP_SYS_ADMIN):
        try:
            return Namespace(_create_in_thread(), None, "net")
        except OSError as error:  # e.g. seccomp; a user namespace may still work
            reasons.append(_explain(error))
    else:
        reasons.append("no CAP_SYS_ADMIN for a plain network namespace")
    try:
        return _helper().new_namespace()
    except OSError as error:
        reasons.append(_explain(error))
    raise IsolationUnavailable("; ".join(reasons))


_HINTS = {
    errno.EPERM: "refused by the kernel's policy (kernel.unprivileged_userns_clone=0, "
                 "kernel.apparmor_restrict_unprivileged_userns=1, or a seccomp filter such "
                 "as Docker's default profile)",
    errno.ENOSPC: "namespace limit reached (user.max_user_namespaces / user.max_net_namespaces)",
    errno.ENOSYS: "the kernel has no such namespaces",
    errno.EINVAL: "not allowed here (a multi-threaded caller, or a kernel without CONFIG_USER_NS/NET_NS)",
}


def _explain(error: OSError) -> str:
    text = error.strerror or str(error)
    hint = _HINTS.get(error.errno or 0)
    return f"{text} ({hint})" if hint else text


def _create_in_thread() -> int:
    """unshare(CLONE_NEWNET) applies to the calling thread only: do it in a
    throw-away thread and keep the namespace by its fd."""
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            _unshare(CLONE_NEWNET)
            out["fd"] = _configure_new_netns()
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            out["error"] = error

    thread = threading.Thread(target=work, name="netns-create", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["fd"]


_probe: tuple[int, tuple[bool, str]] | None = None  # (pid, answer): a forked child probes again
_probe_lock = threading.Lock()


def isolation_available() -> tuple[bool, str]:
    """``(True, how)`` where this process can make namespaces, else ``(False, why)``.
    Probes by making (and dropping) one namespace, once per process."""
    global _probe
    with _probe_lock:
        if _probe is None or _probe[0] != os.getpid():
            try:
                with create() as ns:
                    how = ("made with CAP_SYS_ADMIN" if ns.kind == "net" else
                       "inside an unprivileged user namespace")
                answer = (True, how)
            except (IsolationUnavailable, OSError) as error:
                answer = (False, str(error))
            _probe = (os.getpid(), answer)
        return _probe[1]


# -- the helper process for the unprivileged case ----------------------------------
class _Helper:
    """Client side of ``netns.py --serve``: one per supervisor process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.lock = threading.Lock()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), "--serve", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, close_fds=True,
            )
        finally:
            theirs.close()
        message, fds = self._receive()
        if not message.startswith("ok"):
            self.close()
            raise _refusal(message)
        self.user_fd = fds[0]

    def _receive(self) -> tuple[str, list[int]]:
        message, fds, _flags, _addr = socket.recv_fds(self.sock, 4096, 2)
        if not message:
            raise OSError(errno.EPIPE, "the namespace helper exited")
        return message.decode(), fds

    def new_namespace(self) -> Namespace:
        with self.lock:
            self.sock.send(b"net")
            message, fds = self._receive()
        if not message.startswith("ok"):
            for fd in fds:
                os.close(fd)
            raise _refusal(message)
        return Namespace(fds[0], os.dup(self.user_fd), "user+net")

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def close(self) -> None:
        self.sock.close()  # EOF: the helper exits
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _refusal(message: str) -> OSError:
    """The helper's "error ERRNO text" as an OSError."""
    _, number, text = message.split(" ", 2)
    return OSError(int(number), text)


_helper_instance: _Helper | None = None
_helper_lock = threading.Lock()


def _helper() -> _Helper:
    global _helper_instance
    with _helper_lock:
        if _helper_instance is None or not _helper_instance.alive():
            if _helper_instance is not None and _helper_instance.pid == os.getpid():
                _helper_instance.close()
            _helper_instance = _Helper()  # raises OSError when userns is refused
        return _helper_instance


def _serve(fd: int) -> None:
    """The helper: make a user namespace, then a network namespace in it per
    request, and send each back as an fd. Exits when the supervisor's end closes."""
    sock = socket.socket(fileno=fd)
    # It ends when the supervisor's end of the socketpair closes (its exit,
    # SIGKILL included). Not PR_SET_PDEATHSIG: that fires when the *thread*
    # that started us exits, and create() may be called from any thread.
    uid, gid = os.geteuid(), os.getegid()
    try:
        _unshare(CLONE_NEWUSER)  # we are single-threaded: allowed
        # Map our ids to themselves (the only mapping an unprivileged process
        # may write): ranks then see their real uid/gid, and files they make
        # belong to the user as before. setgroups must be denied before gid_map.
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        user_fd = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        sock.send(f"error {error.errno} user namespace refused: {error.strerror}".encode())
        return
    socket.send_fds(sock, [b"ok"], [user_fd])
    os.close(user_fd)
    while True:
        request = sock.recv(4096).decode()
        if not request:
            return
        try:
            _unshare(CLONE_NEWNET)  # we hold CAP_SYS_ADMIN in our user namespace
            net_fd = _configure_new_netns()
        except OSError as error:
            sock.send(f"error {error.errno} network namespace refused: {error.strerror}".encode())
            continue
        socket.send_fds(sock, [b"ok"], [net_fd])
        os.close(net_fd)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(int(sys.argv[2]))
    else:
        print(isolation_available())
