"""`vlc` on a desktop's PATH: VLC's own launcher, less its refusal to run as root.

Everything in a desktop runs as root of its user namespace, and Debian's /usr/bin/vlc
exits at once when its effective uid is 0 ("VLC is not supposed to be run as root").
The player itself is libvlc, and the launcher is a few calls into it; this program makes
the same calls through ctypes, in the same order, so VLC starts as it does on OSWorld's VM
(the Qt interface, plus whatever vlcrc's `extraintf` adds: the HTTP interface) and quits
when its interface asks to. The process is named `vlc`, so `pkill vlc` finds it.

Standard library only; run by Debian's python3 from the wrapper that wrappers.py writes:

    python3 -I vlc_launch.py [vlc options] [files or URLs]
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

__all__ = ["main"]

_PR_SET_NAME = 15
# As VLC's launcher: read and write vlcrc, keep the media library and statistics.
_LAUNCHER_OPTIONS = ("--no-ignore-config", "--media-library", "--stats")
_WAITED = {signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM}


def main() -> int:
    """Start libvlc with the command line, wait for a quit signal or the interface, release."""
    ctypes.CDLL(None).prctl(_PR_SET_NAME, b"vlc", 0, 0, 0)
    try:
        lib = ctypes.CDLL("libvlc.so.5")
    except OSError as exc:
        print(f"vlc: libvlc is not installed: {exc}", file=sys.stderr)
        return 1
    lib.libvlc_new.restype = ctypes.c_void_p
    lib.libvlc_new.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.libvlc_add_intf.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.libvlc_playlist_play.argtypes = [ctypes.c_void_p]
    lib.libvlc_release.argtypes = [ctypes.c_void_p]
    exit_handler = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    lib.libvlc_set_exit_handler.argtypes = [ctypes.c_void_p, exit_handler, ctypes.c_void_p]
    lib.libvlc_set_app_id.argtypes = [ctypes.c_void_p] + [ctypes.c_char_p] * 3
    lib.libvlc_set_user_agent.argtypes = [ctypes.c_void_p] + [ctypes.c_char_p] * 2

    # Signals are taken synchronously by this thread; libvlc's threads must not see them.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    blocked = _WAITED | {signal.SIGCHLD, signal.SIGPIPE}
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    os.environ.pop("DESKTOP_STARTUP_ID", None)

    args = [a.encode() for a in (*_LAUNCHER_OPTIONS, *sys.argv[1:])]
    vlc = lib.libvlc_new(len(args), (ctypes.c_char_p * (len(args) + 1))(*args, None))
    if not vlc:
        return 1
    me = threading.get_ident()
    on_exit = exit_handler(lambda _data: signal.pthread_kill(me, signal.SIGTERM))
    lib.libvlc_set_exit_handler(vlc, on_exit, None)
    lib.libvlc_set_app_id(vlc, b"org.VideoLAN.VLC", b"3.0", b"VLC media player")
    lib.libvlc_set_user_agent(vlc, b"VLC media player", b"VLC/3.0")
    lib.libvlc_add_intf(vlc, b"hotkeys,none")
    lib.libvlc_add_intf(vlc, b"globalhotkeys,none")
    if lib.libvlc_add_intf(vlc, None) != 0:
        print("vlc: cannot start any interface. Exiting.", file=sys.stderr)
        lib.libvlc_release(vlc)
        return 1
    lib.libvlc_playlist_play(vlc)
    # Qt wants SIGCHLD through a handler: unblock it once libvlc's threads exist.
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked - {signal.SIGCHLD})
    signal.sigwait(_WAITED)
    lib.libvlc_release(vlc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
