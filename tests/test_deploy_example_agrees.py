"""deploy/: the systemd unit starts each process with a command line the CLI accepts, on the port and with the
public address that nginx's config gives that process's path, and the config's comments say the same."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from qkv_tui.edges import cli
from qkv_tui.edges.serve.server import public_url_problem

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
UNIT = (DEPLOY / "qkv-class@.service").read_text()
NGINX = (DEPLOY / "nginx-qkv-class.conf").read_text()


def exec_start(instance: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", UNIT)
    line = next(line for line in joined.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart=").replace("%i", instance))


@pytest.mark.parametrize("instance", ["1", "2"])
def test_each_process_is_where_nginx_sends_its_path(instance: str) -> None:
    argv = exec_start(instance)
    assert argv[0].endswith("/qkv-tui")
    args = cli._parser().parse_args(argv[1:])
    assert args.serve and cli.misplaced(args) is None
    assert args.public_url is not None and public_url_problem(args.public_url) is None
    assert args.max_students is not None and args.max_students >= 1
    path = re.sub(r"^https?://[^/]+", "", args.public_url)
    assert path == f"/class/{instance}/"
    block = re.search(rf"location {re.escape(path)} \{{(.*?)\}}", NGINX, re.DOTALL)
    assert block is not None, f"no nginx location for {path}"
    assert f"proxy_pass http://127.0.0.1:{args.port}/;" in block.group(1)
    assert "proxy_set_header Upgrade $http_upgrade;" in block.group(1)
    assert f"server 127.0.0.1:{args.port} max_fails=0;" in NGINX  # the page may come from it too
    # the config's own comment names the same command line
    assert f"--port {args.port} --public-url {args.public_url} --max-students {args.max_students}" in NGINX
