"""deploy/nginx-qkv-class.conf installed as docs/deploy.md says, on Debian's nginx: sites-enabled/default is
still there, with `listen 80 default_server` and `server_name _`. The shipped site said `server_name _` too;
nginx ignores the second one ("conflicting server name") and every request reached the default site's 404.
Here both sites share one port, as they do on port 80, and the class's name must reach the class."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SHIPPED = Path(__file__).resolve().parent.parent / "deploy" / "nginx-qkv-class.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
HOST = "class.example.org"  # the name the shipped files use, and docs/deploy.md says to edit

pytestmark = pytest.mark.skipif(NGINX is None, reason="no nginx on this machine (Debian: apt-get install -y nginx)")

# The lines of Debian's /etc/nginx/sites-available/default that decide which server answers.
DEBIAN_DEFAULT = """server {{
    listen 127.0.0.1:{port} default_server;
    server_name _;
    location / {{ return 404 "debian default site\\n"; }}
}}
"""


class Stub(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server calls it by this name
        body = b"a qkv-tui process\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_class_name_reaches_the_class_not_debians_default(tmp_path: Path) -> None:
    stubs = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub) for _ in range(2)]
    for stub in stubs:
        threading.Thread(target=stub.serve_forever, daemon=True).start()
    listen = http.server.HTTPServer(("127.0.0.1", 0), Stub)
    port = listen.server_address[1]
    listen.server_close()
    site = SHIPPED.read_text()
    for default, stub in zip((8001, 8002), stubs, strict=True):
        site = site.replace(f"127.0.0.1:{default}", f"127.0.0.1:{stub.server_address[1]}")
    assert site.count("listen 80;") == 1
    site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
    (tmp_path / "default").write_text(DEBIAN_DEFAULT.format(port=port))
    (tmp_path / "qkv-class").write_text(site)
    temp = "\n".join(f"    {kind}_temp_path {tmp_path / kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                            "uwsgi", "scgi"))
    (tmp_path / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {tmp_path / 'nginx.pid'};\nerror_log {tmp_path / 'error.log'};\n"
        f"events {{ worker_connections 64; }}\nhttp {{\n    access_log off;\n{temp}\n"
        f"    include {tmp_path / 'default'};\n    include {tmp_path / 'qkv-class'};\n}}\n")
    argv = [NGINX or "nginx", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(tmp_path / "nginx.conf")]
    checked = subprocess.run([*argv, "-t"], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert "conflicting server name" not in checked.stderr
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/class/", headers={"Host": HOST})
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    assert answer.status == 200
                    assert answer.read() == b"a qkv-tui process\n"
                    break
            except urllib.error.HTTPError as exc:
                pytest.fail(f"{HOST}/class/ answered {exc.code}: {exc.read().decode()!r}")
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)
        for stub in stubs:
            stub.shutdown()
