"""`sudo` on a desktop's PATH: asks for OSWorld's VM password as sudo does, then runs the command.

Everything in a desktop already runs as root of its user namespace, where the real
setuid sudo refuses to run (its owner, host root, is not mapped there). Tasks and agents
written for OSWorld's VM still type `echo password | sudo -S cmd` or `sudo cmd` and the
password at the prompt, so this keeps sudo's behaviour as they see it:

- `-S` reads the password from stdin one byte at a time, so whatever follows its line is
  left to the command; otherwise it prompts on the terminal without echo (no terminal:
  sudo's error); `-n` never prompts;
- a wrong password gets "Sorry, try again." (three tries), then "N incorrect password
  attempts" and status 1; a right one is remembered for 15 minutes, as sudo's default
  `timestamp_type=tty` keys it: per terminal session (the terminal, its session and that
  session leader's start time) and, with no terminal, per parent process (its pid and
  start time), so `echo password | sudo -S a && sudo b` in one shell asks once, as on the VM;
- `-k` ignores (and with no command forgets) the remembered password, `-K` forgets it,
  `-v` refreshes it;
- `-s`/`-i` run a shell (with the command, if any); `-u`, `-E`, `-H` and the like are
  accepted and ignored (the command runs as root either way).

Standard library only; run by Debian's python3 from the wrapper that wrappers.py writes:

    python3 -I sudo.py PASSWORD [sudo options] command [args...]
"""

from __future__ import annotations

import os
import sys
import termios
import time

__all__ = ["authenticate", "main", "parse"]

_VALUED_SHORT = set("uUgpCDhrRtT")  # short options that take a value
_VALUED_LONG = {
    "--user", "--group", "--prompt", "--chdir", "--other-user", "--host", "--close-from",
    "--role", "--type", "--command-timeout",
}  # fmt: skip
_REMEMBER_SECONDS = 15 * 60  # sudo's default timestamp_timeout
_VERSION = "Sudo version 1.9.13p3"


def parse(argv: list[str]) -> tuple[dict[str, bool], list[str]]:
    """Split sudo's options from the command; return the flags that matter and the command."""
    flags = {"stdin": False, "shell": False, "login": False, "interactive": True}
    flags |= {"reset": False, "remove": False, "validate": False}
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        arg = args.pop(0)
        if arg == "--":
            break
        if arg.startswith("--"):
            name, has_value, _ = arg.partition("=")
            if name in _VALUED_LONG and not has_value and args:
                args.pop(0)
            letters = {"--stdin": "S", "--shell": "s", "--login": "i", "--version": "V"}
            letters |= {"--non-interactive": "n", "--reset-timestamp": "k"}
            letters |= {"--remove-timestamp": "K", "--validate": "v"}
            arg = "-" + letters.get(name, "")
        for i, letter in enumerate(arg[1:]):
            if letter in _VALUED_SHORT:
                if not arg[i + 2 :] and args:
                    args.pop(0)
                break
            if letter == "V":
                print(_VERSION)
                sys.exit(0)
            flags["stdin"] |= letter == "S"
            flags["shell"] |= letter == "s"
            flags["login"] |= letter == "i"
            flags["interactive"] &= letter != "n"
            flags["reset"] |= letter == "k"
            flags["remove"] |= letter == "K"
            flags["validate"] |= letter == "v"
    return flags, args


def _read_line(fd: int) -> str | None:
    """One line from fd, read byte by byte (the rest stays for the command); None at EOF."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            return data.decode(errors="replace") if data else None
        data += chunk
    return data[:-1].decode(errors="replace")


def _ask(fd: int, prompt_fd: int) -> str | None:
    """Prompt as sudo does and read a password, without echo on a terminal."""
    os.write(prompt_fd, b"[sudo] password for user: ")
    if not os.isatty(fd):
        return _read_line(fd)
    saved = termios.tcgetattr(fd)
    quiet = termios.tcgetattr(fd)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSAFLUSH, quiet)
    try:
        return _read_line(fd)
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)
        os.write(prompt_fd, b"\n")


def _stat_fields(pid: int | str) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (state is [0])."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # The command name may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def _stamp() -> str | None:
    """The file whose age says when this terminal session (or, with none, parent) last
    gave the password; None where there is nowhere to keep it."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime_dir:
        return None
    try:
        me = _stat_fields("self")
        tty, session, parent = int(me[4]), int(me[3]), int(me[1])
        # Start times (clock ticks since boot) tell a reused pid from the one remembered.
        if tty:  # a controlling terminal, even when stdin is a pipe
            key = f"tty{tty}-{session}-{_stat_fields(session)[19].decode()}"
        else:
            key = f"ppid{parent}-{_stat_fields(parent)[19].decode()}"
    except (OSError, IndexError, ValueError):
        return None
    return os.path.join(runtime_dir, "sudo", key)


def _remembered(stamp: str | None) -> bool:
    """Whether `stamp` says the password was given less than the timeout ago."""
    try:
        return stamp is not None and time.time() - os.stat(stamp).st_mtime < _REMEMBER_SECONDS
    except OSError:
        return False


def _remember(stamp: str | None) -> None:
    if stamp:
        os.makedirs(os.path.dirname(stamp), mode=0o700, exist_ok=True)
        with open(stamp, "a"):
            os.utime(stamp)


def _forget(stamp: str | None) -> None:
    if stamp:
        try:
            os.unlink(stamp)
        except FileNotFoundError:
            pass


def authenticate(password: str, flags: dict[str, bool]) -> None:
    """Return if the right password was given (or recently); else exit as sudo does."""
    stamp = _stamp()
    if not flags["reset"] and _remembered(stamp):
        _remember(stamp)  # sudo restarts the timeout on every use
        return
    if flags["stdin"]:
        fd, prompt_fd = 0, 2
    elif not flags["interactive"]:
        sys.exit("sudo: a password is required")
    else:
        try:
            fd = prompt_fd = os.open("/dev/tty", os.O_RDWR)
        except OSError:
            sys.exit(
                "sudo: a terminal is required to read the password; either use the -S "
                "option to read from standard input or configure an askpass helper"
            )
    wrong = 0
    for _ in range(3):
        given = _ask(fd, prompt_fd)
        if given == password:
            if not flags["reset"]:  # `sudo -k cmd` asks this once and remembers nothing
                _remember(stamp)
            return
        if given is None:
            sys.stderr.write("sudo: no password was provided\n")
            break
        wrong += 1
        if wrong < 3:
            os.write(prompt_fd, b"Sorry, try again.\n")
    if wrong:
        sys.stderr.write(f"sudo: {wrong} incorrect password attempt{'s' * (wrong > 1)}\n")
    sys.exit(1)


def main() -> None:
    """Authenticate, then exec the command (or a shell) in this process."""
    password, argv = sys.argv[1], sys.argv[2:]
    flags, command = parse(argv)
    if flags["remove"] or (flags["reset"] and not command and not flags["validate"]):
        _forget(_stamp())  # `sudo -K` / `sudo -k`: the next sudo asks again
        return
    if flags["validate"]:
        flags["reset"] = False
        authenticate(password, flags)
        return
    if not command and not (flags["shell"] or flags["login"]):
        sys.exit("usage: sudo [-S] [-u user] command [arg ...]")
    authenticate(password, flags)
    if flags["shell"] or flags["login"]:
        shell = os.environ.get("SHELL") or "/bin/bash"
        run = [shell, "-l"] if flags["login"] else [shell]
        command = run + (["-c", " ".join(command)] if command else [])
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        sys.exit(f"sudo: {command[0]}: command not found")
    except OSError as exc:
        sys.exit(f"sudo: {command[0]}: {exc.strerror}")


if __name__ == "__main__":
    main()
