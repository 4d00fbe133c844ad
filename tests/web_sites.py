"""Real websites on loopback for browser tests: one https and one http server that answer for
any host name, and the desktop settings that send a desktop's browser to them.

The https server has a self-signed certificate; the browser is told to trust its key
(`--ignore-certificate-errors-spki-list`, through `SCALECUA_CHROME_FLAGS`), and its
gateway maps every host's port 443 and 80 to these servers (`SCALECUA_BROWSER_HOSTS`), so
`https://www.lonelyplanet.com/` loads a page from here with its URL unchanged. Pages are
looked up by host and path; an unknown page is a small one titled after its host.

    async with LoopbackSites({("www.example.com", "/"): "<title>Example</title>"}) as sites:
        with sites.desktop_env(["www.example.com"]):    # set while desktops start
            desktop = await Desktop.start()
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runtime.envs.desktop.browser_net import HOSTS_ENV, NETWORK_ENV
from runtime.envs.desktop.chrome import CHROME_FLAGS_ENV


class LoopbackSites:
    """https and http servers on 127.0.0.1 serving `pages[(host, path)]` for any host."""

    def __init__(self, pages: dict[tuple[str, str], str] | None = None) -> None:
        self.pages = dict(pages or {})
        self.requests: list[tuple[str, str]] = []  # (host, path) in order
        self._runner: web.AppRunner | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="scalecua-sites-")
        self.https_port = self.http_port = 0
        self.spki = ""

    async def __aenter__(self) -> LoopbackSites:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tls = self._tls_context(Path(self._tmp.name))
        https = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=tls)
        http = web.TCPSite(self._runner, "127.0.0.1", 0)
        await https.start()
        await http.start()
        self.https_port = https._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.http_port = http._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._tmp.cleanup()

    @contextlib.contextmanager
    def desktop_env(self, hosts: list[str], flags: tuple[str, ...] = ()) -> Iterator[None]:
        """Set the browser settings of desktops started inside (restored on exit): `hosts`
        are served from here, every other name stays unreachable (the policy is local);
        `flags` are more browser flags."""
        mapped = [
            f"{host}:{port}=127.0.0.1:{local}"
            for host in hosts
            for port, local in ((443, self.https_port), (80, self.http_port))
        ]
        values = {
            HOSTS_ENV: ",".join(mapped),
            CHROME_FLAGS_ENV: " ".join(
                [f"--ignore-certificate-errors-spki-list={self.spki}", *flags]
            ),
            NETWORK_ENV: "local",
        }
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    async def _page(self, request: web.Request) -> web.Response:
        host = request.host.split(":")[0]
        self.requests.append((host, request.path_qs))
        html = self.pages.get((host, request.path_qs)) or self.pages.get((host, request.path))
        if html is None:
            html = f"<html><head><title>{host}</title></head><body><h1>{host}</h1></body></html>"
        return web.Response(text=html, content_type="text/html")

    def _tls_context(self, folder: Path) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scalecua loopback sites")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .sign(key, hashes.SHA256())
        )
        spki = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.spki = base64.b64encode(hashlib.sha256(spki).digest()).decode()
        (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / "key.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
        return context
