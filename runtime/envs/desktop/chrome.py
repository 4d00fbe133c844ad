"""Chrome as OSWorld's VM has it: Debian's chromium answering to `google-chrome`.

OSWorld's tasks launch `google-chrome --remote-debugging-port=1337`, forward port 9222 to it
with `socat tcp-listen:9222,fork tcp:localhost:1337`, read the profile under
`~/.config/google-chrome` and stop the browser with `pkill chrome`. A desktop's PATH
starts with wrappers (written by the server at start, `write_wrappers`) that make this
work with chromium:

- `google-chrome` (also `google-chrome-stable`, `chromium`, `chromium-browser`): chromium
  with `--user-data-dir=/home/user/.config/google-chrome`, no first-run, default-browser
  or keyring prompt, maximized, accessible through AT-SPI (`ACCESSIBILITY_ENABLED=1`: the
  address bar is in the accessibility tree, as OSWorld's `active_url_from_accessTree`
  expects), with no background traffic of its own (component updates, pings, sync...), in
  the desktop's own network, going out through the desktop's SOCKS gateway
  (browser_net.py). It runs as root of the desktop's user namespace, so with
  `--no-sandbox`: the desktop is the sandbox. `SCALECUA_CHROME_FLAGS` (space-separated) adds flags, e.g. a test's
  `--ignore-certificate-errors-spki-list=...` for its local https server.
- `socat`: the real one; its listening addresses get `reuseaddr` so a reset desktop can
  listen on 9222 again at once.
- `pkill`, `pgrep`: a pattern that matches `chrome` but not `chromium` also matches the
  browser's processes, which are named chromium here (Chrome's are named chrome). A bare
  `pkill chrome` returns once the browser has exited (and saved its profile), and a
  browser started meanwhile waits for it (`WAIT_STOPPED`), as OSWorld's postconfig needs.

`seed_profile` writes the profile a used VM would have (run by every home restore, before
any task step: a task may edit `Default/Preferences` before it starts Chrome): first run
done, Google as the default search engine, as in Google Chrome.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

__all__ = [
    "CHROMIUM",
    "CHROME_FLAGS_ENV",
    "PROFILE",
    "WAIT_STOPPED",
    "chrome_flags",
    "seed_profile",
    "wrapper_scripts",
    "write_wrappers",
    "BROWSER_NAMES",
]

CHROMIUM = "/usr/lib/chromium/chromium"  # the binary behind Debian's /usr/bin/chromium script
PROFILE = ".config/google-chrome"  # the user data folder OSWorld's getters read, under the home
CHROME_FLAGS_ENV = "SCALECUA_CHROME_FLAGS"
_HOME = "/home/user"
BROWSER_NAMES = ("google-chrome", "google-chrome-stable", "chromium", "chromium-browser")
# What a browser wrapper that is still waiting is named (a process name keeps 15 characters).
_WRAPPER_COMMS = ("google-chrome", "google-chrome-s", "chromium-browse")

# Google as Google Chrome sets it (prepopulated engine 1); Debian's chromium would pick
# DuckDuckGo. Tasks search in the address bar and expect www.google.com/search?q=...
_GOOGLE = {
    "keyword": "google.com",
    "short_name": "Google",
    "url": "{google:baseURL}search?q={searchTerms}&{google:RLZ}"
    "{google:originalQueryForSuggestion}{google:assistedQueryStats}"
    "{google:searchFieldtrialParameter}{google:iOSSearchLanguage}{google:prefetchSource}"
    "{google:searchClient}{google:sourceId}{google:contextualSearchVersion}ie={inputEncoding}",
    "suggestions_url": "{google:baseSuggestURL}search?{google:searchFieldtrialParameter}"
    "client={google:suggestClient}&gs_ri={google:suggestRid}&xssi=t&q={searchTerms}"
    "&{google:inputType}{google:omniboxFocusType}{google:cursorPosition}"
    "{google:currentPageUrl}{google:pageClassification}{google:clientCacheTimeToLive}"
    "{google:searchVersion}{google:sessionToken}{google:prefetchQuery}sugkey={google:suggestAPIKeyParameter}",
    "favicon_url": "https://www.google.com/images/branding/product/ico/googleg_alldp.ico",
    "prepopulate_id": 1,
    "input_encodings": ["UTF-8"],
    "safe_for_autoreplace": True,
}
_PREFERENCES = {
    "browser": {"has_seen_welcome_page": True, "check_default_browser": False},
    "default_search_provider_data": {"template_url_data": _GOOGLE},
    "profile": {"exit_type": "Normal", "exited_cleanly": True},
}


def chrome_flags(gateway_port: int) -> list[str]:
    """The flags every browser start gets (a task's own flags come after and win)."""
    flags = [
        f"--user-data-dir={_HOME}/{PROFILE}",
        "--no-sandbox",  # root of the desktop's user namespace; the desktop is the sandbox
        "--test-type",  # no "unsupported command-line flag" bar for --no-sandbox
        "--no-first-run",
        "--no-default-browser-check",
        "--password-store=basic",  # no keyring prompt
        "--start-maximized",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-domain-reliability",
        "--disable-sync",
        "--no-pings",
        "--media-router=0",
    ]
    # Out through the desktop's gateway, which resolves names; loopback (the desktop's own
    # servers, and the browser's debugging port) stays direct.
    return [*flags, f"--proxy-server=socks5://127.0.0.1:{gateway_port}"]


# OSWorld's postconfig kills the browser and starts it again at once, then reads the
# profile, which the browser saves as it exits; a `launch` step returns before its `pkill`
# has even run. So while a `pkill ... chrom...` process exists (from the moment `launch`
# forks it), the browser wrapper and the profile getters wait, at most 15 s; and a bare
# `pkill chrome` lasts until the browser is gone.
WAIT_STOPPED = (
    "i=0; while /usr/bin/pgrep -f '[p]kill .*chrom' >/dev/null && [ $i -lt 150 ]; "
    "do sleep 0.1; i=$((i + 1)); done"
)

_BROWSER = """#!/bin/sh
# google-chrome as on OSWorld's VM: Debian's chromium (runtime/envs/desktop/chrome.py)
{wait}
export ACCESSIBILITY_ENABLED=1
# Launchers the browser writes (Create shortcut) start it through this wrapper, as Debian's
# /usr/bin/chromium arranges for its own.
export CHROME_WRAPPER="$(command -v google-chrome)"
exec {chromium} {flags} ${flags_env} "$@"
"""

_SOCAT = """#!/bin/sh
# socat as the VM's tasks run it (chrome.py); a listening address gets reuseaddr, so a reset
# desktop can listen on 9222 again at once
n=$#
for a do
  case "$(printf %s "$a" | tr A-Z a-z)" in
    tcp-listen:*|tcp4-listen:*|tcp6-listen:*|tcp-l:*|tcp4-l:*|tcp6-l:*)
      case "$a" in *reuseaddr*) ;; *) a="$a,reuseaddr" ;; esac ;;
  esac
  set -- "$@" "$a"
done
shift "$n"
exec /usr/bin/socat "$@"
"""

# The browser's processes are named chromium here, chrome on the VM: a pattern that matches
# "chrome" and not "chromium" gets "|^chromium$". A bare `pkill chrome` spares a starting
# browser's wrapper (it waits for this pkill before it starts the browser) and lasts until
# the browser has exited (at most 15 s).
_PROCESS_TOOL = """#!/bin/sh
# {tool} as on OSWorld's VM, where the browser's processes are named chrome (chrome.py)
n=$#
i=0
browser=
for a do
  i=$((i + 1))
  if [ "$i" -eq "$n" ] && [ "${{a#-}}" = "$a" ] \\
     && printf chrome | grep -Eq -- "$a" 2>/dev/null \\
     && ! printf chromium | grep -Eq -- "$a" 2>/dev/null; then
    a="($a)|^chromium\\$"
    browser=1
  fi
  set -- "$@" "$a"
done
shift "$n"
if [ {tool} != pkill ] || [ -z "$browser" ] || [ "$n" -ne 1 ]; then
  exec /usr/bin/{tool} "$@"
fi
victims=
for pid in $(/usr/bin/pgrep -- "$1"); do
  case "$(cat /proc/$pid/comm 2>/dev/null)" in
    {wrappers}) ;;
    *) victims="$victims $pid" ;;
  esac
done
[ -n "$victims" ] || exit 1
kill $victims 2>/dev/null
i=0
while [ $i -lt 150 ] && /usr/bin/pgrep -x chromium >/dev/null; do sleep 0.1; i=$((i + 1)); done
exit 0
"""


def wrapper_scripts(gateway_port: int) -> dict[str, str]:
    """The wrapper programs by name, for a desktop whose gateway listens on `gateway_port`."""
    flags = " ".join(shlex.quote(f) for f in chrome_flags(gateway_port))
    browser = _BROWSER.format(
        wait=WAIT_STOPPED, chromium=CHROMIUM, flags=flags, flags_env=CHROME_FLAGS_ENV
    )
    scripts = {name: browser for name in BROWSER_NAMES}
    scripts["socat"] = _SOCAT
    for tool in ("pkill", "pgrep"):
        scripts[tool] = _PROCESS_TOOL.format(tool=tool, wrappers="|".join(_WRAPPER_COMMS))
    return scripts


def write_wrappers(bin_dir: Path, gateway_port: int) -> None:
    """Write the browser's wrapper programs into a desktop's wrapper folder."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in wrapper_scripts(gateway_port).items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


def seed_profile(home: Path) -> None:
    """Write the browser profile of OSWorld's VM user into `home` (past its first run)."""
    profile = home / PROFILE
    (profile / "Default").mkdir(parents=True, exist_ok=True)
    (profile / "First Run").touch()
    (profile / "Default" / "Preferences").write_text(json.dumps(_PREFERENCES))
