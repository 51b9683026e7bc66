"""The trust rule nxcc applies to a daemon's socket before it sends a compile there (the same rule,
and the same words, as ``nxcc compile --daemon``): the socket's directory is owned by the user
or root and not writable by group or others unless it is sticky (as ``/tmp``); it is reached
through no symbolic link another user could have placed (the path is resolved one component at
a time, a link followed only where the user or root could have put it); the socket is the
user's or root's. A daemon run by another user could answer a compile with anything.

The directory is held open by its descriptor, so what is connected to is what was checked."""

import errno
import os
import stat

#: What the daemon's places are called in messages, and where else to go.
NOUN = "the daemon's directory"
FILE = "the daemon's file"
INSTEAD = "choose a directory of your own (--socket, --pid-file, --log-file)"

_MAX_LINKS = 40


class Untrusted(Exception):
    """A place that breaks the rule, with what is wrong and what fixes it."""


def _me():
    return os.geteuid()


def _ours(st):
    return st.st_uid in (_me(), 0)


def _owner_problem(st):
    return "is owned by uid %d, not by you (uid %d) or root" % (st.st_uid, _me())


def _writers(mode):
    group, others = bool(mode & 0o020), bool(mode & 0o002)
    if group and others:
        return "group and others"
    return "its group" if group else "others"


def check_dir(st, path):
    """The directory rule (a sticky directory others can write passes)."""
    if not _ours(st):
        raise Untrusted(
            "%s %s %s; %s, or give it to yourself (chown %d %s)"
            % (NOUN, path, _owner_problem(st), INSTEAD, _me(), path)
        )
    mode = st.st_mode & 0o7777
    if mode & 0o022 and not mode & 0o1000:
        raise Untrusted(
            "%s %s is writable by %s (mode %04o); remove that permission (chmod go-w %s) or "
            "make it sticky (chmod +t %s)" % (NOUN, path, _writers(mode), mode, path, path)
        )


def _link_is_trusted(dir_st, link_st):
    if not _ours(dir_st):
        return False
    mode = dir_st.st_mode & 0o7777
    if not mode & 0o022:
        return True
    return bool(mode & 0o1000) and _ours(link_st)


def _components(path):
    return [c for c in path.split("/") if c and c != "."]


def open_dir(path):
    """The directory at ``path``, opened component by component (see the module's text) and
    checked; its descriptor (the caller closes it)."""
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    pending = list(reversed(_components(path)))
    cur = os.open("/", flags)
    shown = "/"
    links = 0
    try:
        while pending:
            name = pending.pop()
            try:
                nxt = os.open(name, flags | os.O_NOFOLLOW, dir_fd=cur)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                link = os.lstat(name, dir_fd=cur)
                if not stat.S_ISLNK(link.st_mode):
                    raise
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                if not _link_is_trusted(os.fstat(cur), link):
                    raise Untrusted(
                        "%s %s is reached through the symbolic link %s, which uid %d could have "
                        "placed (it is in a directory others can write); give the path without "
                        "the link, or %s"
                        % (NOUN, path, os.path.join(shown, name), link.st_uid, INSTEAD)
                    )
                target = os.readlink(name, dir_fd=cur)
                if target.startswith("/"):
                    os.close(cur)
                    cur = os.open("/", flags)
                    shown = "/"
                pending.extend(reversed(_components(target)))
                continue
            os.close(cur)
            cur = nxt
            shown = os.path.dirname(shown) if name == ".." else os.path.join(shown, name)
        check_dir(os.fstat(cur), path)
        return cur
    except BaseException:
        os.close(cur)
        raise


def check_socket_entry(dir_fd, name, path):
    """The socket in the checked directory: the user's or root's (``None`` when absent)."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if not _ours(st):
        raise Untrusted(
            "%s %s %s; remove it if it is not yours (rm %s), or %s"
            % (FILE, path, _owner_problem(st), path, INSTEAD)
        )
    return st


def check_private_dir(path):
    """The default place may be in /tmp: a directory of the user's own, mode 0700."""
    st = os.lstat(path)
    me = os.getuid()
    if not stat.S_ISDIR(st.st_mode):
        why = "it is not a directory"
    elif st.st_uid != me:
        why = "it belongs to uid %d, not %d" % (st.st_uid, me)
    elif st.st_mode & 0o077:
        why = "its mode is %04o; other users may enter it (expected 0700)" % (
            st.st_mode & 0o7777
        )
    else:
        return
    raise Untrusted("refusing to use the directory %s: %s" % (path, why))
